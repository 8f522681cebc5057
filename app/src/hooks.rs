//! Hooks for the end-to-end test, called from the test's page script
//! through trunk's `window.wasmBindings`. They only queue commands that a
//! real failure would cause, so the page's own handling is what is tested,
//! or read what a benchmark samples.

use std::cell::RefCell;

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::model::runner::{push, Command, Commands};

thread_local! {
    static COMMANDS: RefCell<Option<Commands>> = const { RefCell::new(None) };
}

/// Called once by the page: where the hooks queue their commands.
pub fn register(commands: Commands) {
    COMMANDS.with(|c| *c.borrow_mut() = Some(commands));
}

/// Destroys the GPU device of the running engine (`GPUDevice.destroy()`),
/// as a driver reset or a lost GPU process would, at the loop's next
/// command boundary. Returns false before the page is mounted.
#[wasm_bindgen]
pub fn stepscope_test_lose_device() -> bool {
    COMMANDS.with(|c| c.borrow().as_ref().map(|commands| push(commands, Command::LoseDevice)).is_some())
}

/// Makes the GPU device of the running engine refuse work: it is asked for
/// a buffer past its size limit and reports a validation error, a GPU error
/// that is not a device loss. Returns false before the page is mounted.
#[wasm_bindgen]
pub fn stepscope_test_refuse_gpu_work() -> bool {
    COMMANDS.with(|c| c.borrow().as_ref().map(|commands| push(commands, Command::RefuseGpuWork)).is_some())
}

/// Bytes of the page's WebAssembly memory (it only grows), plus the
/// training worker's as of its last reply, for the soak benchmark
/// (tests/e2e/bench/soak.mjs).
#[wasm_bindgen]
pub fn stepscope_wasm_memory_bytes() -> f64 {
    let page = wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map_or(0.0, |m| m.buffer().dyn_into::<js_sys::ArrayBuffer>().map_or(0.0, |b| f64::from(b.byte_length())));
    page + crate::model::host::worker_memory_bytes()
}
