//! Ranks (threads) on the CPU engine (`--only ranks`, no GPU needed): the
//! MLP workloads W2 and W3 (steps/s) and nanoGPT's 0.8 M model (tokens/s)
//! in shards, on 1, 2, 4, … threads up to the machine's, each against the
//! same run unsharded on one thread, measured alternately in this run. The
//! bits are the same at every thread count (core/tests/ranks.rs); only the
//! speed changes. PyTorch's side (`torch.set_num_threads`) is
//! scripts/bench_ranks.py.

use web_time::Instant;

use stepscope_core::data::Dataset;
use stepscope_core::trainer::block_on;
use stepscope_core::{Experiment, Trainer};

use super::TARGET_S;
use crate::Failure;

/// Steps per second of `e` on `threads` ranks: steps repeated until
/// `TARGET_S` has passed, after a warm-up step (which sizes every rank's
/// buffers).
fn steps_per_second(e: &Experiment, data: &Dataset, threads: usize) -> Result<f64, Failure> {
    let mut engine = Trainer::fresh(e, data.clone(), None)?;
    engine.set_threads(threads);
    block_on(engine.run(1, 1))?;
    let start = Instant::now();
    let mut steps = 0;
    while steps < 3 || start.elapsed().as_secs_f64() < TARGET_S {
        block_on(engine.run(1, 1))?;
        steps += 1;
    }
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

/// 1, 2, 4, … up to `cores` (and `cores` itself).
fn thread_counts(cores: usize) -> Vec<usize> {
    let mut counts: Vec<usize> =
        std::iter::successors(Some(1usize), |t| Some(t * 2)).take_while(|&t| t <= cores).collect();
    if counts.last() != Some(&cores) {
        counts.push(cores);
    }
    counts
}

pub fn section(line: &mut impl FnMut(String)) -> Result<(), Failure> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    line("## Ranks (threads) on the CPU engine".into());
    line(String::new());
    line(format!(
        "Whole training steps in S shards on R ranks (threads; `stepscope train --threads R`), against the run unsharded on one thread; {cores} cores. Efficiency = speed at R ÷ (R × the unsharded one-thread speed). Three alternating rounds, medians."
    ));
    line(String::new());
    line("| run | shards | unsharded, 1 thread | R = 1 | … at each R | efficiency at the most R |".into());
    line("|---|---|---|---|---|---|".into());
    let mut runs: Vec<(String, Experiment, Dataset, f64)> = Vec::new();
    for (name, widths, batch) in
        [("W2, steps/s", &[64usize, 256, 256, 10][..], 256usize), ("W3, steps/s", &[784, 512, 512, 10], 1024)]
    {
        let (e, data) =
            stepscope_core::workloads::synthetic(widths, batch, "relu", r#"{"kind": "adam", "lr": 0.01}"#, None);
        runs.push((name.into(), e, data, 1.0));
    }
    let gpt = Experiment::from_json(
        r#"{"seed": 1337, "model": {"kind": "gpt", "vocab_size": 65, "context": 64, "embed": 128, "heads": 4, "blocks": 4},
            "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1},
            "batch_size": 12, "clip_grad_norm": 1.0, "data": {"source": "shakespeare", "train_fraction": 0.9}}"#,
    )?;
    let data = Dataset::load(&gpt, None)?;
    runs.push(("0.8 M transformer (4 × 4 × 128, T 64, B 12), tokens/s".into(), gpt, data, 64.0 * 12.0));
    let counts = thread_counts(cores);
    for (name, e, data, scale) in runs {
        let shards = if e.batch_size % 8 == 0 { 8 } else { 4 };
        let mut sharded = e.clone();
        sharded.shards = shards;
        sharded.validate()?;
        let mut base = Vec::new();
        let mut at: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
        for _ in 0..3 {
            base.push(steps_per_second(&e, &data, 1)? * scale);
            for (i, &r) in counts.iter().enumerate() {
                at[i].push(steps_per_second(&sharded, &data, r)? * scale);
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let base = median(base);
        let speeds: Vec<f64> = at.into_iter().map(median).collect();
        let cells: Vec<String> = counts.iter().zip(&speeds).map(|(r, s)| format!("R {r}: {s:.1}")).collect();
        let most = *counts.last().expect("one count at least");
        let last = *speeds.last().expect("one speed at least");
        line(format!(
            "| {name} | {shards} | {base:.1} | {:.1} | {} | {:.0} % |",
            speeds[0],
            cells.join(", "),
            100.0 * last / (most as f64 * base)
        ));
    }
    line(String::new());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::thread_counts;

    #[test]
    fn thread_counts_double_up_to_the_cores() {
        assert_eq!(thread_counts(1), [1]);
        assert_eq!(thread_counts(2), [1, 2]);
        assert_eq!(thread_counts(6), [1, 2, 4, 6]);
        assert_eq!(thread_counts(16), [1, 2, 4, 8, 16]);
    }
}
