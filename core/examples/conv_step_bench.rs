//! Times whole training steps of the CPU engine on ConvNetJS's MNIST net
//! (examples/mnist_convnet.json: conv 5×5×8 pad 2 relu, max pool 2, conv
//! 5×5×16 pad 2 relu, max pool 3, dense 10) on random 28 × 28 rows, for
//! `scripts/bench_conv.py`, which runs the same step in PyTorch eager
//! beside it. Prints one JSON line: images/s, and the step's phases.
//!
//!   cargo run --release -p stepscope-core --example conv_step_bench -- [batch seconds]

use stepscope_core::data::{Dataset, Table};
use stepscope_core::rng::Rng;
use stepscope_core::{CpuEngine, Experiment};
use web_time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| args.get(i).map_or(default, |a| a.parse().expect("whole numbers"));
    let (batch, seconds) = (arg(0, 32), arg(1, 3));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mnist_convnet.json");
    let mut e = Experiment::from_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    e.batch_size = batch;
    e.validate().unwrap();
    let rows = 4 * batch;
    let mut rng = Rng::new(1, 42);
    let train = Table {
        inputs: (0..rows * 784).map(|_| rng.uniform(0.0, 1.0) as f32).collect(),
        targets: (0..rows).map(|_| rng.below(10) as f32).collect(),
        input_width: 784,
        target_width: 1,
    };
    let mut engine = CpuEngine::new(&e, Dataset { train, ..Dataset::default() }).unwrap();
    engine.step().unwrap(); // warm-up
    let started = Instant::now();
    let (mut steps, mut forward, mut backward, mut optimizer) = (0usize, 0.0, 0.0, 0.0);
    while started.elapsed().as_secs_f64() < seconds as f64 {
        let m = engine.step().unwrap();
        (forward, backward, optimizer) =
            (forward + m.phases.forward_ms, backward + m.phases.backward_ms, optimizer + m.phases.optimizer_ms);
        steps += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    let n = steps as f64;
    println!(
        "{}",
        serde_json::json!({
            "engine": "stepscope-cpu",
            "batch": batch,
            "steps": steps,
            "images_per_second": (steps * batch) as f64 / secs,
            "forward_ms": forward / n,
            "backward_ms": backward / n,
            "optimizer_ms": optimizer / n,
        })
    );
}
