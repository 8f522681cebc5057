//! Times whole training steps of the CPU engine on a transformer (data,
//! forward, backward, clipping, AdamW: `CpuEngine::step`, one thread) on
//! Tiny Shakespeare, for `scripts/bench_gpt.py`, which runs the same
//! training step in PyTorch eager beside it. `examples/shakespeare.json`'s
//! run, with its sizes replaceable. Prints one JSON line.
//!
//!   cargo run --release -p stepscope-core --example gpt_step_bench -- \
//!       [blocks heads embed context batch seconds [checkpointing 0|1 [shards threads]]]
//!
//! With shards above 1 the step is sharded and its shards shared among
//! `threads` ranks (`engine::cpu` ranks, scripts/bench_ranks.py).

use stepscope_core::data::Dataset;
use stepscope_core::{CpuEngine, Experiment};
use web_time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("whole numbers")).collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (blocks, heads, embed, context, batch, seconds) =
        (arg(0, 4), arg(1, 4), arg(2, 128), arg(3, 64), arg(4, 12), arg(5, 5));
    let checkpointing = arg(6, 0) == 1;
    let (shards, threads) = (arg(7, 1), arg(8, 1));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/shakespeare.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for (key, value) in [("blocks", blocks), ("heads", heads), ("embed", embed), ("context", context)] {
        config["model"][key] = value.into();
    }
    config["batch_size"] = batch.into();
    config["shards"] = shards.into();
    let e = Experiment::from_json(&config.to_string()).unwrap();
    let mut engine = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
    engine.set_activation_checkpointing(checkpointing).unwrap();
    engine.set_threads(threads);
    engine.step().unwrap(); // warm-up: the buffers are sized by the first step
    let started = Instant::now();
    let (mut steps, mut phases) = (0, [0.0f64; 5]);
    let mut loss = 0.0;
    while started.elapsed().as_secs_f64() < seconds as f64 {
        let m = engine.step().unwrap();
        let p = &m.phases;
        for (sum, ms) in
            phases.iter_mut().zip([p.data_ms, p.forward_ms, p.backward_ms, p.optimizer_ms, p.communication_ms])
        {
            *sum += ms;
        }
        loss = m.loss;
        steps += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let memory = engine.memory();
    let per_step = |ms: f64| ms / steps as f64;
    println!(
        "{}",
        serde_json::json!({
            "engine": "stepscope-cpu",
            "parameters": engine.params().len(),
            "steps": steps,
            "ms_per_step": 1e3 * secs / steps as f64,
            "tokens_per_second": (steps * batch * context) as f64 / secs,
            "data_ms": per_step(phases[0]),
            "forward_ms": per_step(phases[1]),
            "backward_ms": per_step(phases[2]),
            "optimizer_ms": per_step(phases[3]),
            "communication_ms": per_step(phases[4]),
            "shards": shards,
            "ranks": engine.ranks_used(),
            "rank_wait_ms": engine.rank_times().iter().map(|r| r.wait_ms).collect::<Vec<_>>(),
            "activation_bytes": memory.activations + memory.attention,
            "attention_bytes": memory.attention,
            "peak_bytes": memory.peak_backward(),
            "loss": loss,
        })
    );
}
