//! The WGSL kernels against their CPU twins on WebGPU: the very test bodies
//! of `core/tests/gpu_*.rs` (which run natively on lavapipe), included by
//! path and run through their `twin_test!` browser wrappers. They share one
//! device (`gpu_common`, declared here once).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "../../core/tests/gpu_common/mod.rs"]
mod gpu_common;

#[path = "../../core/tests/gpu_backward.rs"]
mod gpu_backward;
#[path = "../../core/tests/gpu_conv.rs"]
mod gpu_conv;
#[path = "../../core/tests/gpu_dense_forward.rs"]
mod gpu_dense_forward;
#[path = "../../core/tests/gpu_gpt/main.rs"]
mod gpu_gpt;
#[path = "../../core/tests/gpu_misc.rs"]
mod gpu_misc;
#[path = "../../core/tests/gpu_optim.rs"]
mod gpu_optim;
#[path = "../../core/tests/gpu_optim_adaptive.rs"]
mod gpu_optim_adaptive;

/// The kernels above ran on WebGPU (not a fallback of some other kind);
/// names the adapter in the log.
#[wasm_bindgen_test::wasm_bindgen_test]
async fn the_adapter_is_webgpu() {
    let ctx = gpu_common::context().await;
    wasm_bindgen_test::console_log!("adapter: {} ({:?})", ctx.describe(), ctx.adapter_info);
    assert_eq!(format!("{:?}", ctx.adapter_info.backend), "BrowserWebGpu", "{}", ctx.describe());
}
