//! One shard's forward and backward, from zero into its own gradient:
//! what each of the engine's ranks runs, and a remote rank's
//! `ShardServer` (the page's rank workers) runs the same.

use web_time::Instant;

use super::super::step::{backward_layer, first_non_finite_tensor, non_finite, non_finite_tensor};
use super::super::Work;
use super::step::{ms, shard_range};
use super::{RankBuffers, ShardResult};
use crate::engine::{forward_layer, Phase};
use crate::error::Result;
use crate::experiment::Experiment;
use crate::model::{loss_backward, loss_forward, Layout, TensorInfo};

/// A remote rank's side: the model's buffers for one shard's rows and the
/// same forward and backward as the engine's (`Shared::pass`).
pub struct ShardServer {
    experiment: Experiment,
    layout: Layout,
    tensors: Vec<TensorInfo>,
    buffers: RankBuffers,
}

impl ShardServer {
    pub fn new(experiment: &Experiment) -> Result<ShardServer> {
        let layout = Layout::new(experiment);
        let rows = experiment.batch_size / experiment.shards;
        Ok(ShardServer {
            tensors: layout.tensors(),
            buffers: RankBuffers::new(&layout, rows, false)?,
            layout,
            experiment: experiment.clone(),
        })
    }

    pub fn parameter_count(&self) -> usize {
        self.layout.parameter_count
    }

    /// Shards `first..end` of a micro-batch (`inputs` and `targets`: the
    /// whole micro-batch's rows), each gradient into its P floats of
    /// `grads`, from zero.
    #[allow(clippy::too_many_arguments)]
    pub fn compute(
        &mut self,
        params: &[f32],
        inputs: &[f32],
        targets: &[f32],
        first: usize,
        end: usize,
        step: u64,
        grads: &mut [f32],
    ) -> Vec<ShardResult> {
        let e = &self.experiment;
        let shared = Shared {
            e,
            layout: &self.layout,
            tensors: &self.tensors,
            params,
            inputs,
            targets,
            rows: e.batch_size / e.shards,
            scale: 1.0 / (e.grad_accumulation * e.shards) as f32,
            step,
        };
        let p = self.layout.parameter_count;
        (first..end)
            .zip(grads.chunks_exact_mut(p))
            .map(|(s, g)| {
                shared.pass(self.buffers.work(), g, s).map_or_else(|_| ShardResult::default(), |o| (&o).into())
            })
            .collect()
    }
}

/// What one shard's forward and backward gave.
pub(super) struct ShardOut {
    pub(super) loss: f32,
    pub(super) z: f32,
    pub(super) forward_ms: f64,
    pub(super) backward_ms: f64,
}

/// What every shard of a step reads.
pub(super) struct Shared<'a> {
    pub(super) e: &'a Experiment,
    pub(super) layout: &'a Layout,
    pub(super) tensors: &'a [TensorInfo],
    pub(super) params: &'a [f32],
    pub(super) inputs: &'a [f32],
    pub(super) targets: &'a [f32],
    pub(super) rows: usize,
    pub(super) scale: f32,
    pub(super) step: u64,
}

impl Shared<'_> {
    /// Forward and backward of shard `s` into `grads` (zeroed here).
    pub(super) fn pass(&self, work: Work<'_>, grads: &mut [f32], s: usize) -> Result<ShardOut> {
        let (e, rows, step) = (self.e, self.rows, self.step);
        let width = self.inputs.len() / (rows * e.shards);
        let target_width = self.targets.len() / (rows * e.shards);
        let inputs = &self.inputs[s * rows * width..][..rows * width];
        let targets = &self.targets[s * rows * target_width..][..rows * target_width];
        grads.fill(0.0);
        let t0 = Instant::now();
        if let Some(gpt) = work.gpt.as_mut() {
            let mut ce = None;
            for i in 0..gpt.stages() {
                ce = ce.or(gpt.forward_stage(self.params, inputs, targets, i));
            }
            let loss = ce.unwrap_or(f32::NAN);
            if !loss.is_finite() {
                return Err(non_finite_tensor(Phase::Loss, "the logits", step));
            }
            let t1 = Instant::now();
            for i in 0..gpt.stages() {
                gpt.backward_stage(grads, self.params, e.z_loss as f32, self.scale, i);
            }
            if let Some(t) = first_non_finite_tensor(grads, self.tensors) {
                return Err(non_finite_tensor(Phase::Backward, t, step));
            }
            let out = ShardOut { loss, z: gpt.last_z, forward_ms: ms(t0, t1), backward_ms: ms(t1, Instant::now()) };
            return Ok(out);
        }
        let layers = self.layout.layers.len();
        for l in 0..layers {
            if !forward_layer(work.acts, self.params, inputs, self.layout, e, l) {
                return Err(non_finite(Phase::Forward, l, step));
            }
        }
        let loss = loss_forward(work.acts.output(), targets, e.loss, rows, e.outputs());
        if !loss.is_finite() {
            return Err(non_finite(Phase::Loss, layers - 1, step));
        }
        let t1 = Instant::now();
        let last = &mut work.grad[layers - 1];
        loss_backward(last, work.acts.output(), targets, e.loss, rows, e.outputs(), self.scale);
        for l in (0..layers).rev() {
            let work = Work { acts: &mut *work.acts, grad: &mut *work.grad, gpt: &mut *work.gpt };
            backward_layer(work, grads, self.params, inputs, self.layout, e, rows, l, step)?;
        }
        Ok(ShardOut { loss, z: 0.0, forward_ms: ms(t0, t1), backward_ms: ms(t1, Instant::now()) })
    }

    /// Rank `r` of `ranks`: its shards in order, each into its own slice
    /// of `grads` (`shard_grads` from the rank's first shard on).
    pub(super) fn rank(&self, work: Work<'_>, grads: &mut [f32], r: usize, ranks: usize) -> Vec<Result<ShardOut>> {
        let p = self.layout.parameter_count;
        let (first, end) = shard_range(r, ranks, self.e.shards);
        (first..end)
            .zip(grads.chunks_exact_mut(p))
            .map(|(s, g)| self.pass(Work { acts: &mut *work.acts, grad: &mut *work.grad, gpt: &mut *work.gpt }, g, s))
            .collect()
    }
}

impl From<&ShardOut> for ShardResult {
    fn from(o: &ShardOut) -> ShardResult {
        ShardResult { ok: true, loss: o.loss, z: o.z, forward_ms: o.forward_ms, backward_ms: o.backward_ms }
    }
}

impl From<ShardResult> for ShardOut {
    fn from(r: ShardResult) -> ShardOut {
        ShardOut { loss: r.loss, z: r.z, forward_ms: r.forward_ms, backward_ms: r.backward_ms }
    }
}
