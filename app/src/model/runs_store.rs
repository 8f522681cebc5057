//! The kept runs in the browser's IndexedDB, so that a reload keeps them:
//! database "stepscope-runs", object store "runs", one value under "list"
//! (the records as MessagePack). A database of its own: Reset forgets the
//! autosaved run by clearing that store, and must not forget the runs.

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{IdbDatabase, IdbOpenDbRequest, IdbRequest, IdbTransactionMode};

use super::runs::RunRecord;

const DB: &str = "stepscope-runs";
const STORE: &str = "runs";
const KEY: &str = "list";

fn describe(err: JsValue) -> String {
    err.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| err.as_string())
        .unwrap_or_else(|| "IndexedDB refused the request".into())
}

/// Resolves with the request's result once it succeeds.
async fn done(request: &IdbRequest) -> Result<JsValue, String> {
    let promise = js_sys::Promise::new(&mut |resolve, reject| {
        request.set_onsuccess(Some(&resolve));
        request.set_onerror(Some(&reject));
    });
    JsFuture::from(promise).await.map_err(|_| match request.error() {
        Ok(Some(e)) => format!("IndexedDB: {}", e.message()),
        _ => "IndexedDB refused the request".into(),
    })?;
    request.result().map_err(describe)
}

async fn open() -> Result<IdbDatabase, String> {
    let factory = web_sys::window()
        .ok_or("no window")?
        .indexed_db()
        .map_err(describe)?
        .ok_or("this browser has no IndexedDB (private mode?)")?;
    let request: IdbOpenDbRequest = factory.open_with_u32(DB, 1).map_err(describe)?;
    let upgrade = Closure::<dyn FnMut(web_sys::Event)>::new(move |ev: web_sys::Event| {
        let db = ev
            .target()
            .and_then(|t| t.dyn_into::<IdbOpenDbRequest>().ok())
            .and_then(|r| r.result().ok())
            .and_then(|r| r.dyn_into::<IdbDatabase>().ok());
        if let Some(db) = db {
            let _ = db.create_object_store(STORE);
        }
    });
    request.set_onupgradeneeded(Some(upgrade.as_ref().unchecked_ref()));
    let db = done(&request).await;
    request.set_onupgradeneeded(None);
    drop(upgrade);
    db?.dyn_into::<IdbDatabase>().map_err(|_| "IndexedDB returned no database".into())
}

/// Stores `runs` in place of what was stored.
pub async fn save(runs: &[RunRecord]) -> Result<(), String> {
    let bytes = rmp_serde::to_vec_named(runs).map_err(|e| format!("the runs did not encode: {e}"))?;
    let db = open().await?;
    let tx = db.transaction_with_str_and_mode(STORE, IdbTransactionMode::Readwrite).map_err(describe)?;
    let store = tx.object_store(STORE).map_err(describe)?;
    let value = js_sys::Uint8Array::from(bytes.as_slice());
    let request = store.put_with_key(&value, &JsValue::from_str(KEY)).map_err(describe);
    let result = match request {
        Ok(request) => done(&request).await.map(drop),
        Err(why) => Err(why),
    };
    db.close();
    result
}

/// The runs stored by an earlier visit (none when nothing was stored).
pub async fn load() -> Result<Vec<RunRecord>, String> {
    let db = open().await?;
    let tx = db.transaction_with_str(STORE).map_err(describe)?;
    let store = tx.object_store(STORE).map_err(describe)?;
    let request = store.get(&JsValue::from_str(KEY)).map_err(describe)?;
    let value = done(&request).await;
    db.close();
    let value = value?;
    if value.is_undefined() || value.is_null() {
        return Ok(Vec::new());
    }
    let bytes =
        value.dyn_into::<js_sys::Uint8Array>().map_err(|_| "the stored runs are not bytes".to_string())?.to_vec();
    rmp_serde::from_slice(&bytes).map_err(|e| format!("the stored runs did not decode: {e}"))
}
