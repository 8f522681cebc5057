//! Shared by the GPU twin tests: one device per test binary, seeded data,
//! and the awkward sizes every kernel is tried on.
//!
//! Each twin test's body is an `async fn`, written once, and runs on both
//! targets through `twin_test!`: natively as a `#[test]` driven by
//! pollster (CI's lavapipe), and in the browser as a `#[wasm_bindgen_test]`
//! on WebGPU (the crate in `tests/` includes these files by path).
#![allow(dead_code)]

pub mod optim;

use stepscope_core::gpu::harness::Arg;
use stepscope_core::gpu::launch::Launch;
use stepscope_core::gpu::params::FLAGS_INIT;
use stepscope_core::gpu::GpuContext;
use stepscope_core::rng::Rng;

/// Runs the twin test body `async fn $name()` on both targets, as the test
/// `$name::twin`: natively a `#[test]` blocking on it, in the browser a
/// `#[wasm_bindgen_test]` awaiting it. Use it right after the body:
/// `twin_test!(dense_forward_matches_cpu);`.
#[allow(unused_macros)]
macro_rules! twin_test {
    ($name:ident) => {
        mod $name {
            #[cfg(not(target_arch = "wasm32"))]
            #[test]
            fn twin() {
                pollster::block_on(super::$name());
            }

            #[cfg(target_arch = "wasm32")]
            #[wasm_bindgen_test::wasm_bindgen_test]
            async fn twin() {
                super::$name().await;
            }
        }
    };
}
#[allow(unused_imports)] // gpu_training.rs shares this module but not the macro
pub(crate) use twin_test;

/// The device, made on first use. Fails (does not skip) when no adapter
/// exists: CI installs lavapipe (natively) and runs Chromium with WebGPU
/// on SwiftShader (browser), so a missing adapter is a broken set-up, not
/// a pass.
pub async fn context() -> &'static GpuContext {
    #[cfg(not(target_arch = "wasm32"))]
    {
        ctx()
    }
    #[cfg(target_arch = "wasm32")]
    {
        if let Some(ctx) = WEB_CTX.with(|c| c.get().copied()) {
            return ctx;
        }
        let made = GpuContext::new().await.expect("GPU tests need a WebGPU adapter (Chromium: --enable-unsafe-webgpu)");
        // Another test may have made one while this one awaited: keep the first.
        WEB_CTX.with(|c| *c.get_or_init(|| Box::leak(Box::new(made))))
    }
}

#[cfg(target_arch = "wasm32")]
thread_local! {
    /// wgpu's web types are not Sync: one context per (the only) thread.
    static WEB_CTX: std::cell::OnceCell<&'static GpuContext> = const { std::cell::OnceCell::new() };
}

/// The device, without awaiting. Natively it is made here (blocking); in
/// the browser it must already exist: call `context().await` (or `run`)
/// first.
pub fn ctx() -> &'static GpuContext {
    #[cfg(not(target_arch = "wasm32"))]
    {
        static CTX: std::sync::OnceLock<GpuContext> = std::sync::OnceLock::new();
        CTX.get_or_init(|| GpuContext::new_blocking().expect("GPU tests need an adapter (CI installs lavapipe)"))
    }
    #[cfg(target_arch = "wasm32")]
    {
        WEB_CTX.with(|c| c.get().copied()).expect("the browser's GPU context is made by `context().await` first")
    }
}

/// Runs a launch (the plan's own `Params` and grid, `gpu::launch`) on
/// `args` and returns its `Out` buffers.
pub async fn run_launch<P: bytemuck::Pod, const N: usize>(launch: &Launch<P, N>, args: [Arg<'_>; N]) -> Vec<Vec<u8>> {
    launch.run(context().await, args).await.expect("kernel runs")
}

pub fn random(n: usize, seed: u64, scale: f64) -> Vec<f32> {
    let mut rng = Rng::new(seed, 99);
    (0..n).map(|_| rng.uniform(-scale, scale) as f32).collect()
}

/// Awkward sizes: 1, one short of a tile, a tile, one past, and more.
pub const SIZES: [usize; 6] = [1, 7, 63, 64, 65, 257];
/// Batches, one not divisible by the 64-row tile.
pub const BATCHES: [usize; 3] = [1, 33, 100];

pub fn flags() -> Vec<u8> {
    bytemuck::cast_slice(&FLAGS_INIT).to_vec()
}

pub fn flags_at_step(step: u32, micro: u32) -> Vec<u8> {
    let mut f = FLAGS_INIT;
    f[1] = step;
    f[2] = micro;
    bytemuck::cast_slice(&f).to_vec()
}

/// f32 rounding of a sum of n terms, in either order: γ_n·Σ|terms| with
/// γ_n ≈ n·2⁻²⁴ (Higham, Accuracy and Stability, §3.1); two orders differ
/// by at most twice that.
pub fn sum_tolerance(n: usize, abs_sum: f32) -> f32 {
    2.0 * n as f32 * (f32::EPSILON / 2.0) * abs_sum
}
