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

/// One conv benchmark network: an image shape and its layers (the format's
/// JSON), trained with SGD and momentum as ConvNetJS's MNIST demo.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConvWorkload {
    /// "mnist" or "cifar": how the benchmarks name it.
    pub key: &'static str,
    pub name: &'static str,
    pub input_shape: [usize; 3],
    pub layers: &'static str,
}

/// ConvNetJS's MNIST net (1 × 28 × 28, 5,994 parameters), and a
/// CIFAR-sized net (3 × 32 × 32, three conv blocks of 16, 32 and 64
/// filters, each 3 × 3 with padding 1 and a 2 × 2 max pool).
pub const CONV_WORKLOADS: [ConvWorkload; 2] = [
    ConvWorkload {
        key: "mnist",
        name: "MNIST (ConvNetJS)",
        input_shape: [1, 28, 28],
        layers: r#"[{"kind": "conv2d", "filters": 8, "kernel": 5, "padding": 2, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 16, "kernel": 5, "padding": 2, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 3},
            {"units": 10, "activation": "linear"}]"#,
    },
    ConvWorkload {
        key: "cifar",
        name: "CIFAR-sized",
        input_shape: [3, 32, 32],
        layers: r#"[{"kind": "conv2d", "filters": 16, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 32, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 64, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"units": 10, "activation": "linear"}]"#,
    },
];

pub fn conv_workload(key: &str) -> Option<ConvWorkload> {
    CONV_WORKLOADS.iter().copied().find(|w| w.key == key)
}

impl ConvWorkload {
    /// The net at `batch`, on 4 batches of random images in [−1, 1) with
    /// a class of 10 each.
    pub fn build(&self, batch: usize) -> (Experiment, Dataset) {
        let [c, h, w] = self.input_shape;
        let json = format!(
            r#"{{"seed": 1, "model": {{"input_shape": [{c}, {h}, {w}], "layers": {}}},
                "loss": "cross_entropy", "optimizer": {{"kind": "sgd", "lr": 0.01, "momentum": 0.9}},
                "batch_size": {batch}, "data": {{"source": "csv"}}}}"#,
            self.layers
        );
        let experiment = Experiment::from_json(&json).expect("a conv benchmark experiment is valid");
        let (rows, inputs) = (4 * batch, c * h * w);
        let mut rng = Rng::new(1, 43);
        let table = Table {
            inputs: (0..rows * inputs).map(|_| rng.uniform(-1.0, 1.0) as f32).collect(),
            targets: (0..rows).map(|_| rng.below(10) as f32).collect(),
            input_width: inputs,
            target_width: 1,
        };
        (experiment, Dataset { train: table, ..Dataset::default() })
    }
}
