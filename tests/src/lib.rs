//! Browser tests for Stepscope; everything is in `tests/`:
//!
//! - `gpu_kernels.rs`: the WGSL kernels against their CPU twins, the same
//!   test bodies as `core/tests/gpu_*.rs` (included by path), on WebGPU.
//! - `gpu_engine.rs`: the GPU engine against the CPU engine on WebGPU.
//! - `app.rs`: the page's components, mounted and driven through the DOM
//!   (the harness that mounts and drives them: `page/mod.rs`).
//!
//! Run them in headless Chromium (WebGPU on its SwiftShader adapter):
//! `WASM_BINDGEN_TEST_TIMEOUT=120 cargo test --target wasm32-unknown-unknown -p stepscope-browser-tests`.
