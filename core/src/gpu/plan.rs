//! The dispatches of a training step, with their bind groups and `Params`
//! uniforms, built once per (model, batch size). Recording a step is then
//! a walk over these lists.

use super::buffers::Buffers;
use super::conv;
use super::dispatch::Dispatch;
use super::launch::{self, Counter};
use super::matmul::{self, LayerMatmuls, MatmulVariant};
use super::params::TENSOR_STATS_STRIDE;
use super::GpuContext;
use crate::experiment::Experiment;
use crate::model::{LayerOp, Layout, TensorInfo};

/// One list per phase of a step.
pub struct Plan {
    /// Per micro-batch: gather the batch's rows, advance the micro counter.
    pub data: Vec<Dispatch>,
    /// Per micro-batch: every layer forward, then the loss with the output
    /// layer's ∂L/∂z.
    pub forward: Vec<Dispatch>,
    /// Per micro-batch: every layer backward from the top (the bias
    /// gradient in its own dispatch only after a tiled weight gradient).
    pub backward: Vec<Dispatch>,
    /// Once per step, after the last micro-batch's backward.
    pub regularize: Vec<Dispatch>,
    /// Once per step: gradient norm, clipping, the update, advance the step.
    pub optimizer: Vec<Dispatch>,
    /// On demand: statistics of activations, gradients, weights, updates.
    pub layer_stats: Vec<Dispatch>,
}

impl Plan {
    pub fn new(
        ctx: &GpuContext,
        b: &Buffers,
        e: &Experiment,
        layout: &Layout,
        tensors: &[TensorInfo],
        target_width: usize,
        matmuls: &[LayerMatmuls],
    ) -> Plan {
        let batch = e.batch_size;
        let data = vec![
            launch::gather_rows(batch, b.input_width, target_width).bind(
                ctx,
                "gather_rows",
                [&b.batch_inputs, &b.batch_targets, &b.flags, &b.table_inputs, &b.table_targets, &b.rows],
            ),
            launch::advance(Counter::MicroBatch).bind(ctx, "advance micro", [&b.flags]),
        ];
        let regularize = regularize_dispatches(ctx, b, e, tensors);
        let optimizer = optimizer_dispatches(ctx, b, e, layout, tensors);
        if let Some(g) = &b.gpt {
            // A transformer: its own forward and backward, the rest shared.
            let loss = super::gpt::LossSpec::of(e);
            let (forward, backward) = super::gpt::dispatches(ctx, &super::gpt::Shared::of(b), g, Some(loss), matmuls);
            return Plan { data, forward, backward, regularize, optimizer, layer_stats: Vec::new() };
        }
        let last = layout.layers.len() - 1;
        let act = |l: usize| e.model.layers[l].activation;

        // With checkpointing every layer writes its z into the one scratch.
        let z = |l: usize| if b.checkpointing { &b.z[0] } else { &b.z[l] };
        let forward_layer = |l: usize, flags: &wgpu::Buffer, label: &str| {
            let x = if l == 0 { &b.batch_inputs } else { &b.a[l - 1] };
            let shape = &layout.layers[l];
            let variant = matmuls[l].forward;
            let buffers = conv::LayerBuffers { variant, z: z(l), a: &b.a[l], x, params: &b.params, flags };
            // A conv or pool layer's own kernel, else the dense matmul.
            conv::forward(ctx, shape, batch, act(l), l, buffers, label).unwrap_or_else(|| {
                matmul::forward(matmuls[l].forward, batch, shape, act(l), l).bind(
                    ctx,
                    &format!("dense_forward{label} layer {l}"),
                    [z(l), &b.a[l], x, &b.params, flags],
                )
            })
        };
        let mut forward: Vec<Dispatch> = (0..layout.layers.len()).map(|l| forward_layer(l, &b.flags, "")).collect();
        // The loss, and in the same pass ∂L/∂z of the output layer into
        // grad[last] (the loss gradient and the output layer's activation
        // backward need no dispatch of their own). Under accumulation each
        // micro-batch's gradient is scaled by 1/k.
        let scale = 1.0 / e.grad_accumulation as f32;
        forward.push(launch::loss_forward_backward(batch, e.outputs(), e.loss, target_width, scale, act(last)).bind(
            ctx,
            "loss_forward_backward",
            [&b.stats, &b.flags, &b.grad[last], &b.a[last], z(last), &b.batch_targets],
        ));

        // Per layer, from the top: grad[l] holds ∂L/∂z of layer l. The
        // weight gradient (and bias) reads it; the input gradient turns it
        // into grad[l − 1], ∂L/∂z of the layer below, applying that
        // layer's activation backward in its store. A conv layer's and a
        // pool's kernels are `gpu::conv`'s (a pool has no weight gradient).
        let mut backward = Vec::new();
        for (l, shape) in layout.layers.iter().enumerate().rev() {
            let x = if l == 0 { &b.batch_inputs } else { &b.a[l - 1] };
            let weight = matmuls[l].backward_weight;
            if shape.op == LayerOp::Dense {
                backward.push(matmul::backward_weight(weight, batch, shape, l).bind(
                    ctx,
                    &format!("dense_backward_weight layer {l}"),
                    [&b.grads, &b.flags, &b.grad[l], x],
                ));
                if weight == MatmulVariant::Tiled {
                    let label = format!("bias_backward layer {l}");
                    backward.push(matmul::bias_backward(batch, shape, l).bind(
                        ctx,
                        &label,
                        [&b.grads, &b.flags, &b.grad[l]],
                    ));
                }
            } else {
                let buffers = [&b.grads, &b.flags, &b.grad[l], x, &b.conv_partials];
                backward.extend(conv::backward_weight(ctx, shape, batch, l, weight, buffers));
            }
            if l > 0 {
                if b.checkpointing {
                    // Recompute z[l − 1] (and a[l − 1], rewritten with the
                    // same bits) with forward's kernel on forward's inputs,
                    // for the activation backward below: a[l − 2] is
                    // untouched, and layer l's z is no longer needed. Its
                    // flags go to a buffer nobody reads: forward reported
                    // any NaN already.
                    backward.push(forward_layer(l - 1, &b.recompute_flags, " (recompute)"));
                }
                let buffers = [&b.grad[l - 1], &b.grad[l], &b.params, z(l - 1), &b.a[l - 1]];
                let below = act(l - 1);
                backward.push(
                    conv::backward_input(ctx, shape, batch, below, l, matmuls[l].backward_input, buffers)
                        .unwrap_or_else(|| {
                            matmul::backward_input(matmuls[l].backward_input, batch, shape, below).bind(
                                ctx,
                                &format!("dense_backward_input layer {l}"),
                                buffers,
                            )
                        }),
                );
            }
        }

        let layer_stats = layer_stats_plan(ctx, b, layout, batch);
        Plan { data, forward, backward, regularize, optimizer, layer_stats }
    }

    /// Rebuilds only what an edit of the optimizer's hyperparameters,
    /// clipping or regularization touches: those dispatches' `Params`
    /// uniforms and bind groups. The buffers (parameters, optimizer state)
    /// are kept; the learning rate and schedule need nothing, since the
    /// per-step scalars are written at every submit.
    pub fn retune(&mut self, ctx: &GpuContext, b: &Buffers, e: &Experiment, layout: &Layout, tensors: &[TensorInfo]) {
        self.regularize = regularize_dispatches(ctx, b, e, tensors);
        self.optimizer = optimizer_dispatches(ctx, b, e, layout, tensors);
    }
}

/// Once per step, after the last micro-batch's backward: the regularization
/// term's gradient of every weight tensor.
fn regularize_dispatches(ctx: &GpuContext, b: &Buffers, e: &Experiment, tensors: &[TensorInfo]) -> Vec<Dispatch> {
    let Some(reg) = &e.regularization else {
        return Vec::new();
    };
    let weights = tensors.iter().filter(|t| t.is_weight);
    let label = |t: &TensorInfo| format!("regularization_backward {}", t.name);
    weights.map(|t| launch::regularization_backward(t, reg).bind(ctx, &label(t), [&b.grads, &b.params])).collect()
}

/// Once per step: gradient norm, clipping, the update, advance the step.
fn optimizer_dispatches(
    ctx: &GpuContext,
    b: &Buffers,
    e: &Experiment,
    layout: &Layout,
    tensors: &[TensorInfo],
) -> Vec<Dispatch> {
    let count = layout.parameter_count;
    let n = tensors.len();
    let (layers, ends) = (layout.layers.len(), launch::layer_ends(layout));
    let mut optimizer = vec![
        launch::grad_norm(n).bind(ctx, "grad_norm", [&b.tensor_norms, &b.grads, &b.tensor_table]),
        launch::clip_grad_norm(count, n, e.clip_grad_norm).bind(
            ctx,
            "clip_grad_norm",
            [&b.grads, &b.stats, &b.flags, &b.tensor_norms],
        ),
    ];
    let spec = &e.optimizer;
    // One update over every parameter. Where a tensor does not decay (a
    // transformer's: nanoGPT decays tensors of two or more dimensions) the
    // kernels read its group from the tensor table, as the CPU's
    // `optimizer_step` gives it weight decay 0.
    let table = &b.tensor_table;
    if let Some(sgd) = launch::sgd_step(spec, count, layers, ends) {
        let buffers = [&b.params, &b.momentum_buffer, &b.updates, &b.flags, &b.grads, &b.scalars, table];
        optimizer.push(sgd.decay_groups(tensors).bind(ctx, "sgd_step", buffers));
    }
    if let Some(adam) = launch::adam_step(spec, count, layers, ends) {
        let buffers = [&b.params, &b.exp_avg, &b.exp_avg_sq, &b.updates, &b.flags, &b.grads, &b.scalars, table];
        optimizer.push(adam.decay_groups(tensors).bind(ctx, "adam_step", buffers));
    }
    if let Some([moments, step]) = launch::lamb(spec, n) {
        let (m, v, norms) = (&b.exp_avg, &b.exp_avg_sq, &b.lamb_norms);
        let moment_buffers = [m, v, norms, &b.flags, &b.params, &b.grads, &b.scalars, table];
        let step_buffers = [&b.params, &b.updates, &b.flags, m, v, norms, &b.scalars, table];
        optimizer.push(moments.bind(ctx, "lamb_moments", moment_buffers));
        optimizer.push(step.bind(ctx, "lamb_step", step_buffers));
    }
    optimizer.push(launch::advance(Counter::Step).bind(ctx, "advance step", [&b.flags]));
    optimizer
}

/// The statistics dispatches: per layer, `tensor_stats` of the last
/// micro-batch's activations and of the layer's gradients, weights and
/// last update, each into its record of `layer_stats`.
pub(super) fn layer_stats_plan(ctx: &GpuContext, b: &Buffers, layout: &Layout, batch: usize) -> Vec<Dispatch> {
    let mut layer_stats = Vec::new();
    for (l, shape) in layout.layers.iter().enumerate() {
        let range = (shape.weight_offset, shape.end() - shape.weight_offset);
        let regions: [(&wgpu::Buffer, usize, usize); 4] = [
            (&b.a[l], 0, batch * shape.units),
            (&b.grads, range.0, range.1),
            (&b.params, range.0, range.1),
            (&b.updates, range.0, range.1),
        ];
        for (kind, (src, offset, len)) in regions.into_iter().enumerate() {
            let out_offset = (4 * l + kind) * TENSOR_STATS_STRIDE;
            let label = format!("tensor_stats layer {l} kind {kind}");
            layer_stats.push(launch::tensor_stats(offset, len, out_offset).bind(ctx, &label, [&b.layer_stats, src]));
        }
    }
    layer_stats
}
