//! The transformer on the CPU engine (`--only gpt`, no GPU needed): tokens
//! per second of whole training steps at three sizes, with activation
//! checkpointing's memory (from the engine's buffers) against its time,
//! and attention's share of a step as the context grows at a fixed number
//! of tokens per step. Everything is measured in this run; PyTorch's side
//! is scripts/bench_gpt.py.

use web_time::Instant;

use std::sync::Arc;
use stepscope_core::data::Dataset;
use stepscope_core::model::gpt::ops::{attention_backward, attention_forward, attention_scratch};

use stepscope_core::gpu::gpt::{time_attention_key, AttentionVariant};
use stepscope_core::gpu::GpuContext;
use stepscope_core::trainer::block_on;
use stepscope_core::{CpuEngine, Experiment};

use super::{cpu_steps_per_second, gpu_steps, gpu_trainer, Path, TARGET_S};
use crate::Failure;

/// `examples/shakespeare.json`'s run with its sizes replaced.
fn experiment(blocks: usize, heads: usize, embed: usize, context: usize, batch: usize) -> Result<Experiment, Failure> {
    let text = format!(
        r#"{{"seed": 1337, "model": {{"kind": "gpt", "vocab_size": 65, "context": {context}, "embed": {embed},
            "heads": {heads}, "blocks": {blocks}}}, "loss": "cross_entropy",
            "optimizer": {{"kind": "adamw", "lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1}},
            "batch_size": {batch}, "clip_grad_norm": 1.0, "data": {{"source": "shakespeare", "train_fraction": 0.9}}}}"#
    );
    Ok(Experiment::from_json(&text)?)
}

/// Seconds per step: steps repeated until `TARGET_S` has passed, after one
/// warm-up step (which sizes the buffers).
fn seconds_per_step(engine: &mut CpuEngine) -> Result<f64, Failure> {
    engine.step()?;
    let (start, mut steps) = (Instant::now(), 0u32);
    while steps < 3 || start.elapsed().as_secs_f64() < TARGET_S {
        engine.step()?;
        steps += 1;
    }
    Ok(start.elapsed().as_secs_f64() / f64::from(steps))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

pub fn section(line: &mut impl FnMut(String)) -> Result<(), Failure> {
    line("## The transformer on the CPU engine".into());
    line(String::new());
    line("Whole training steps (data, forward, backward, clipping, AdamW), one thread, Tiny Shakespeare.".into());
    line(String::new());
    line("| blocks × heads × embed, T, B | parameters | tokens/s | activations + attention, off → checkpointed | peak of a step, off → on | tokens/s on/off |".into());
    line("|---|---|---|---|---|---|".into());
    let data = Dataset::load(&experiment(1, 1, 8, 256, 1)?, None)?;
    for (blocks, heads, embed, context, batch) in [(2, 2, 64, 32, 12), (4, 4, 128, 64, 12), (4, 4, 128, 256, 3)] {
        let e = experiment(blocks, heads, embed, context, batch)?;
        // The windows of this context: the text re-cut (its vocabulary is the same).
        let data = if context == 256 { data.clone() } else { Dataset::load(&e, None)? };
        let mut plain = CpuEngine::new(&e, data.clone())?;
        let off = seconds_per_step(&mut plain)?;
        let off_bytes = plain.memory();
        let mut kept = CpuEngine::new(&e, data)?;
        kept.set_activation_checkpointing(true)?;
        let on = seconds_per_step(&mut kept)?;
        let on_bytes = kept.memory();
        let tokens = (batch * context) as f64;
        line(format!(
            "| {blocks} × {heads} × {embed}, T {context}, B {batch} | {} | {:.0} | {} → {} | {} → {} | {:.2} |",
            plain.params().len(),
            tokens / off,
            mib(off_bytes.activations + off_bytes.attention),
            mib(on_bytes.activations + on_bytes.attention),
            mib(off_bytes.peak_backward()),
            mib(on_bytes.peak_backward()),
            off / on
        ));
    }
    line(String::new());
    line("Attention's share of a step as T grows, 4 × 4 × 128 at 768 tokens a step (B = 768 / T): the".into());
    line("attention op's forward and backward on that step's shapes, timed alone, times the blocks, over".into());
    line("the step's time, measured one after the other.".into());
    line(String::new());
    line(
        "| T | B | step ms | attention ms (forward + backward, all blocks) | share | attention probabilities |".into(),
    );
    line("|---|---|---|---|---|---|".into());
    for context in [32, 64, 128, 256] {
        let batch = 768 / context;
        let e = experiment(4, 4, 128, context, batch)?;
        let mut engine = CpuEngine::new(&e, Dataset::load(&e, None)?)?;
        let step = seconds_per_step(&mut engine)?;
        let attention = attention_seconds(batch, context, 128, 4)? * 4.0;
        line(format!(
            "| {context} | {batch} | {:.1} | {:.1} | {:.0} % | {} |",
            1e3 * step,
            1e3 * attention,
            100.0 * attention / step,
            mib(engine.memory().attention)
        ));
    }
    line(String::new());
    Ok(())
}

/// Seconds of one block's attention forward and backward at (B, T, C, H).
fn attention_seconds(b: usize, t: usize, c: usize, h: usize) -> Result<f64, Failure> {
    let rows = b * t;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let qkv: Vec<f32> = (0..rows * 3 * c)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect();
    let (mut out, mut att) = (vec![0.0; rows * c], vec![0.0; b * h * t * t]);
    let (mut dqkv, mut scratch, dout) =
        (vec![0.0; rows * 3 * c], vec![0.0; attention_scratch(t, c / h)], vec![0.01; rows * c]);
    let mut once = || {
        attention_forward(&mut out, &mut att, &qkv, b, t, c, h);
        dqkv.fill(0.0);
        attention_backward(&mut dqkv, &mut scratch, &dout, &qkv, &att, b, t, c, h);
    };
    once();
    let (start, mut reps) = (Instant::now(), 0u32);
    while reps < 3 || start.elapsed().as_secs_f64() < TARGET_S / 2.0 {
        once();
        reps += 1;
    }
    Ok(start.elapsed().as_secs_f64() / f64::from(reps))
}

/// The transformer on the GPU engine beside the CPU engine, measured one
/// after the other in this run: tokens/s of whole steps (phased, a step a
/// compute pass, K steps a submit), dispatches per step, both attention
/// variants timed at the step's shape, and attention's share of a GPU step
/// as the context grows at a fixed number of tokens per step.
pub fn gpu_section(ctx: &Arc<GpuContext>, line: &mut impl FnMut(String)) -> Result<(), Failure> {
    line("## The transformer on the GPU engine against the CPU engine".into());
    line(String::new());
    line("Whole training steps (data, forward, backward, clipping, AdamW), Tiny Shakespeare; the GPU engine's".into());
    line("matmul and attention variants chosen by timing on this adapter; the CPU engine on one thread.".into());
    line(String::new());
    line("| blocks × heads × embed, T, B | dispatches per step | CPU tokens/s | GPU tokens/s, K = 1 | GPU tokens/s, K = 16 | GPU/CPU (K = 16) | attention forward + query backward, ms: a workgroup per row, an invocation per row (picked) |".into());
    line("|---|---|---|---|---|---|---|".into());
    for (blocks, heads, embed, context, batch) in [(2, 2, 64, 32, 12), (4, 4, 128, 64, 12)] {
        let e = experiment(blocks, heads, embed, context, batch)?;
        let data = Dataset::load(&e, None)?;
        let tokens = (batch * context) as f64;
        let cpu = cpu_steps_per_second(&e, &data, false)? * tokens;
        let k1 = gpu_steps(ctx, &e, &data, 1, Path::Phased, false)?.steps_per_second * tokens;
        let k16 = gpu_steps(ctx, &e, &data, 16, Path::Phased, false)?.steps_per_second * tokens;
        let mut trainer = gpu_trainer(ctx, &e, &data)?;
        let g = trainer.gpu_engine().expect("a GPU trainer");
        let seconds = block_on(g.choose_attention())?.unwrap_or_default();
        let picked = g.attention().map_or("", |a| a.name());
        let dispatches = g.dispatches_per_step();
        block_on(trainer.run(1, 1))?;
        line(format!(
            "| {blocks} × {heads} × {embed}, T {context}, B {batch} | {dispatches} | {cpu:.0} | {k1:.0} | {k16:.0} | {:.2}× | {:.2}, {:.2} ({picked}) |",
            k16 / cpu,
            1e3 * seconds[0],
            1e3 * seconds[1],
        ));
    }
    line(String::new());
    line("Attention's share of a GPU step as T grows, 4 × 4 × 128 at 768 tokens a step (B = 768 / T): the".into());
    line(
        "picked variant's forward and query-row backward plus the key-column backward, timed alone at the step's"
            .into(),
    );
    line("shapes, times the blocks, over the step's time (K = 16).".into());
    line(String::new());
    line("| T | B | GPU step ms | attention ms (all blocks) | share |".into());
    line("|---|---|---|---|---|".into());
    for context in [32, 64, 128, 256] {
        let batch = 768 / context;
        let e = experiment(4, 4, 128, context, batch)?;
        let data = Dataset::load(&e, None)?;
        let step_s = 1.0 / gpu_steps(ctx, &e, &data, 16, Path::Phased, false)?.steps_per_second;
        let mut trainer = gpu_trainer(ctx, &e, &data)?;
        let g = trainer.gpu_engine().expect("a GPU trainer");
        let seconds = block_on(g.choose_attention())?.unwrap_or_default();
        let variant = if g.attention() == Some(AttentionVariant::Rows) { seconds[1] } else { seconds[0] };
        let key = block_on(time_attention_key(ctx, (batch, context, 128, 4), 0.05))?;
        let attention = 4.0 * (variant + key);
        line(format!(
            "| {context} | {batch} | {:.1} | {:.1} | {:.0} % |",
            1e3 * step_s,
            1e3 * attention,
            100.0 * attention / step_s
        ));
    }
    line(String::new());
    Ok(())
}
