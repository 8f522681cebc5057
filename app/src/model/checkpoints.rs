//! Automatic checkpoints: every N steps the run's state is read back,
//! serialized to the core's .safetensors format and kept, the latest few
//! in memory (for "back to the last good checkpoint" and device-loss
//! recovery) and the newest in IndexedDB (so a reload does not lose the
//! run).
//!
//! Synchronously, the training loop waits for all of it: the stall shows
//! in the timeline. In the background, the loop only queues the GPU copies
//! (or clones the CPU state) and goes on training; a separate task awaits
//! the readback, serializes and stores.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;

use stepscope_core::checkpoint::{read_checkpoint_header, save_checkpoint};
use stepscope_core::trainer::StateRead;
use stepscope_core::{Error, Experiment, TrainState};
use wasm_bindgen::{JsCast, JsValue};
use web_time::Instant;

use super::store;

/// Checkpoints kept in memory: at most this many, and at most
/// `KEEP_BYTES` of them (the newest is always kept), so that a large
/// network's ring does not hold gigabytes (16 × 1024 with Adam: 190 MB a
/// state).
const KEEP: usize = 4;
const KEEP_BYTES: usize = 256 << 20;
const KEY: &str = "checkpoint";
const CSV_KEY: &str = "csv";

/// One checkpoint kept in memory.
#[derive(Clone, Debug)]
pub struct Saved {
    pub step: u64,
    pub state: TrainState,
}

/// The most recent checkpoints, oldest first.
pub type Ring = Rc<RefCell<VecDeque<Saved>>>;

pub fn remember(ring: &Ring, state: TrainState) {
    let mut ring = ring.borrow_mut();
    ring.retain(|s| s.step != state.step());
    ring.push_back(Saved { step: state.step(), state });
    let bytes = |s: &Saved| 4 * s.state.params.len() + s.state.optimizer.bytes();
    while ring.len() > KEEP || (ring.len() > 1 && ring.iter().map(bytes).sum::<usize>() > KEEP_BYTES) {
        ring.pop_front();
    }
}

/// The newest checkpoint from before `step`.
pub fn latest_before(ring: &Ring, step: u64) -> Option<Saved> {
    ring.borrow().iter().rev().find(|s| s.step < step).cloned()
}

/// What one automatic checkpoint cost.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointReport {
    pub step: u64,
    pub bytes: usize,
    pub background: bool,
    /// Time the training loop waited (the stall in the timeline).
    pub loop_ms: f64,
    /// Readback, serialization and storage, end to end.
    pub total_ms: f64,
    /// Whether IndexedDB took it (the message when not).
    pub stored: Result<(), String>,
}

/// Which autosave is current: a reset forgets the autosaved run and moves
/// it on, and a checkpoint of an earlier generation, still being stored
/// then, is not written (it would bring the forgotten run back on reload).
pub type AutosaveGeneration = Rc<Cell<u64>>;

/// The CSV the autosave holds as far as the loop knows (None: unknown,
/// written with the next checkpoint; `Some(None)`: no CSV).
pub type StoredCsv = Rc<RefCell<Option<Option<Arc<String>>>>>;

/// Finishes a state read begun for a checkpoint, serializes it, keeps
/// the state in `ring` and stores the file in IndexedDB, with the CSV the
/// run trains on (if any) when it is not stored already: a large CSV is
/// hundreds of megabytes as a JavaScript string, too much to write again
/// with every checkpoint.
pub async fn complete(
    read: StateRead,
    ring: Ring,
    csv: Option<Arc<String>>,
    stored_csv: StoredCsv,
    generation: (AutosaveGeneration, u64),
    started: Instant,
    background: bool,
) -> Result<CheckpointReport, Error> {
    let step = read.step();
    let state = read.finish().await?;
    let bytes = save_checkpoint(&state)?;
    remember(&ring, state);
    let array = js_sys::Uint8Array::from(bytes.as_slice());
    let mut values = vec![(KEY, JsValue::from(array))];
    let same = |known: &Option<Option<Arc<String>>>| match (known, &csv) {
        (Some(Some(a)), Some(b)) => Arc::ptr_eq(a, b),
        (Some(None), None) => true,
        _ => false,
    };
    let write_csv = !same(&stored_csv.borrow());
    if write_csv {
        values.push((CSV_KEY, csv.as_ref().map_or(JsValue::NULL, |c| JsValue::from_str(c))));
    }
    let (current, mine) = generation;
    let stored = store::put_if(&values, || current.get() == mine).await;
    if write_csv && stored == Ok(true) {
        *stored_csv.borrow_mut() = Some(csv);
    }
    let stored = stored.map(drop);
    Ok(CheckpointReport {
        step,
        bytes: bytes.len(),
        background,
        loop_ms: 0.0,
        total_ms: started.elapsed().as_secs_f64() * 1e3,
        stored,
    })
}

/// The run autosaved in this browser: the checkpoint file, what its
/// header says (experiment and step), and the CSV it trains on.
pub struct Autosave {
    pub bytes: Vec<u8>,
    pub experiment: Experiment,
    pub step: u64,
    pub csv: Option<Arc<String>>,
}

/// The autosaved run of this browser, if any. Only the file's header is
/// read here (a large network's file is hundreds of megabytes, and this
/// runs on the page's thread); the engine's side loads and checks the
/// whole file when it starts from it. A header that does not read, or an
/// experiment past the page's limits, is reported, not used.
pub async fn load_autosave() -> Result<Option<Autosave>, String> {
    let Some(value) = store::get(KEY).await? else { return Ok(None) };
    let Some(array) = value.dyn_ref::<js_sys::Uint8Array>() else {
        return Err("the autosaved checkpoint is not a byte array".into());
    };
    let bytes = array.to_vec();
    let (experiment, step) =
        read_checkpoint_header(&bytes).map_err(|e| format!("the autosaved checkpoint is unusable: {e}"))?;
    crate::model::edit::page_check(&experiment, None)
        .map_err(|e| format!("the autosaved checkpoint is unusable: {e}"))?;
    let csv = store::get(CSV_KEY).await?.and_then(|v| v.as_string()).map(Arc::new);
    Ok(Some(Autosave { bytes, experiment, step, csv }))
}

/// Forgets the autosaved run (a reset starts over for good).
pub async fn clear_autosave() -> Result<(), String> {
    store::clear().await
}
