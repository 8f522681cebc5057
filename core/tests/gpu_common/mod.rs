//! Shared by the GPU twin tests: one device per test binary, seeded data,
//! and the awkward sizes every kernel is tried on.
#![allow(dead_code)]

use std::sync::OnceLock;

use stepscope_core::gpu::harness::{run_kernel, Arg};
use stepscope_core::gpu::params::FLAGS_INIT;
use stepscope_core::gpu::{GpuContext, Kernel};
use stepscope_core::rng::Rng;

/// The device. Fails (does not skip) when no adapter exists: CI installs
/// lavapipe, so a missing adapter is a broken set-up, not a pass.
pub fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| GpuContext::new_blocking().expect("GPU tests need an adapter (CI installs lavapipe)"))
}

/// Runs a kernel and returns its `Out` buffers.
pub fn run(kernel: Kernel, args: &[Arg<'_>], workgroups: [u32; 3]) -> Vec<Vec<u8>> {
    pollster::block_on(run_kernel(ctx(), kernel, args, workgroups)).expect("kernel runs")
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
