//! Conv nets (`--only conv`): the GPU engine against the CPU engine on
//! ConvNetJS's MNIST net and a CIFAR-sized net, at batch 64 and 256, in
//! images per second measured side by side; each conv layer's kernels in
//! GFLOP/s in both variants (direct; implicit GEMM), forward against the
//! FMA probe on the same adapter; and the variants the calibration picked.

use std::sync::Arc;

use stepscope_core::gpu::matmul::MatmulVariant;
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
        "| net | batch | CPU images/s | GPU images/s, K = 1 | GPU images/s, K = {K} | GPU/CPU (K = {K}) | conv GFLOP/s by layer, direct: forward, ∂x, ∂W (forward's share of the FMA probe) | the same, implicit GEMM | picked by the calibration (forward ∂x ∂W; D direct, G implicit GEMM) |"
    ));
    line("|---|---|---|---|---|---|---|---|---|".into());
    for w in CONV_WORKLOADS {
        for batch in [64, 256] {
            let (e, data) = w.build(batch);
            let images = |steps_per_s: f64| steps_per_s * batch as f64;
            let cpu = images(cpu_steps_per_second(&e, &data, false)?);
            let k1 = images(gpu_steps(ctx, &e, &data, 1, Path::Phased, false)?.steps_per_second);
            let kk = images(gpu_steps(ctx, &e, &data, K, Path::Phased, false)?.steps_per_second);
            let mut convs = [Vec::new(), Vec::new()];
            let layers = Layout::new(&e).layers;
            for (l, shape) in layers.iter().enumerate() {
                if let LayerOp::Conv(s) = shape.op {
                    for (out, v) in convs.iter_mut().zip([MatmulVariant::Blocked, MatmulVariant::Tiled]) {
                        let [f, dx, dw] = block_on(probe::conv_gflops(ctx, v, batch, &s, TARGET_S)).map_err(gpu_err)?;
                        out.push(format!("{l}: {f:.1}, {dx:.1}, {dw:.1} ({:.0} %)", 100.0 * f / peak));
                    }
                }
            }
            // What the engine runs: the variants the calibration picked.
            let mut trainer = super::gpu_trainer(ctx, &e, &data)?;
            let picked = trainer.gpu_engine().map(|g| g.matmuls().to_vec()).unwrap_or_default();
            let letter = |v: MatmulVariant| if v == MatmulVariant::Tiled { "G" } else { "D" };
            let picks: Vec<String> = layers
                .iter()
                .zip(&picked)
                .enumerate()
                .filter(|(_, (shape, _))| matches!(shape.op, LayerOp::Conv(_)))
                .map(|(l, (_, m))| {
                    let dx = if l == 0 { "-" } else { letter(m.backward_input) };
                    format!("{l}: {} {dx} {}", letter(m.forward), letter(m.backward_weight))
                })
                .collect();
            line(format!(
                "| {} | {batch} | {cpu:.0} | {k1:.0} | {kk:.0} | {:.2}× | {} | {} | {} |",
                w.name,
                kk / cpu,
                convs[0].join(", "),
                convs[1].join(", "),
                picks.join(", ")
            ));
        }
    }
    line(String::new());
    line("Images/s = steps/s × batch, each engine training the same net on the same random images (SGD with momentum, cross-entropy); the CPU engine on one thread. The GPU runs the phased kernels (`gpu::conv`), each conv kernel in the variant the calibration timed faster on this adapter (the last column; both give the same bits): direct (register-blocked, no barriers; ∂W in two passes over segments of the terms) or implicit GEMM (the patch matrix gathered tile by tile into workgroup memory, 64 × 64 outputs a workgroup). The GFLOP/s columns time each conv kernel alone at each conv layer's shape (2·B·F·C·K·K·OH·OW FLOPs each; the first layer's ∂x is timed though training skips it).".into());
    line(String::new());
    Ok(())
}
