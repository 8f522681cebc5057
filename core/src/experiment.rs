//! The experiment: one JSON object that the page builds, shares in its URL,
//! stores in every checkpoint, and the CLI reads. Documented field by field
//! in `docs/experiment.md`.
//!
//! Parsing is strict: an unknown field or value is an error that names it,
//! so a typo never silently trains something else. `validate` then checks
//! every value against its range and against the other fields.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod data_spec;

pub use data_spec::*;

/// Largest width of any layer (inputs included): keeps a typo such as
/// `"units": 1600000` from allocating gigabytes in the browser.
pub const MAX_UNITS: usize = 4096;
pub const MAX_LAYERS: usize = 17;
pub const MAX_BATCH: usize = 65_536;
pub const MAX_SAMPLES: usize = 100_000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    #[serde(default)]
    pub seed: u64,
    pub model: ModelSpec,
    pub loss: Loss,
    pub optimizer: OptimizerSpec,
    #[serde(default)]
    pub schedule: Schedule,
    pub batch_size: usize,
    #[serde(default = "one")]
    pub grad_accumulation: usize,
    #[serde(default)]
    pub clip_grad_norm: Option<f64>,
    #[serde(default)]
    pub regularization: Option<Regularization>,
    pub data: DataSpec,
}

fn one() -> usize {
    1
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    pub inputs: usize,
    pub layers: Vec<LayerSpec>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub units: usize,
    pub activation: Activation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Linear,
    Relu,
    LeakyRelu,
    Tanh,
    Sigmoid,
    GeluTanh,
    Silu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    Mse,
    BceWithLogits,
    CrossEntropy,
}

impl Loss {
    /// The name the experiment JSON uses (`"cross_entropy"`).
    pub fn name(self) -> &'static str {
        match self {
            Loss::Mse => "mse",
            Loss::BceWithLogits => "bce_with_logits",
            Loss::CrossEntropy => "cross_entropy",
        }
    }
}

/// Optimizers as in `torch.optim` (LAMB as `optax.lamb`). Left-out
/// hyperparameters take the library's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum OptimizerSpec {
    Sgd {
        #[serde(default = "lr_default")]
        lr: f64,
        #[serde(default)]
        momentum: f64,
        #[serde(default)]
        dampening: f64,
        #[serde(default)]
        nesterov: bool,
        #[serde(default)]
        weight_decay: f64,
    },
    Adam {
        #[serde(default = "lr_default")]
        lr: f64,
        #[serde(default = "betas_default")]
        betas: [f64; 2],
        #[serde(default = "eps_adam")]
        eps: f64,
        #[serde(default)]
        weight_decay: f64,
    },
    Adamw {
        #[serde(default = "lr_default")]
        lr: f64,
        #[serde(default = "betas_default")]
        betas: [f64; 2],
        #[serde(default = "eps_adam")]
        eps: f64,
        #[serde(default = "wd_adamw")]
        weight_decay: f64,
    },
    Lamb {
        #[serde(default = "lr_default")]
        lr: f64,
        #[serde(default = "betas_default")]
        betas: [f64; 2],
        #[serde(default = "eps_lamb")]
        eps: f64,
        #[serde(default)]
        weight_decay: f64,
    },
}

fn lr_default() -> f64 {
    1e-3
}
fn betas_default() -> [f64; 2] {
    [0.9, 0.999]
}
fn eps_adam() -> f64 {
    1e-8
}
fn eps_lamb() -> f64 {
    1e-6
}
fn wd_adamw() -> f64 {
    1e-2
}

impl OptimizerSpec {
    pub fn lr(&self) -> f64 {
        match *self {
            OptimizerSpec::Sgd { lr, .. }
            | OptimizerSpec::Adam { lr, .. }
            | OptimizerSpec::Adamw { lr, .. }
            | OptimizerSpec::Lamb { lr, .. } => lr,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            OptimizerSpec::Sgd { .. } => "sgd",
            OptimizerSpec::Adam { .. } => "adam",
            OptimizerSpec::Adamw { .. } => "adamw",
            OptimizerSpec::Lamb { .. } => "lamb",
        }
    }

    /// How many parameter-sized state buffers the optimizer keeps:
    /// SGD with momentum one, Adam/AdamW/LAMB two (`exp_avg`, `exp_avg_sq`).
    pub fn state_copies(&self) -> usize {
        match *self {
            OptimizerSpec::Sgd { momentum, .. } => usize::from(momentum != 0.0),
            _ => 2,
        }
    }
}

/// Learning-rate schedules; `t` is the 0-based optimizer step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Schedule {
    #[default]
    Constant,
    WarmupCosine {
        #[serde(default)]
        warmup_steps: u64,
        total_steps: u64,
        #[serde(default)]
        min_lr: f64,
    },
    WarmupLinear {
        #[serde(default)]
        warmup_steps: u64,
        total_steps: u64,
        #[serde(default)]
        min_lr: f64,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regularization {
    pub kind: RegularizationKind,
    pub rate: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegularizationKind {
    L1,
    L2,
}

impl Experiment {
    /// Parses and validates; the error names the field and its position.
    pub fn from_json(text: &str) -> Result<Experiment> {
        let experiment: Experiment = serde_json::from_str(text).map_err(|e| Error::Experiment(e.to_string()))?;
        experiment.validate()?;
        Ok(experiment)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an experiment always serialises")
    }

    /// Whether going from `self` to `to` changes only what a running
    /// engine can take in place: the learning rate and schedule, the
    /// optimizer's hyperparameters (same optimizer, and for SGD momentum
    /// staying on or off, so its state keeps its layout), clipping and
    /// regularization. Anything else (model, loss, batch, data, seed)
    /// needs the run rebuilt from its state.
    pub fn retunable_to(&self, to: &Experiment) -> bool {
        let same_state = self.optimizer.name() == to.optimizer.name()
            && self.optimizer.state_copies() == to.optimizer.state_copies();
        same_state
            && self.seed == to.seed
            && self.model == to.model
            && self.loss == to.loss
            && self.batch_size == to.batch_size
            && self.grad_accumulation == to.grad_accumulation
            && self.data == to.data
    }

    /// Units of the output layer.
    pub fn outputs(&self) -> usize {
        self.model.layers.last().map_or(0, |l| l.units)
    }

    /// Widths of every layer boundary: inputs, then each layer's units.
    pub fn widths(&self) -> Vec<usize> {
        std::iter::once(self.model.inputs).chain(self.model.layers.iter().map(|l| l.units)).collect()
    }

    pub fn validate(&self) -> Result<()> {
        crate::validate::experiment(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"{ "seed": 7,
      "model": { "inputs": 2, "layers": [ {"units": 16, "activation": "tanh"}, {"units": 1, "activation": "linear"} ] },
      "loss": "bce_with_logits",
      "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
      "schedule": {"kind": "warmup_cosine", "warmup_steps": 10, "total_steps": 1000, "min_lr": 0.0},
      "batch_size": 32, "grad_accumulation": 1, "clip_grad_norm": 1.0,
      "regularization": null,
      "data": {"source": "spiral", "samples": 500, "noise": 0.1, "train_fraction": 0.8, "features": ["x1","x2"], "shuffle": true} }"#;

    #[test]
    fn the_documented_example_parses_and_round_trips() {
        let e = Experiment::from_json(EXAMPLE).unwrap();
        assert_eq!(e.widths(), vec![2, 16, 1]);
        assert_eq!(Experiment::from_json(&e.to_json()).unwrap(), e);
    }

    #[test]
    fn left_out_fields_take_their_defaults() {
        let e = Experiment::from_json(
            r#"{"model": {"inputs": 2, "layers": [{"units": 1, "activation": "linear"}]},
                "loss": "bce_with_logits", "optimizer": {"kind": "adamw"}, "batch_size": 4,
                "data": {"source": "xor"}}"#,
        )
        .unwrap();
        assert_eq!(e.seed, 0);
        assert_eq!(e.grad_accumulation, 1);
        assert_eq!(e.schedule, Schedule::Constant);
        assert_eq!((e.clip_grad_norm, e.regularization.clone()), (None, None));
        assert!(e.data.shuffle);
        assert_eq!(e.optimizer, OptimizerSpec::Adamw { lr: 1e-3, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 1e-2 });
    }

    #[test]
    fn typos_and_bad_values_are_named() {
        let cases = [
            (EXAMPLE.replace("\"seed\"", "\"sead\""), "unknown field `sead`"),
            (EXAMPLE.replace("\"lr\": 0.01", "\"lrr\": 0.01"), "unknown field `lrr`"),
            (EXAMPLE.replace("\"adamw\"", "\"adamx\""), "unknown variant `adamx`"),
            (EXAMPLE.replace("\"tanh\"", "\"tahn\""), "unknown variant `tahn`"),
            (EXAMPLE.replace("\"min_lr\"", "\"min_learning_rate\""), "unknown field `min_learning_rate`"),
            (EXAMPLE.replace("\"x2\"]", "\"x3\"]"), "unknown variant `x3`"),
            (EXAMPLE.replace("\"batch_size\": 32", "\"batch_size\": 0"), "batch_size must be in"),
            (EXAMPLE.replace("\"lr\": 0.01", "\"lr\": -1"), "optimizer.lr must be"),
            (EXAMPLE.replace("0.999]", "1.5]"), "optimizer.betas[1]"),
            (EXAMPLE.replace("\"clip_grad_norm\": 1.0", "\"clip_grad_norm\": 0"), "clip_grad_norm"),
            (EXAMPLE.replace("\"warmup_steps\": 10", "\"warmup_steps\": 5000"), "must not exceed"),
            (EXAMPLE.replace("\"units\": 16", "\"units\": 100000"), "model.layers[0].units"),
            (EXAMPLE.replace("\"inputs\": 2", "\"inputs\": 3"), "data.features has 2"),
            (EXAMPLE.replace("\"spiral\"", "\"reg_plane\""), "needs loss \"mse\""),
            (EXAMPLE.replace("\"bce_with_logits\"", "\"cross_entropy\""), "at least 2 units"),
            (EXAMPLE.replace("\"noise\": 0.1", "\"noise\": 3"), "data.noise"),
            (EXAMPLE.replace("\"source\": \"spiral\"", "\"source\": \"csv\""), "does not apply"),
            (EXAMPLE.replace("[\"x1\",\"x2\"]", "[\"x1\",\"x1\"]"), "twice"),
            ("{".to_string(), "EOF"),
        ];
        for (text, want) in cases {
            let msg = Experiment::from_json(&text).unwrap_err().to_string();
            assert!(msg.contains(want), "`{msg}` lacks `{want}`");
        }
    }
}
