//! The kept runs in the browser's IndexedDB, so that a reload keeps them:
//! database "stepscope-runs", object store "runs", one value under "list"
//! (the records as MessagePack). A database of its own: Reset forgets the
//! autosaved run by clearing that store, and must not forget the runs.

use wasm_bindgen::{JsCast, JsValue};
use web_sys::{IdbDatabase, IdbTransactionMode};

use super::runs::RunRecord;
use super::store::{describe, done, open_database};

const DB: &str = "stepscope-runs";
const STORE: &str = "runs";
const KEY: &str = "list";

async fn open() -> Result<IdbDatabase, String> {
    open_database(DB, STORE).await
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
