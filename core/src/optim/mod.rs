//! Optimizers, learning-rate schedules and gradient clipping.
//!
//! Every optimizer is one elementwise pass over the flat parameter buffer
//! (LAMB adds per-tensor norms). Scalars such as bias corrections are
//! computed in f64 and applied as f32, as PyTorch does with Python floats.

mod adam;
mod clip;
mod lamb;
mod schedule;
mod sgd;

pub use adam::adam_step;
pub use clip::{clip_grad_norm, global_grad_norm};
pub use lamb::lamb_step;
pub use schedule::learning_rate;
pub use sgd::sgd_step;

use crate::experiment::OptimizerSpec;
use crate::model::TensorInfo;

/// Optimizer state, in the flat parameter layout. Buffers an optimizer does
/// not use are empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OptimizerState {
    /// Optimizer steps taken so far (torch's `state['step']`).
    pub step: u64,
    pub exp_avg: Vec<f32>,         // (P) Adam, AdamW, LAMB
    pub exp_avg_sq: Vec<f32>,      // (P) Adam, AdamW, LAMB
    pub momentum_buffer: Vec<f32>, // (P) SGD with momentum
}

impl OptimizerState {
    pub fn new(spec: &OptimizerSpec, parameter_count: usize) -> OptimizerState {
        let mut state = OptimizerState::default();
        match spec {
            OptimizerSpec::Sgd { momentum, .. } => {
                if *momentum != 0.0 {
                    state.momentum_buffer = vec![0.0; parameter_count];
                }
            }
            _ => {
                state.exp_avg = vec![0.0; parameter_count];
                state.exp_avg_sq = vec![0.0; parameter_count];
            }
        }
        state
    }

    /// The state's buffers by checkpoint suffix, in a fixed order.
    pub fn buffers(&self) -> Vec<(&'static str, &Vec<f32>)> {
        [
            ("exp_avg", &self.exp_avg),
            ("exp_avg_sq", &self.exp_avg_sq),
            ("momentum_buffer", &self.momentum_buffer),
        ]
        .into_iter()
        .filter(|(_, b)| !b.is_empty())
        .collect()
    }

    pub fn buffer_mut(&mut self, suffix: &str) -> Option<&mut Vec<f32>> {
        match suffix {
            "exp_avg" => Some(&mut self.exp_avg),
            "exp_avg_sq" => Some(&mut self.exp_avg_sq),
            "momentum_buffer" => Some(&mut self.momentum_buffer),
            _ => None,
        }
    }

    pub fn bytes(&self) -> usize {
        4 * (self.exp_avg.len() + self.exp_avg_sq.len() + self.momentum_buffer.len())
    }
}

/// One optimizer step at learning rate `lr`: updates `params` and `state`
/// from `grads` (already accumulated, regularized and clipped).
pub fn optimizer_step(
    params: &mut [f32],
    state: &mut OptimizerState,
    grads: &[f32],
    spec: &OptimizerSpec,
    lr: f64,
    tensors: &[TensorInfo],
) {
    state.step += 1;
    match *spec {
        OptimizerSpec::Sgd {
            momentum,
            dampening,
            nesterov,
            weight_decay,
            ..
        } => sgd_step(
            params,
            &mut state.momentum_buffer,
            grads,
            lr,
            momentum,
            dampening,
            nesterov,
            weight_decay,
            state.step,
        ),
        OptimizerSpec::Adam {
            betas,
            eps,
            weight_decay,
            ..
        } => adam_step(
            params,
            &mut state.exp_avg,
            &mut state.exp_avg_sq,
            grads,
            lr,
            betas,
            eps,
            weight_decay,
            false,
            state.step,
        ),
        OptimizerSpec::Adamw {
            betas,
            eps,
            weight_decay,
            ..
        } => adam_step(
            params,
            &mut state.exp_avg,
            &mut state.exp_avg_sq,
            grads,
            lr,
            betas,
            eps,
            weight_decay,
            true,
            state.step,
        ),
        OptimizerSpec::Lamb {
            betas,
            eps,
            weight_decay,
            ..
        } => {
            for t in tensors {
                let range = t.offset..t.offset + t.len;
                lamb_step(
                    &mut params[range.clone()],
                    &mut state.exp_avg[range.clone()],
                    &mut state.exp_avg_sq[range.clone()],
                    &grads[range],
                    lr,
                    betas,
                    eps,
                    weight_decay,
                    state.step,
                );
            }
        }
    }
}
