//! `stepscope bench`: what the GPU buys, measured side by side in one run
//! and reported as ratios (these machines are shared and noisy; ratios of
//! measurements taken together are what holds up). Prints a Markdown
//! report naming the machine and adapter; `--out FILE` also writes it.
//!
//! 1. The forward kernel's matmul GFLOP/s against a WGSL fused-multiply-add
//!    peak probe on the same adapter, at 256², 1024², 2048².
//! 2. Steps per second, GPU engine against the CPU engine.
//! 3. K = 1 step per submit with a readback every step, against K = 64.
//! 4. Overhead share: (wall time per step − GPU timestamp time per step) / wall.
//! 5. Activation checkpointing: memory saved and steps per second with it
//!    on against off, on both engines (`checkpointing.rs`).
//! 6. The step's anatomy: profiled steps on both engines, forward :
//!    backward against the FLOP ratio (`anatomy.rs`).
//!
//! 7. The transformer on the GPU engine beside the CPU engine: tokens/s
//!    and dispatches per step (`gpt.rs`, `--only gpt-gpu`).
//! 8. The transformer on the CPU engine: tokens/s, activation
//!    checkpointing's memory against time, attention's share against T
//!    (`gpt.rs`).
//!
//! 9. Ranks (threads) on the CPU engine: the MLPs W2 and W3 and the 0.8 M
//!    transformer in shards on 1, 2, 4, … threads (`ranks.rs`,
//!    `--only ranks`).
//!
//! 10. Conv nets on the GPU engine beside the CPU engine: images/s of
//!     ConvNetJS's MNIST net and a CIFAR-sized net at batch 64 and 256, and
//!     the conv forward kernel against the FMA probe (`conv.rs`,
//!     `--only conv`).
//!
//! `--only matmul|steps|checkpointing|anatomy|gpt-gpu|gpt|ranks|conv` runs
//! one section; `--only gpt` and `--only ranks` need no GPU.

mod anatomy;
mod checkpointing;
mod conv;
mod gpt;
mod ranks;

use std::sync::Arc;

use web_time::Instant;

use stepscope_core::data::Dataset;
use stepscope_core::gpu::matmul::MatmulVariant;
use stepscope_core::gpu::{probe, FusedWidth, GpuContext};
use stepscope_core::trainer::block_on;
use stepscope_core::{Experiment, Trainer};

use crate::args::Section;
use crate::{files, say, Failure};

/// Seconds each measurement aims for (repetitions double until reached).
const TARGET_S: f64 = 0.3;

fn gpu_err(e: stepscope_core::Error) -> Failure {
    Failure { message: e.to_string(), status: 1 }
}

pub fn run(out: Option<String>, only: Option<Section>) -> Result<(), Failure> {
    let runs = |section: Section| only.is_none_or(|o| o == section);
    let mut report = String::new();
    let mut line = |s: String| {
        say!("{s}");
        report.push_str(&s);
        report.push('\n');
    };
    line("# Stepscope benchmark".into());
    line(String::new());
    line(format!(
        "- CPU: {} ({} threads available; the CPU engine uses one, or with shards as many as `--threads` gives it)",
        cpu_name(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    ));
    line(format!("- build: {}", if cfg!(debug_assertions) { "debug (numbers not meaningful)" } else { "release" }));
    if matches!(only, Some(Section::Gpt | Section::Ranks)) {
        line(String::new());
        match only {
            Some(Section::Gpt) => gpt::section(&mut line)?,
            _ => ranks::section(&mut line)?,
        }
        if let Some(path) = out {
            files::write_atomic(&path, report.as_bytes())?;
        }
        return Ok(());
    }
    let ctx = Arc::new(GpuContext::new_blocking().map_err(gpu_err)?);
    line(format!(
        "- adapter: {} (driver: {} {})",
        ctx.describe(),
        ctx.adapter_info.driver,
        ctx.adapter_info.driver_info
    ));
    line(format!(
        "- GPU timing: {}",
        if ctx.timestamps { "timestamp queries" } else { "wall clock (no timestamp queries on this adapter)" }
    ));
    line(String::new());

    if runs(Section::Matmul) {
        matmul_section(&ctx, &mut line)?;
    }
    if runs(Section::Steps) {
        steps_section(&ctx, &mut line)?;
    }
    if runs(Section::Checkpointing) {
        checkpointing::section(&ctx, &mut line)?;
    }
    if runs(Section::Anatomy) {
        anatomy::section(&ctx, &mut line)?;
    }
    if runs(Section::GptGpu) {
        gpt::gpu_section(&ctx, &mut line)?;
    }
    if runs(Section::Conv) {
        conv::section(&ctx, &mut line)?;
    }
    if runs(Section::Gpt) {
        gpt::section(&mut line)?;
    }
    if runs(Section::Ranks) {
        ranks::section(&mut line)?;
    }
    if let Some(path) = out {
        files::write_atomic(&path, report.as_bytes())?;
    }
    Ok(())
}

fn matmul_section(ctx: &GpuContext, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    let peak = pollster::block_on(probe::fma_peak_gflops(ctx, 4096, TARGET_S)).map_err(gpu_err)?;
    line("## Forward matmul against the FMA peak probe".into());
    line(String::new());
    line(format!("FMA probe peak: {peak:.1} GFLOP/s"));
    line(String::new());
    line("| shape (B × I → O) | tiled GFLOP/s | share of probe peak | blocked GFLOP/s | share of probe peak |".into());
    line("|---|---|---|---|---|".into());
    // Square sizes, then the layers of W2 and W3 (stepscope_core::workloads).
    let shapes =
        [(256, 256, 256), (1024, 1024, 1024), (2048, 2048, 2048), (256, 64, 256), (1024, 784, 512), (1024, 512, 512)];
    for (b, i, o) in shapes {
        let mut cells = String::new();
        for v in MatmulVariant::ALL {
            let gflops = pollster::block_on(probe::matmul_gflops(ctx, v, b, i, o, TARGET_S)).map_err(gpu_err)?;
            cells.push_str(&format!(" {gflops:.2} | {:.1} % |", 100.0 * gflops / peak));
        }
        line(format!("| {b} × {i} → {o} |{cells}"));
    }
    line(String::new());
    Ok(())
}

fn steps_section(ctx: &Arc<GpuContext>, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    line("## Steps per second, GPU engine against CPU engine".into());
    line(String::new());
    line("| model | batch | dispatches per step (phased) | CPU steps/s | phased K = 1 | phased K = 64 | fused K = 1 | fused K = 64 | calibration picks | GPU/CPU (picked, K = 64) | K = 64 / K = 1 (picked) | overhead share K = 64 (phased, fused) | phased K = 64, pass per phase |".into());
    line("|---|---|---|---|---|---|---|---|---|---|---|---|---|".into());
    for (widths, batch) in
        [(&[2usize, 16, 16, 1][..], 32usize), (&[64, 256, 256, 10], 256), (&[784, 512, 512, 10], 1024)]
    {
        let (experiment, data) = synthetic(widths, batch);
        let cpu = cpu_steps_per_second(&experiment, &data, false)?;
        let k1 = gpu_steps(ctx, &experiment, &data, 1, Path::Phased, false)?;
        let k64 = gpu_steps(ctx, &experiment, &data, 64, Path::Phased, false)?;
        // The fused step applies to this shape on this adapter (not, e.g.,
        // past llvmpipe's loop cap).
        let fused_applies = gpu_trainer(ctx, &experiment, &data)?.gpu_engine().is_some_and(|g| g.fused_available());
        let mut engine = gpu_trainer(ctx, &experiment, &data)?;
        let calibration = block_on(engine.calibrate())?.expect("a GPU trainer calibrates");
        // The fused columns run the width the calibration kept.
        let width = calibration.fused_width().unwrap_or(FusedWidth::Wide);
        let fused =
            |k| fused_applies.then(|| gpu_steps(ctx, &experiment, &data, k, Path::Fused(width), false)).transpose();
        let (fused_k1, fused_k64) = (fused(1)?, fused(64)?);
        let fused_cell =
            |speed: &Option<GpuSpeed>| speed.as_ref().map_or("—".into(), |s| format!("{:.1}", s.steps_per_second));
        let k64_phases = gpu_steps(ctx, &experiment, &data, 64, Path::PassPerPhase, false)?;
        let dispatches = engine.gpu_engine().map_or(0, |g| g.dispatches_per_step());
        let (picked_k1, picked_k64) = match (&fused_k1, &fused_k64) {
            (Some(f1), Some(f64)) if engine.runs_fused() => (f1, f64),
            _ => (&k1, &k64),
        };
        let timed: Vec<String> = calibration
            .fused_widths
            .iter()
            .map(|(w, cost, k)| format!("{:.0} fused with {}", cost.steps_per_second(*k), w.invocations()))
            .collect();
        let picked = match calibration.fused_width() {
            Some(w) => format!(
                "{} (predicted {}, {:.0} phased)",
                if calibration.fused_wins() {
                    format!("fused, {} invocations", w.invocations())
                } else {
                    "phased".into()
                },
                timed.join(", "),
                calibration.phased_steps_per_s()
            ),
            None => "phased (no fused path)".into(),
        };
        let share = |s: Option<f64>| s.map_or("n/a".into(), |s| format!("{:.0} %", 100.0 * s));
        let name = widths.iter().map(usize::to_string).collect::<Vec<_>>().join("-");
        line(format!(
            "| {name} | {batch} | {} | {cpu:.1} | {:.1} | {:.1} | {} | {} | {picked} | {:.2}× | {:.1}× | {}, {} | {:.1} |",
            dispatches,
            k1.steps_per_second,
            k64.steps_per_second,
            fused_cell(&fused_k1),
            fused_cell(&fused_k64),
            picked_k64.steps_per_second / cpu,
            picked_k64.steps_per_second / picked_k1.steps_per_second,
            share(k64.overhead_share),
            fused_k64.as_ref().map_or("—".into(), |f| share(f.overhead_share)),
            k64_phases.steps_per_second,
        ));
    }
    line(String::new());
    line("Phased columns record a step as one compute pass of its dispatch lists; fused columns run every step of a submit in one dispatch of one workgroup (`train_step_fused.wgsl`), which is one dispatch per submit, at the workgroup width (64 or 4 invocations) the calibration kept. The calibration (`GpuEngine::calibrate`) measures both paths, and both fused widths, briefly on this adapter and picks one; the picked columns use its choice. The last column splits each phased step into a pass per phase with timestamps (what the page's timeline uses), to show what those pass boundaries cost.".into());
    line("Overhead share = (wall time per step − GPU timestamp time per step) / wall time per step; n/a without timestamp queries.".into());
    line(String::new());
    Ok(())
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The native benchmark's networks: ReLU, AdamW at lr 0.001, clipping.
fn synthetic(widths: &[usize], batch: usize) -> (Experiment, Dataset) {
    stepscope_core::workloads::synthetic(widths, batch, "relu", r#"{"kind": "adamw", "lr": 0.001}"#, Some(1.0))
}

/// A fresh run of `e` on the GPU, driven as the page and the CLI drive it.
/// A GPU trainer on the matmul variants measured faster on this adapter
/// (`gpu::matmul`), as the page runs.
pub fn gpu_trainer(ctx: &Arc<GpuContext>, e: &Experiment, data: &Dataset) -> Result<Trainer, Failure> {
    let mut trainer = Trainer::fresh(e, data.clone(), Some(ctx.clone()))?;
    if let Some(g) = trainer.gpu_engine() {
        block_on(g.choose_matmuls())?;
    }
    Ok(trainer)
}

pub(crate) fn cpu_steps_per_second(e: &Experiment, data: &Dataset, checkpointing: bool) -> Result<f64, Failure> {
    let mut engine = Trainer::fresh(e, data.clone(), None)?;
    engine.set_activation_checkpointing(checkpointing)?;
    block_on(engine.run(1, 1))?; // warm-up
    let start = Instant::now();
    let mut steps = 0;
    while steps < 2 || start.elapsed().as_secs_f64() < TARGET_S {
        block_on(engine.run(1, 1))?;
        steps += 1;
    }
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

pub(crate) struct GpuSpeed {
    pub(crate) steps_per_second: f64,
    pub(crate) overhead_share: Option<f64>,
}

/// How the GPU engine records a step.
#[derive(Clone, Copy, PartialEq)]
pub enum Path {
    /// The phased dispatch lists, a step in one compute pass.
    Phased,
    /// The phased lists with a compute pass per phase (the page's timeline).
    PassPerPhase,
    /// The fused step of a width: every step of a submit in one dispatch.
    Fused(FusedWidth),
}

/// Steps per second with `per_submit` steps per submit on `path`.
/// `checkpointing`: activation checkpointing on.
pub(crate) fn gpu_steps(
    ctx: &Arc<GpuContext>,
    e: &Experiment,
    data: &Dataset,
    per_submit: usize,
    path: Path,
    checkpointing: bool,
) -> Result<GpuSpeed, Failure> {
    let mut engine = gpu_trainer(ctx, e, data)?;
    let has_timestamps = engine.gpu_engine().is_some_and(|g| {
        g.phase_timing = path == Path::PassPerPhase;
        if let Path::Fused(width) = path {
            g.use_fused = true;
            g.set_fused_width(width);
        }
        g.has_timestamps()
    });
    engine.set_activation_checkpointing(checkpointing)?;
    block_on(engine.run(1, 1))?; // warm-up: first submit, first readback
    let start = Instant::now();
    let mut metrics = Vec::new();
    while metrics.is_empty() || start.elapsed().as_secs_f64() < TARGET_S {
        metrics.extend(block_on(engine.run(per_submit, per_submit))?);
    }
    let wall_s = start.elapsed().as_secs_f64();
    let steps = metrics.len() as f64;
    let overhead_share = has_timestamps.then(|| {
        let gpu_ms: f64 = metrics.iter().filter_map(|m| m.gpu_ms).sum();
        let wall_ms = wall_s * 1e3;
        ((wall_ms - gpu_ms) / wall_ms).max(0.0)
    });
    Ok(GpuSpeed { steps_per_second: steps / wall_s, overhead_share })
}
