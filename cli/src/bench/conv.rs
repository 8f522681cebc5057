//! Conv nets (`--only conv`): the GPU engine against the CPU engine on
//! ConvNetJS's MNIST net and a CIFAR-sized net, at batch 64 and 256, in
//! images per second measured side by side; and each conv layer's forward
//! kernel in GFLOP/s against the FMA probe on the same adapter.

use std::sync::Arc;

use stepscope_core::gpu::{probe, GpuContext};
use stepscope_core::model::{LayerOp, Layout};
use stepscope_core::trainer::block_on;
use stepscope_core::workloads::CONV_WORKLOADS;

use super::{cpu_steps_per_second, gpu_err, gpu_steps, Path, TARGET_S};
use crate::Failure;

/// Steps per submit of the GPU's batched column: enough to hide a
/// submit's overhead, few enough that a software adapter's slow steps
/// finish.
const K: usize = 8;

pub fn section(ctx: &Arc<GpuContext>, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    let peak = block_on(probe::fma_peak_gflops(ctx, 4096, TARGET_S)).map_err(gpu_err)?;
    line("## Conv nets, GPU engine against CPU engine".into());
    line(String::new());
    line(format!("FMA probe on this adapter: {peak:.1} GFLOP/s."));
    line(String::new());
    line(format!(
        "| net | batch | CPU images/s | GPU images/s, K = 1 | GPU images/s, K = {K} | GPU/CPU (K = {K}) | conv GFLOP/s by layer: forward, ∂x, ∂W (forward's share of the FMA probe) |"
    ));
    line("|---|---|---|---|---|---|---|".into());
    for w in CONV_WORKLOADS {
        for batch in [64, 256] {
            let (e, data) = w.build(batch);
            let images = |steps_per_s: f64| steps_per_s * batch as f64;
            let cpu = images(cpu_steps_per_second(&e, &data, false)?);
            let k1 = images(gpu_steps(ctx, &e, &data, 1, Path::Phased, false)?.steps_per_second);
            let kk = images(gpu_steps(ctx, &e, &data, K, Path::Phased, false)?.steps_per_second);
            let mut convs = Vec::new();
            for (l, shape) in Layout::new(&e).layers.iter().enumerate() {
                if let LayerOp::Conv(s) = shape.op {
                    let [f, dx, dw] = block_on(probe::conv_gflops(ctx, batch, &s, TARGET_S)).map_err(gpu_err)?;
                    convs.push(format!("{l}: {f:.1}, {dx:.1}, {dw:.1} ({:.0} %)", 100.0 * f / peak));
                }
            }
            line(format!(
                "| {} | {batch} | {cpu:.0} | {k1:.0} | {kk:.0} | {:.2}× | {} |",
                w.name,
                kk / cpu,
                convs.join(", ")
            ));
        }
    }
    line(String::new());
    line("Images/s = steps/s × batch, each engine training the same net on the same random images (SGD with momentum, cross-entropy); the CPU engine on one thread. The GPU runs the phased kernels (`gpu::conv`: a direct convolution per output, ∂W as a workgroup reduction per weight); the last column times each conv kernel alone at each conv layer's shape (2·B·F·C·K·K·OH·OW FLOPs each; the first layer's ∂x is timed though training skips it).".into());
    line(String::new());
    Ok(())
}
