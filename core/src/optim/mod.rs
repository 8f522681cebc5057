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

use bytemuck::{Pod, Zeroable};

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
        [("exp_avg", &self.exp_avg), ("exp_avg_sq", &self.exp_avg_sq), ("momentum_buffer", &self.momentum_buffer)]
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

/// The per-step scalars of an update, computed in f64 from the learning
/// rate and the 1-based step and rounded to f32 once: the CPU and GPU
/// optimizers both read them, so they apply identical values. Laid out as
/// the WGSL `StepScalars` struct.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct StepScalars {
    /// −lr (SGD, LAMB)
    pub neg_lr: f32,
    /// −lr / (1 − β1ᵗ) (Adam, AdamW)
    pub neg_step_size: f32,
    /// √(1 − β2ᵗ) (Adam, AdamW)
    pub bias_correction2_sqrt: f32,
    /// 1 − lr·λ (AdamW's decoupled decay)
    pub decay: f32,
    /// 1 − β1ᵗ (LAMB)
    pub bias_correction1: f32,
    /// 1 − β2ᵗ (LAMB)
    pub bias_correction2: f32,
    /// 1 on the run's first optimizer step (SGD's momentum buffer starts as
    /// the gradient), else 0.
    pub first_step: u32,
    pub _pad: u32,
}

impl StepScalars {
    /// `step` is 1-based (torch's `state['step']` after its increment).
    pub fn new(spec: &OptimizerSpec, lr: f64, step: u64) -> StepScalars {
        let (beta1, beta2, weight_decay) = match *spec {
            OptimizerSpec::Sgd { weight_decay, .. } => (0.0, 0.0, weight_decay),
            OptimizerSpec::Adam { betas, weight_decay, .. }
            | OptimizerSpec::Adamw { betas, weight_decay, .. }
            | OptimizerSpec::Lamb { betas, weight_decay, .. } => (betas[0], betas[1], weight_decay),
        };
        let t = step.min(i32::MAX as u64) as i32;
        let bias_correction1 = 1.0 - f64::powi(beta1, t);
        let bias_correction2 = 1.0 - f64::powi(beta2, t);
        StepScalars {
            neg_lr: (-lr) as f32,
            neg_step_size: (-(lr / bias_correction1)) as f32,
            bias_correction2_sqrt: bias_correction2.sqrt() as f32,
            decay: (1.0 - lr * weight_decay) as f32,
            bias_correction1: bias_correction1 as f32,
            bias_correction2: bias_correction2 as f32,
            first_step: u32::from(step == 1),
            _pad: 0,
        }
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
    let scalars = StepScalars::new(spec, lr, state.step);
    let s = &scalars;
    match *spec {
        OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } => {
            sgd_step(params, &mut state.momentum_buffer, grads, s, momentum, dampening, nesterov, weight_decay)
        }
        OptimizerSpec::Adam { betas, eps, weight_decay, .. } => {
            adam_step(params, &mut state.exp_avg, &mut state.exp_avg_sq, grads, s, betas, eps, weight_decay, false)
        }
        OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => {
            adam_step(params, &mut state.exp_avg, &mut state.exp_avg_sq, grads, s, betas, eps, weight_decay, true)
        }
        OptimizerSpec::Lamb { betas, eps, weight_decay, .. } => {
            for t in tensors {
                let range = t.offset..t.offset + t.len;
                lamb_step(
                    &mut params[range.clone()],
                    &mut state.exp_avg[range.clone()],
                    &mut state.exp_avg_sq[range.clone()],
                    &grads[range],
                    s,
                    betas,
                    eps,
                    weight_decay,
                );
            }
        }
    }
}
