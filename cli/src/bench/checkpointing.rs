//! Activation checkpointing: what it saves and what it costs, measured
//! side by side. Memory comes from the engines' own buffers; time as
//! steps per second with checkpointing on against off, one run right after
//! the other on each engine, so the ratio is what matters.

use std::sync::Arc;

use stepscope_core::engine::CheckpointingTrade;
use stepscope_core::gpu::GpuContext;
use stepscope_core::model::Layout;

use super::{cpu_steps_per_second, gpu_steps, synthetic, Path};
use crate::Failure;

/// Steps per submit on the GPU: enough to amortise the readback, few
/// enough that a slow adapter finishes a measurement.
const PER_SUBMIT: usize = 16;

pub fn section(ctx: &Arc<GpuContext>, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    line("## Activation checkpointing: memory saved, time added".into());
    line(String::new());
    line("| model | batch | activations kept, off → on | saved | recompute FLOPs / step FLOPs | CPU steps/s off | CPU on/off | GPU steps/s off | GPU on/off |".into());
    line("|---|---|---|---|---|---|---|---|---|".into());
    for (widths, batch) in [
        (&[2usize, 16, 16, 1][..], 32usize),
        (&[64, 256, 256, 10], 256),
        (&[64, 256, 256, 256, 256, 256, 256, 10], 256),
        (&[784, 512, 512, 10], 1024),
    ] {
        let (experiment, data) = synthetic(widths, batch);
        let layout = Layout::new(&experiment);
        let trade = CheckpointingTrade::new(&layout, batch);
        let mut engine = super::gpu_trainer(ctx, &experiment, &data)?;
        let off_bytes = engine.memory().activations;
        engine.set_activation_checkpointing(true)?;
        let on_bytes = engine.memory().activations;
        drop(engine);
        let cpu_off = cpu_steps_per_second(&experiment, &data, false)?;
        let cpu_on = cpu_steps_per_second(&experiment, &data, true)?;
        let gpu_off = gpu_steps(ctx, &experiment, &data, PER_SUBMIT, Path::Phased, false)?.steps_per_second;
        let gpu_on = gpu_steps(ctx, &experiment, &data, PER_SUBMIT, Path::Phased, true)?.steps_per_second;
        let name = widths.iter().map(usize::to_string).collect::<Vec<_>>().join("-");
        line(format!(
            "| {name} | {batch} | {} → {} | {:.0} % | {:.0} % | {cpu_off:.1} | {:.2} | {gpu_off:.1} | {:.2} |",
            kib(off_bytes),
            kib(on_bytes),
            100.0 * (off_bytes - on_bytes) as f64 / off_bytes as f64,
            100.0 * trade.flops_added(),
            cpu_on / cpu_off,
            gpu_on / gpu_off,
        ));
    }
    line(String::new());
    line(format!("Activations kept: bytes forward holds for backward, from the engines' buffers (2·4·B·Σ O off, 4·B·(Σ O + max O) on). Recompute FLOPs: one more dense forward per layer, 2·B·Σ I·O, against a step's forward and backward matmuls; on/off below 1 is the time added (0.75 = a third more time per step). GPU: K = {PER_SUBMIT} steps per submit, a step one pass."));
    line(String::new());
    Ok(())
}

fn kib(bytes: u64) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}
