//! Times whole training steps of the CPU engine on an MLP workload
//! (`stepscope_core::workloads`: W1, W2, W3; Adam at lr 0.01, random rows)
//! for `scripts/bench_ranks.py`, which runs the same step in PyTorch eager
//! beside it. Prints one JSON line.
//!
//!   cargo run --release -p stepscope-core --example mlp_step_bench -- W2 [shards threads seconds]
//!
//! With shards above 1 the step is sharded and its shards shared among
//! `threads` ranks (`engine::cpu` ranks).

use stepscope_core::workloads::workload;
use stepscope_core::CpuEngine;
use web_time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let w = workload(args.first().map_or("W2", String::as_str)).expect("a workload: W1, W2 or W3");
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("whole numbers"));
    let (shards, threads, seconds) = (arg(1, 1), arg(2, 1), arg(3, 3));
    let (mut e, data) = w.build();
    e.shards = shards;
    e.validate().expect("shards divide the batch");
    let mut engine = CpuEngine::new(&e, data).unwrap();
    engine.set_threads(threads);
    engine.step().unwrap(); // warm-up: the buffers are sized by the first step
    let started = Instant::now();
    let (mut steps, mut communication) = (0, 0.0);
    while started.elapsed().as_secs_f64() < seconds as f64 {
        communication += engine.step().unwrap().phases.communication_ms;
        steps += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({
            "engine": "stepscope-cpu",
            "workload": w.name,
            "shards": shards,
            "threads": threads,
            "steps": steps,
            "steps_per_second": steps as f64 / secs,
            "communication_ms": communication / steps as f64,
        })
    );
}
