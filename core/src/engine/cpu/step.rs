//! The CPU engine's step, phase by phase: the data, each micro-batch's
//! forward and backward (the MLP a layer at a time, the transformer's
//! micro-batch as one part), regularization, then the update; and where a
//! NaN or Inf first shows, by layer or tensor.

use web_time::Instant;

use super::{CpuEngine, Partial, Work};
use crate::engine::forward::layer_forward;
use crate::engine::{forward_layer, Phase, PhaseTimes, StepMetrics, StepPhase, Timing};
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::model::conv::{avg_pool2d_backward, conv2d_backward, max_pool2d_backward};
use crate::model::{
    activation_backward, all_finite, dense_backward, loss_backward, loss_forward, regularization_backward, LayerOp,
    TensorInfo,
};
use crate::optim::{clip_grad_norm, global_grad_norm, learning_rate, optimizer_step};

impl CpuEngine {
    /// Runs the phase `partial.next` (from where it stands, or only its
    /// next layer when `one_layer`) and moves it on; the optimizer phase
    /// ends the step and returns its metrics.
    pub(super) fn advance(&mut self, partial: &mut Partial, one_layer: bool) -> Result<Option<StepMetrics>> {
        let e = self.experiment.clone();
        let e = &e;
        let (batch, k, shards) = (e.batch_size, e.grad_accumulation, e.shards);
        // A sharded run steps by phase shard by shard (each shard's
        // forward, then its backward into its own buffer; the all-reduce
        // after the micro-batch's last shard), the same sums as
        // `sharded_step`; otherwise the micro-batch whole, into `grads`.
        let sharded = self.ranks.is_some();
        let rows = batch / shards;
        let shard = partial.shard;
        let p = self.layout.parameter_count;
        let layers = self.layout.layers.len();
        let step = self.optimizer.step + 1;
        match partial.next {
            StepPhase::Forward { micro } => {
                let t0 = Instant::now();
                if partial.layers_done == 0 && shard == 0 {
                    if micro == 0 {
                        partial.start = Some(self.batcher.position().clone());
                    }
                    if micro == 0 && self.zero_grad {
                        self.grads.fill(0.0);
                    }
                    self.serve_batch(batch);
                }
                let t1 = Instant::now();
                let (width, target_width) = (self.inputs.len() / batch, self.targets.len() / batch);
                let inputs = &self.inputs[shard * rows * width..][..rows * width];
                let targets = &self.targets[shard * rows * target_width..][..rows * target_width];
                if let Some(gpt) = &mut self.gpt {
                    if micro == 0 && partial.layers_done == 0 && shard == 0 {
                        gpt.begin_step();
                    }
                    // The micro-batch's forward, or (`one_layer`: step by
                    // phase) its next stage alone.
                    let mut loss = None;
                    while loss.is_none() {
                        loss = gpt.forward_stage(&self.params, inputs, targets, partial.layers_done);
                        partial.layers_done += 1;
                        if one_layer {
                            break;
                        }
                    }
                    partial.phases.data_ms += ms(t0, t1);
                    partial.phases.forward_ms += ms(t1, Instant::now());
                    let Some(loss) = loss else { return Ok(None) };
                    if !loss.is_finite() {
                        return Err(non_finite_tensor(Phase::Loss, "the logits", step));
                    }
                    partial.add_loss(loss, gpt.last_z, sharded);
                    partial.next = partial.next.next(k);
                    partial.layers_done = 0;
                    return Ok(None);
                }
                partial.layer_times.sized(layers);
                loop {
                    let l = partial.layers_done;
                    let t = Instant::now();
                    let finite = forward_layer(&mut self.acts, &self.params, inputs, &self.layout, e, l);
                    partial.layer_times.forward[l] += ms(t, Instant::now());
                    if !finite {
                        return Err(non_finite(Phase::Forward, l, step));
                    }
                    partial.layers_done += 1;
                    if partial.layers_done == layers || one_layer {
                        break;
                    }
                }
                partial.phases.data_ms += ms(t0, t1);
                partial.phases.forward_ms += ms(t1, Instant::now());
                if partial.layers_done < layers {
                    return Ok(None);
                }
                let t2 = Instant::now();
                let loss = loss_forward(self.acts.output(), targets, e.loss, rows, e.outputs());
                partial.layer_times.loss_forward += ms(t2, Instant::now());
                if !loss.is_finite() {
                    return Err(non_finite(Phase::Loss, layers - 1, step));
                }
                partial.add_loss(loss, 0.0, sharded);
                partial.phases.forward_ms += ms(t2, Instant::now());
            }
            StepPhase::Backward { micro } => {
                let t0 = Instant::now();
                let scale = 1.0 / (k * shards) as f32;
                let (width, target_width) = (self.inputs.len() / batch, self.targets.len() / batch);
                let inputs = &self.inputs[shard * rows * width..][..rows * width];
                let targets = &self.targets[shard * rows * target_width..][..rows * target_width];
                let grads = match &mut self.ranks {
                    Some(ranks) => {
                        let g = ranks.shard_grads_mut(shard, p);
                        if partial.layers_done == 0 {
                            g.fill(0.0);
                        }
                        g
                    }
                    None => self.grads.as_mut_slice(),
                };
                let stages = match &self.gpt {
                    Some(gpt) => gpt.stages(),
                    None => layers,
                };
                if let Some(gpt) = &mut self.gpt {
                    loop {
                        gpt.backward_stage(grads, &self.params, e.z_loss as f32, scale, partial.layers_done);
                        partial.layers_done += 1;
                        if partial.layers_done == stages || one_layer {
                            break;
                        }
                    }
                } else {
                    partial.layer_times.sized(layers);
                    if partial.layers_done == 0 {
                        let t = Instant::now();
                        let out = self.acts.output();
                        loss_backward(&mut self.grad[layers - 1], out, targets, e.loss, rows, e.outputs(), scale);
                        partial.layer_times.loss_backward += ms(t, Instant::now());
                    }
                    loop {
                        let l = layers - 1 - partial.layers_done;
                        let work = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
                        let t = Instant::now();
                        backward_layer(work, grads, &self.params, inputs, &self.layout, e, rows, l, step)?;
                        partial.layer_times.backward[l] += ms(t, Instant::now());
                        partial.layers_done += 1;
                        if partial.layers_done == layers || one_layer {
                            break;
                        }
                    }
                }
                let done = partial.layers_done == stages;
                partial.shown_shard = sharded.then_some(shard);
                if done && self.gpt.is_some() {
                    if let Some(t) = first_non_finite_tensor(grads, &self.tensors) {
                        return Err(non_finite_tensor(Phase::Backward, t, step));
                    }
                }
                if done && sharded {
                    if shard + 1 < shards {
                        // The micro-batch's next shard: its forward.
                        partial.shard += 1;
                        partial.next = StepPhase::Forward { micro };
                        partial.layers_done = 0;
                        partial.phases.backward_ms += ms(t0, Instant::now());
                        return Ok(None);
                    }
                    // The all-reduce, in shard order, as `sharded_step`.
                    let t = Instant::now();
                    let ranks = self.ranks.as_ref().expect("sharded");
                    ranks.reduce_into(&mut self.grads);
                    partial.phases.communication_ms += ms(t, Instant::now());
                    partial.end_micro_batch(shards);
                    partial.shown_shard = None;
                }
                if done && micro + 1 == k {
                    if let Some(reg) = &e.regularization {
                        regularization_backward(&mut self.grads, &self.params, &self.tensors, reg);
                    }
                }
                partial.phases.backward_ms += ms(t0, Instant::now());
                if !done {
                    return Ok(None);
                }
            }
            StepPhase::Optimizer => {
                let (loss_sum, phases) = (partial.loss_sum, partial.phases);
                if let (true, Some(gpt)) = (sharded, &mut self.gpt) {
                    gpt.z_sum = partial.z_sum;
                }
                let layer_times = std::mem::take(&mut partial.layer_times);
                let metrics = self.finish_step(e, loss_sum, phases)?;
                self.last_layer_times = self.gpt.is_none().then_some((metrics.step, layer_times));
                return Ok(Some(metrics));
            }
        }
        partial.next = partial.next.next(k);
        partial.layers_done = 0;
        Ok(None)
    }

    /// The optimizer phase, which ends every step (whole, in parts or
    /// sharded): the update, its checks, and the step's metrics.
    pub(super) fn finish_step(&mut self, e: &Experiment, loss_sum: f32, mut phases: PhaseTimes) -> Result<StepMetrics> {
        let k = e.grad_accumulation;
        let t0 = Instant::now();
        let (grad_norm, clipped, lr) = self.update(e);
        let step = self.optimizer.step - 1;
        phases.optimizer_ms = ms(t0, Instant::now());
        if let Some(layer) = self.first_non_finite_layer(&self.params) {
            return Err(non_finite(Phase::Optimizer, layer, step + 1));
        }
        if let Some(gpt) = self.gpt.as_mut() {
            gpt.end_step(step);
            if let Some(t) = first_non_finite_tensor(&self.params, &self.tensors) {
                return Err(non_finite_tensor(Phase::Optimizer, t, step + 1));
            }
        }
        Ok(StepMetrics {
            step,
            loss: loss_sum / k as f32,
            grad_norm,
            z_loss: self.gpt.as_ref().map(|g| g.z_sum / k as f32),
            lr,
            clipped,
            phases,
            timing: Timing::Cpu,
            gpu_ms: None,
            ranks: Vec::new(),
        })
    }

    /// The optimizer phase: the gradient norm, clipping, the learning rate
    /// and the update (kept in `updates`): (norm, clipped, lr). Never
    /// inlined, as `backward_layer` and `forward_layer`: the profiled
    /// step's bursts then run the very code of the real step (a copy
    /// inlined into the bursts alone would be compiled, and timed,
    /// apart; on the web it would even start in the baseline tier).
    #[inline(never)]
    pub(super) fn update(&mut self, e: &Experiment) -> (f32, bool, f64) {
        let grad_norm = global_grad_norm(&self.grads, &self.tensors);
        let clipped = match e.clip_grad_norm {
            Some(max_norm) => clip_grad_norm(&mut self.grads, grad_norm, max_norm),
            None => false,
        };
        let lr = learning_rate(&e.schedule, e.optimizer.lr(), self.optimizer.step);
        self.updates.copy_from_slice(&self.params);
        optimizer_step(&mut self.params, &mut self.optimizer, &self.grads, &e.optimizer, lr, &self.tensors);
        for (u, p) in self.updates.iter_mut().zip(&self.params) {
            *u = p - *u;
        }
        (grad_norm, clipped, lr)
    }

    /// Backward through layer `l` for the current batch (∂L/∂a of its
    /// outputs is in `grad[l]`, turned into ∂L/∂z in place); accumulates
    /// into `grads` and writes ∂L/∂a of its inputs into `grad[l − 1]`. With activation checkpointing the layer's z is
    /// recomputed first.
    #[inline(never)]
    pub(super) fn backward_layer(&mut self, l: usize) -> Result<()> {
        let (e, step) = (&self.experiment, self.optimizer.step + 1);
        let rows = e.batch_size;
        let work = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
        backward_layer(work, &mut self.grads, &self.params, &self.inputs, &self.layout, e, rows, l, step)
    }

    pub(super) fn first_non_finite_layer(&self, values: &[f32]) -> Option<usize> {
        self.layout.layers.iter().position(|l| !all_finite(&values[l.weight_offset..l.end()]))
    }
}

/// Backward through layer `l` of the last forward over `batch` rows in
/// `work` (∂L/∂a of its outputs is in `work.grad[l]`, turned into ∂L/∂z in
/// place); accumulates into `grads` and writes ∂L/∂a of its inputs into
/// `work.grad[l − 1]`. The engine's own backward and each shard's (`ranks`).
#[allow(clippy::too_many_arguments)]
#[inline(never)]
pub(super) fn backward_layer(
    work: Work<'_>,
    grads: &mut [f32],
    params: &[f32],
    inputs: &[f32],
    layout: &crate::model::Layout,
    e: &Experiment,
    batch: usize,
    l: usize,
    step: u64,
) -> Result<()> {
    let acts = work.acts;
    let shape = layout.layers[l];
    let n = batch * shape.units;
    let weight = &params[shape.weight_offset..shape.bias_offset];
    let x = if l == 0 { inputs } else { acts.a[l - 1].as_slice() };
    let z = if acts.checkpointing {
        // Recompute z[l] from x, W and b into the shared scratch: the
        // same function on the same inputs as forward, so the same bits.
        // a[l] is still stored.
        let bias = &params[shape.bias_offset..shape.end()];
        let z = &mut acts.z[0][..n];
        layer_forward(z, &mut acts.argmax[l], &mut acts.conv_scratch, x, weight, bias, batch, &shape);
        &*z
    } else {
        &acts.z[l][..]
    };
    let (below, this) = work.grad.split_at_mut(l);
    let dz = &mut this[0][..n];
    activation_backward(dz, z, &acts.a[l], e.model.layers[l].activation);
    let (dweight, rest) = grads[shape.weight_offset..].split_at_mut(shape.bias_offset - shape.weight_offset);
    let dbias = &mut rest[..shape.bias_len()];
    let dx = below.last_mut().map(Vec::as_mut_slice);
    match shape.op {
        LayerOp::Dense => dense_backward(dx, dweight, dbias, dz, x, weight, batch, shape.inputs, shape.units),
        LayerOp::Conv(c) => conv2d_backward(dx, dweight, dbias, dz, x, weight, batch, &c, &mut acts.conv_scratch),
        LayerOp::MaxPool(p) => {
            if let Some(dx) = dx {
                max_pool2d_backward(dx, dz, &acts.argmax[l], batch, &p);
            }
        }
        LayerOp::AvgPool(p) => {
            if let Some(dx) = dx {
                avg_pool2d_backward(dx, dz, batch, &p);
            }
        }
    }
    if !all_finite(&grads[shape.weight_offset..shape.end()]) {
        return Err(non_finite(Phase::Backward, l, step));
    }
    Ok(())
}

fn ms(a: Instant, b: Instant) -> f64 {
    (b - a).as_secs_f64() * 1e3
}

/// The first tensor of `values` (parameters or gradients) holding a NaN
/// or Inf, by name.
pub(super) fn first_non_finite_tensor<'a>(values: &[f32], tensors: &'a [TensorInfo]) -> Option<&'a str> {
    tensors.iter().find(|t| !all_finite(&values[t.offset..t.offset + t.len])).map(|t| t.name.as_str())
}

/// `non_finite` for the transformer, whose places are tensors.
pub(super) fn non_finite_tensor(phase: Phase, place: &str, step: u64) -> Error {
    let kept = if phase == Phase::Optimizer {
        "the update already applied: restore the last good checkpoint"
    } else {
        "parameters and optimizer state kept from before this step"
    };
    Error::NonFinite(format!("first NaN/Inf at step {step}, in {place} during {phase}; {kept}"))
}

/// `step`: the step's number as the page counts it (the first is 1).
pub(super) fn non_finite(phase: Phase, layer: usize, step: u64) -> Error {
    let kept = if phase == Phase::Optimizer {
        "the update already applied: restore the last good checkpoint"
    } else {
        "parameters and optimizer state kept from before this step"
    };
    Error::NonFinite(format!("first NaN/Inf at step {step}, in layer {layer} during {phase}; {kept}"))
}
