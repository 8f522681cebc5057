//! The step's anatomy as the page measures it: profiled steps
//! (`stepscope_core::engine::profile`) on both engines, forward : backward
//! beside the FLOP ratio. The CPU's profiled step repeats each phase in a
//! burst long enough for the clock; the GPU's runs the phased kernels with a
//! timestamp pair per phase. Several profiled steps after a warm-up; the
//! medians are reported, each with its bound from the clock.

use std::sync::Arc;

use stepscope_core::engine::profile::{step_flops, Burst, Measured, PhaseProfile, ProfilePath};
use stepscope_core::gpu::GpuContext;
use stepscope_core::trainer::block_on;
use stepscope_core::Trainer;

use super::{gpu_trainer, synthetic};
use crate::Failure;

/// Profiled steps per engine and network; the first steps before them warm up.
const PROFILED: usize = 9;
const WARM_UP: usize = 20;

pub fn section(ctx: &Arc<GpuContext>, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    line("## The step's anatomy: profiled steps, forward : backward against the FLOPs".into());
    line(String::new());
    line("| model | batch | FLOP ratio fwd : bwd | engine | path | forward ms | backward ms | optimizer ms | measured fwd : bwd | measured / FLOP ratio |".into());
    line("|---|---|---|---|---|---|---|---|---|---|".into());
    // W1 is the page's default network (2-16-16-1 tanh, BCE with logits,
    // batch 32); the others are relu, as the GPU comparisons.
    let page_default = stepscope_core::workloads::workload("W1").expect("W1");
    for (widths, batch, activation) in [
        (page_default.widths, page_default.batch, page_default.activation),
        (&[2usize, 16, 16, 1][..], 32usize, "relu"),
        (&[64, 256, 256, 10], 256, "relu"),
        (&[784, 512, 512, 10], 1024, "relu"),
    ] {
        let (experiment, data) = if activation == "relu" { synthetic(widths, batch) } else { page_default.build() };
        let (f, b) = step_flops(widths, batch, 1);
        let flop_ratio = b / f;
        let name = widths.iter().map(usize::to_string).collect::<Vec<_>>().join("-") + " " + activation;
        let mut row = |engine: &str, p: Option<PhaseProfile>| {
            let Some(p) = p else {
                line(format!(
                    "| {name} | {batch} | 1 : {flop_ratio:.2} | {engine} | no timestamp queries | — | — | — | — | — |"
                ));
                return;
            };
            let cell = |m: &Measured| format!("{:.4} ± {:.1e}", m.ms, m.uncertainty_ms);
            let ratio = p.backward.ms / p.forward.ms;
            let path = match p.path {
                ProfilePath::CpuBurst => format!("bursts of ≥ {} reps", p.forward.reps.min(p.backward.reps)),
                ProfilePath::CpuClock => "one reading".into(),
                ProfilePath::GpuTimestamps => "phased kernels, timestamps".into(),
            };
            line(format!(
                "| {name} | {batch} | 1 : {flop_ratio:.2} | {engine} | {path} | {} | {} | {} | 1 : {ratio:.2} | {:.2} |",
                cell(&p.forward),
                cell(&p.backward),
                cell(&p.optimizer),
                ratio / flop_ratio
            ));
        };
        let mut cpu = Trainer::fresh(&experiment, data.clone(), None)?;
        row("CPU", Some(cpu_profile(&mut cpu)?));
        let mut gpu = gpu_trainer(ctx, &experiment, &data)?;
        row("GPU", gpu_profile(&mut gpu)?);
    }
    line(String::new());
    line("Each row is the median of 9 profiled steps after 20 unprofiled ones, as the page profiles them; ± is the most the clock's (or the timestamps') resolution can put a figure off by. On the CPU the FLOP ratio is what backward should cost against forward; on a GPU a small layer's kernels are launch-bound, so the ratio there follows the dispatch counts more than the FLOPs.".into());
    line(String::new());
    Ok(())
}

fn cpu_profile(trainer: &mut Trainer) -> Result<PhaseProfile, Failure> {
    block_on(trainer.run(WARM_UP, 1))?;
    let burst = Burst::for_clock();
    let mut found = Vec::new();
    for _ in 0..PROFILED {
        found.push(trainer.profile_step(&burst)?.1);
    }
    Ok(median(found))
}

fn gpu_profile(trainer: &mut Trainer) -> Result<Option<PhaseProfile>, Failure> {
    let has_timestamps = trainer.gpu_engine().is_some_and(|g| g.has_timestamps());
    if !has_timestamps {
        return Ok(None);
    }
    block_on(trainer.run(WARM_UP, WARM_UP))?;
    let mut found = Vec::new();
    for _ in 0..PROFILED {
        trainer.submit_profiled()?;
        let metrics = block_on(trainer.collect())?;
        let m = metrics.last().expect("a profiled submit is one step");
        let r = trainer.gpu_engine().and_then(|g| g.timestamp_resolution_ms()).unwrap_or(0.0);
        found.push(PhaseProfile::single(m.step, ProfilePath::GpuTimestamps, &m.phases, r, 1));
    }
    Ok(Some(median(found)))
}

/// Each phase's median over the profiled steps (with that step's bound).
fn median(mut found: Vec<PhaseProfile>) -> PhaseProfile {
    let mid = found.len() / 2;
    let mut pick = |get: fn(&PhaseProfile) -> Measured| {
        found.sort_by(|a, b| get(a).ms.total_cmp(&get(b).ms));
        get(&found[mid])
    };
    let (forward, backward, optimizer) = (pick(|p| p.forward), pick(|p| p.backward), pick(|p| p.optimizer));
    PhaseProfile { forward, backward, optimizer, ..found[mid] }
}
