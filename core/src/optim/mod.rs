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

    /// The state to continue a run with once its optimizer's settings
    /// change from `old` to `new` (a live edit on the page). Another kind of
    /// optimizer starts fresh: its own buffers, step 0. Within a kind the
    /// state carries on, except SGD's momentum buffer: it goes when momentum
    /// becomes 0 (PyTorch no longer reads it, and a state without it is the
    /// canonical one), and starts at zero when momentum is turned on
    /// mid-run. PyTorch starts it as the next gradient, which a zero buffer
    /// gives exactly when dampening is 0 (what the page's controls set); with
    /// dampening d the first such step moves (1 − d) as far.
    pub fn carried_to(self, old: &OptimizerSpec, new: &OptimizerSpec, parameter_count: usize) -> OptimizerState {
        if std::mem::discriminant(old) != std::mem::discriminant(new) {
            return OptimizerState::new(new, parameter_count);
        }
        let mut state = self;
        if let OptimizerSpec::Sgd { momentum, .. } = new {
            if *momentum == 0.0 {
                state.momentum_buffer = Vec::new();
            } else if state.momentum_buffer.len() != parameter_count {
                state.momentum_buffer = vec![0.0; parameter_count];
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
///
/// Weight decay applies to the tensors whose `decays` is set: every
/// tensor of the MLP (one torch parameter group), the transformer's
/// tensors of two or more dimensions (nanoGPT's two groups, the other
/// with `weight_decay` 0). Where every tensor decays the update is one
/// pass over the flat buffer; otherwise one pass per tensor, the
/// non-decaying ones with weight decay 0, which is what torch computes
/// for a group with `weight_decay=0` (AdamW multiplies by 1 − lr·0 = 1,
/// Adam and SGD skip the term).
pub fn optimizer_step(
    params: &mut [f32],
    state: &mut OptimizerState,
    grads: &[f32],
    spec: &OptimizerSpec,
    lr: f64,
    tensors: &[TensorInfo],
) {
    state.step += 1;
    let decaying = StepScalars::new(spec, lr, state.step);
    let per_tensor = matches!(spec, OptimizerSpec::Lamb { .. }) || tensors.iter().any(|t| !t.decays);
    if !per_tensor {
        update_range(params, state, grads, spec, &decaying, 0..params.len());
        return;
    }
    let plain_spec = spec.without_weight_decay();
    let plain = StepScalars::new(&plain_spec, lr, state.step);
    for t in tensors {
        let (spec, scalars) = if t.decays { (spec, &decaying) } else { (&plain_spec, &plain) };
        update_range(params, state, grads, spec, scalars, t.offset..t.offset + t.len);
    }
}

/// The update of `spec` over `range` of the flat buffers.
fn update_range(
    params: &mut [f32],
    state: &mut OptimizerState,
    grads: &[f32],
    spec: &OptimizerSpec,
    s: &StepScalars,
    range: std::ops::Range<usize>,
) {
    let r = range;
    match *spec {
        OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } => {
            let buffer = state.momentum_buffer.get_mut(r.clone()).unwrap_or_default();
            let p = &mut params[r.clone()];
            sgd_step(p, buffer, &grads[r], s, momentum, dampening, nesterov, weight_decay)
        }
        OptimizerSpec::Adam { betas, eps, weight_decay, .. }
        | OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => {
            let decoupled = matches!(spec, OptimizerSpec::Adamw { .. });
            let (m, v) = (&mut state.exp_avg[r.clone()], &mut state.exp_avg_sq[r.clone()]);
            adam_step(&mut params[r.clone()], m, v, &grads[r], s, betas, eps, weight_decay, decoupled)
        }
        OptimizerSpec::Lamb { betas, eps, weight_decay, .. } => {
            let (m, v) = (&mut state.exp_avg[r.clone()], &mut state.exp_avg_sq[r.clone()]);
            lamb_step(&mut params[r.clone()], m, v, &grads[r], s, betas, eps, weight_decay)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::data::Dataset;
    use crate::engine::{CpuEngine, TrainState};
    use crate::experiment::{Experiment, OptimizerSpec};

    /// A live edit of the optimizer gives a state an engine accepts: SGD's
    /// momentum turned off drops its buffer, turned on starts one at zero
    /// (equal to PyTorch's clone of the gradient when dampening is 0: the
    /// next update is the plain SGD one), and another optimizer starts fresh.
    #[test]
    fn edited_optimizers_carry_a_state_that_loads() {
        let e = Experiment::from_json(
            r#"{"model": {"inputs": 2, "layers": [{"units": 4, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
                "loss": "bce_with_logits", "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}, "batch_size": 8,
                "data": {"source": "xor", "samples": 64}}"#,
        )
        .unwrap();
        let data = Dataset::load(&e, None).unwrap();
        let mut engine = CpuEngine::new(&e, data.clone()).unwrap();
        for _ in 0..3 {
            engine.step().unwrap();
        }
        let edit = |state: TrainState, f: &dyn Fn(&mut OptimizerSpec)| {
            let mut to = state.experiment.clone();
            f(&mut to.optimizer);
            let count = state.params.len();
            let optimizer = state.optimizer.carried_to(&state.experiment.optimizer, &to.optimizer, count);
            TrainState { optimizer, experiment: to, ..state }
        };
        let set_momentum = |m: f64| {
            move |o: &mut OptimizerSpec| {
                if let OptimizerSpec::Sgd { momentum, .. } = o {
                    *momentum = m;
                }
            }
        };
        let off = edit(engine.state(), &set_momentum(0.0));
        assert!(off.optimizer.momentum_buffer.is_empty());
        assert_eq!(off.optimizer.step, 3, "SGD keeps its step");
        let mut engine = CpuEngine::from_state(off, data.clone()).expect("momentum 0 loads");
        engine.step().unwrap();
        let on = edit(engine.state(), &set_momentum(0.5));
        assert_eq!(on.optimizer.momentum_buffer, vec![0.0; on.params.len()]);
        let mut engine = CpuEngine::from_state(on, data.clone()).expect("momentum 0.5 loads");
        engine.step().unwrap();
        let adam = edit(engine.state(), &|o| {
            *o = OptimizerSpec::Adam { lr: 0.01, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 }
        });
        assert_eq!((adam.optimizer.step, adam.optimizer.momentum_buffer.len()), (0, 0));
        CpuEngine::from_state(adam, data).expect("Adam loads").step().unwrap();
    }
}
