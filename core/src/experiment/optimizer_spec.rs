//! The experiment's optimizer and learning-rate schedule, as `torch.optim`
//! and its schedulers define them (docs/experiment.md).

use serde::{Deserialize, Serialize};

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

    /// The same optimizer with weight decay 0 (the non-decaying group).
    pub fn without_weight_decay(&self) -> OptimizerSpec {
        let mut spec = self.clone();
        match &mut spec {
            OptimizerSpec::Sgd { weight_decay, .. }
            | OptimizerSpec::Adam { weight_decay, .. }
            | OptimizerSpec::Adamw { weight_decay, .. }
            | OptimizerSpec::Lamb { weight_decay, .. } => *weight_decay = 0.0,
        }
        spec
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
