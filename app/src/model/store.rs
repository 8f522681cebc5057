//! The browser's IndexedDB as a small key-value store for autosaved
//! checkpoints: database "stepscope", object store "autosave".

use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{IdbDatabase, IdbOpenDbRequest, IdbRequest, IdbTransaction, IdbTransactionMode};

const DB: &str = "stepscope";
const STORE: &str = "autosave";

pub(crate) fn describe(err: JsValue) -> String {
    err.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| err.as_string())
        .unwrap_or_else(|| "IndexedDB refused the request".into())
}

/// Resolves with the request's result once it succeeds.
pub(crate) async fn done(request: &IdbRequest) -> Result<JsValue, String> {
    let promise = js_sys::Promise::new(&mut |resolve, reject| {
        request.set_onsuccess(Some(&resolve));
        request.set_onerror(Some(&reject));
    });
    JsFuture::from(promise).await.map_err(|_| request_error(request))?;
    request.result().map_err(describe)
}

fn request_error(request: &IdbRequest) -> String {
    match request.error() {
        Ok(Some(e)) => format!("IndexedDB: {}", e.message()),
        _ => "IndexedDB refused the request".into(),
    }
}

/// Resolves when the transaction has committed.
fn committed(tx: &IdbTransaction) -> JsFuture {
    JsFuture::from(js_sys::Promise::new(&mut |resolve, reject| {
        tx.set_oncomplete(Some(&resolve));
        tx.set_onerror(Some(&reject));
        tx.set_onabort(Some(&reject));
    }))
}

async fn open() -> Result<IdbDatabase, String> {
    open_database(DB, STORE).await
}

/// Opens database `name` (version 1), creating its one object store
/// `store` on first use; from the page's window or the training worker's
/// global scope.
pub(crate) async fn open_database(name: &str, store: &'static str) -> Result<IdbDatabase, String> {
    // The page's window, or the training worker's global scope.
    let global = js_sys::global();
    let factory = match global.dyn_ref::<web_sys::Window>() {
        Some(window) => window.indexed_db(),
        None => global.unchecked_ref::<web_sys::WorkerGlobalScope>().indexed_db(),
    }
    .map_err(describe)?
    .ok_or("this browser has no IndexedDB (private mode?)")?;
    let request: IdbOpenDbRequest = factory.open_with_u32(name, 1).map_err(describe)?;
    let upgrade = Closure::<dyn FnMut(web_sys::Event)>::new(move |ev: web_sys::Event| {
        let db = ev
            .target()
            .and_then(|t| t.dyn_into::<IdbOpenDbRequest>().ok())
            .and_then(|r| r.result().ok())
            .and_then(|r| r.dyn_into::<IdbDatabase>().ok());
        if let Some(db) = db {
            let _ = db.create_object_store(store);
        }
    });
    request.set_onupgradeneeded(Some(upgrade.as_ref().unchecked_ref()));
    let db = done(&request).await;
    request.set_onupgradeneeded(None);
    drop(upgrade);
    db?.dyn_into::<IdbDatabase>().map_err(|_| "IndexedDB returned no database".into())
}

/// Stores `values` under their keys in one transaction (all or nothing),
/// if `wanted()` still holds once the database is open (checked just before
/// the transaction begins: IndexedDB runs transactions on a store in the
/// order they begin, so a `clear` begun after a `wanted` that turned false
/// can never be overtaken by this write). Whether it wrote.
pub async fn put_if(values: &[(&str, JsValue)], wanted: impl Fn() -> bool) -> Result<bool, String> {
    let db = open().await?;
    if !wanted() {
        db.close();
        return Ok(false);
    }
    let tx = db.transaction_with_str_and_mode(STORE, IdbTransactionMode::Readwrite).map_err(describe)?;
    let commit = committed(&tx);
    let store = tx.object_store(STORE).map_err(describe)?;
    for (key, value) in values {
        if let Err(err) = store.put_with_key(value, &JsValue::from_str(key)) {
            // A request that throws does not end the transaction: without
            // the abort it would commit the puts before this one (a
            // checkpoint without its CSV).
            let _ = tx.abort();
            db.close();
            return Err(describe(err));
        }
    }
    let result = commit.await.map_err(|_| match tx.error() {
        Some(e) => format!("IndexedDB: {}", e.message()),
        None => "IndexedDB did not store the checkpoint".into(),
    });
    db.close();
    result.map(|_| true)
}

/// The value under `key`, if any.
pub async fn get(key: &str) -> Result<Option<JsValue>, String> {
    let db = open().await?;
    let tx = db.transaction_with_str(STORE).map_err(describe)?;
    let store = tx.object_store(STORE).map_err(describe)?;
    let request = store.get(&JsValue::from_str(key)).map_err(describe)?;
    let value = done(&request).await;
    db.close();
    let value = value?;
    Ok((!value.is_undefined() && !value.is_null()).then_some(value))
}

/// Removes every stored value.
pub async fn clear() -> Result<(), String> {
    let db = open().await?;
    let tx = db.transaction_with_str_and_mode(STORE, IdbTransactionMode::Readwrite).map_err(describe)?;
    let commit = committed(&tx);
    tx.object_store(STORE).map_err(describe)?.clear().map_err(describe)?;
    let result = commit.await.map(|_| ()).map_err(|_| "IndexedDB did not clear the autosave".to_string());
    db.close();
    result
}
