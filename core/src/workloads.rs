//! The benchmark workloads, shared by the native benchmark (`stepscope
//! bench`) and the browser benchmark (the page's `stepscope_bench`, beside
//! TensorFlow.js): classification MLPs on seeded random data. The speed of
//! a step does not depend on what the data mean, and both sides of a
//! browser comparison train on these very rows.

use crate::data::{Dataset, Table};
use crate::rng::Rng;
use crate::Experiment;

/// One benchmark network: widths from inputs to outputs, batch, hidden
/// activation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    pub name: &'static str,
    pub widths: &'static [usize],
    pub batch: usize,
    pub activation: &'static str,
}

/// W1 (playground size), W2 (a small MNIST-like head), W3 (MNIST-sized).
pub const WORKLOADS: [Workload; 3] = [
    Workload { name: "W1", widths: &[2, 16, 16, 1], batch: 32, activation: "tanh" },
    Workload { name: "W2", widths: &[64, 256, 256, 10], batch: 256, activation: "relu" },
    Workload { name: "W3", widths: &[784, 512, 512, 10], batch: 1024, activation: "relu" },
];

pub fn workload(name: &str) -> Option<Workload> {
    WORKLOADS.iter().copied().find(|w| w.name == name)
}

impl Workload {
    /// Adam at lr 0.01, no clipping: the browser comparison's set-up.
    pub fn build(&self) -> (Experiment, Dataset) {
        synthetic(self.widths, self.batch, self.activation, r#"{"kind": "adam", "lr": 0.01}"#, None)
    }
}

/// A classification problem of the given widths on 4 batches of random
/// rows: inputs uniform in [−1, 1], a class (or 0/1 for one output) per
/// row. One output: bce_with_logits; more: cross_entropy.
pub fn synthetic(
    widths: &[usize],
    batch: usize,
    activation: &str,
    optimizer: &str,
    clip_grad_norm: Option<f64>,
) -> (Experiment, Dataset) {
    let (inputs, outputs) = (widths[0], *widths.last().expect("widths"));
    let hidden: Vec<String> = widths[1..widths.len() - 1]
        .iter()
        .map(|u| format!("{{\"units\": {u}, \"activation\": \"{activation}\"}}"))
        .collect();
    let loss = if outputs == 1 { "bce_with_logits" } else { "cross_entropy" };
    let clip = clip_grad_norm.map_or("null".to_string(), |c| c.to_string());
    let json = format!(
        r#"{{"seed": 1, "model": {{"inputs": {inputs}, "layers": [{}, {{"units": {outputs}, "activation": "linear"}}]}},
            "loss": "{loss}", "optimizer": {optimizer}, "batch_size": {batch},
            "clip_grad_norm": {clip}, "data": {{"source": "csv"}}}}"#,
        hidden.join(",")
    );
    let experiment = Experiment::from_json(&json).expect("benchmark experiment is valid");
    let rows = 4 * batch;
    let mut rng = Rng::new(1, 42);
    let table = Table {
        inputs: (0..rows * inputs).map(|_| rng.uniform(-1.0, 1.0) as f32).collect(),
        targets: (0..rows)
            .map(|_| if outputs == 1 { rng.below(2) as f32 } else { rng.below(outputs as u64) as f32 })
            .collect(),
        input_width: inputs,
        target_width: 1,
    };
    (experiment, Dataset { train: table, ..Dataset::default() })
}
