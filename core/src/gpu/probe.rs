//! Throughput probes: the adapter's FMA peak (`shaders/fma_peak.wgsl`) and
//! the forward matmul (`shaders/dense_forward.wgsl` or its blocked variant) at a given shape, in
//! GFLOP/s. `stepscope bench` and the browser benchmark call the same
//! functions, so "share of the FMA probe" means one thing everywhere.
//!
//! Each figure times one dispatch as `gpu::timing` does (repeated in one
//! pass until a measurement lasts `target_s`).

use super::launch;
use super::matmul::{self, Matmul, MatmulVariant};
use super::timing::{buffer, seconds_per_dispatch};
use super::GpuContext;
use crate::error::Result;

/// GFLOP/s of `shaders/fma_peak.wgsl`: `workgroups` × 256 invocations, each
/// 1,024 iterations of 8 independent FMAs (16 FLOPs).
pub async fn fma_peak_gflops(ctx: &GpuContext, workgroups: u32, target_s: f64) -> Result<f64> {
    let iterations = 1024u32;
    let out = buffer(ctx, "fma out", &vec![0u8; 4 * 256 * workgroups as usize], wgpu::BufferUsages::STORAGE);
    let d = launch::fma_peak(workgroups, iterations).bind(ctx, "fma_peak", [&out]);
    let t = seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await?;
    let flops = 256.0 * workgroups as f64 * iterations as f64 * 8.0 * 2.0;
    Ok(flops / t / 1e9)
}

/// GFLOP/s (2·B·I·O per dispatch) of the forward kernel's `variant` on
/// seeded data of shape x (B, I), W (O, I), dispatched as the training
/// plan dispatches it (`gpu::matmul`).
pub async fn matmul_gflops(
    ctx: &GpuContext,
    variant: MatmulVariant,
    batch: usize,
    inputs: usize,
    units: usize,
    target_s: f64,
) -> Result<f64> {
    let t = matmul::time_full(ctx, Matmul::Forward, variant, (batch, inputs, units), target_s).await?;
    Ok(Matmul::flops(batch, inputs, units) / t / 1e9)
}

/// GFLOP/s of a convolution's three kernels in variant `v` (each
/// 2·B·F·C·K·K·P FLOPs a dispatch) on seeded data of its shape, dispatched
/// as the training plan dispatches them (`gpu::conv::time_conv_at`):
/// [forward, input gradient, weight gradient (its two passes)].
pub async fn conv_gflops(
    ctx: &GpuContext,
    v: MatmulVariant,
    batch: usize,
    s: &crate::model::conv::Conv2d,
    target_s: f64,
) -> Result<[f64; 3]> {
    let flops = 2.0 * (batch * s.macs()) as f64 / 1e9;
    let mut out = [0.0; 3];
    for (g, m) in out.iter_mut().zip(Matmul::ALL) {
        *g = flops / super::conv::time_conv_at(ctx, m, v, batch, s, target_s).await?;
    }
    Ok(out)
}
