//! The dispatches of a training step, with their bind groups and `Params`
//! uniforms, built once per (model, batch size). Recording a step is then
//! a walk over these lists.

use wgpu::util::DeviceExt;

use super::buffers::Buffers;
use super::matmul::{self, LayerMatmuls, MatmulVariant};
use super::params::*;
use super::{GpuContext, Kernel};
use crate::experiment::{Experiment, OptimizerSpec, RegularizationKind};
use crate::model::{Layout, TensorInfo};

pub struct Dispatch {
    pub kernel: Kernel,
    pub bind_group: wgpu::BindGroup,
    pub grid: [u32; 3],
}

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

fn uniform<T: bytemuck::Pod>(device: &wgpu::Device, label: &str, value: &T) -> wgpu::Buffer {
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents: bytemuck::bytes_of(value),
        usage: wgpu::BufferUsages::UNIFORM,
    })
}

/// Binds `buffers` to bindings 0, 1, 2, … of `kernel`'s group 0, then its
/// `Params` uniform last.
pub(super) fn dispatch<T: bytemuck::Pod>(
    ctx: &GpuContext,
    kernel: Kernel,
    label: &str,
    buffers: &[&wgpu::Buffer],
    params: &T,
    grid: [u32; 3],
) -> Dispatch {
    let device = &ctx.device;
    let uniform = uniform(device, label, params);
    let mut entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
        .collect();
    entries.push(wgpu::BindGroupEntry { binding: buffers.len() as u32, resource: uniform.as_entire_binding() });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: &ctx.pipelines.get(kernel).get_bind_group_layout(0),
        entries: &entries,
    });
    Dispatch { kernel, bind_group, grid }
}

pub(super) fn u(x: usize) -> u32 {
    x as u32
}

fn layer_ends(layout: &Layout) -> LayerEnds {
    let mut ends = [[u32::MAX; 4]; 4];
    for (l, shape) in layout.layers.iter().enumerate() {
        ends[l / 4][l % 4] = u(shape.bias_offset + shape.units);
    }
    ends
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
        let last = layout.layers.len() - 1;
        let data = vec![
            dispatch(
                ctx,
                Kernel::GatherRows,
                "gather_rows",
                &[&b.batch_inputs, &b.batch_targets, &b.flags, &b.table_inputs, &b.table_targets, &b.rows],
                &GatherRowsParams {
                    batch: u(batch),
                    inputs: u(e.model.inputs),
                    target_width: u(target_width),
                    _pad: 0,
                },
                elementwise_grid(batch * (e.model.inputs + target_width)),
            ),
            dispatch(
                ctx,
                Kernel::Advance,
                "advance micro",
                &[&b.flags],
                &AdvanceParams { counter: 2, _pad: [0; 3] },
                [1, 1, 1],
            ),
        ];

        // With checkpointing every layer writes its z into the one scratch.
        let z = |l: usize| if b.checkpointing { &b.z[0] } else { &b.z[l] };
        let forward_layer = |l: usize, flags: &wgpu::Buffer, label: &str| {
            let x = if l == 0 { &b.batch_inputs } else { &b.a[l - 1] };
            matmul::forward(
                ctx,
                matmuls[l].forward,
                &format!("{label} layer {l}"),
                [z(l), &b.a[l], x, &b.params, flags],
                batch,
                &layout.layers[l],
                activation_code(e.model.layers[l].activation),
                l,
            )
        };
        let mut forward: Vec<Dispatch> =
            (0..layout.layers.len()).map(|l| forward_layer(l, &b.flags, "dense_forward")).collect();
        // The loss, and in the same pass ∂L/∂z of the output layer into
        // grad[last] (the loss gradient and the output layer's activation
        // backward need no dispatch of their own). Under accumulation each
        // micro-batch's gradient is scaled by 1/k.
        forward.push(dispatch(
            ctx,
            Kernel::LossForwardBackward,
            "loss_forward_backward",
            &[&b.stats, &b.flags, &b.grad[last], &b.a[last], z(last), &b.batch_targets],
            &LossForwardBackwardParams {
                batch: u(batch),
                outputs: u(e.outputs()),
                loss: loss_code(e.loss),
                target_width: u(target_width),
                scale: 1.0 / e.grad_accumulation as f32,
                activation: activation_code(e.model.layers[last].activation),
                _pad: [0; 2],
            },
            [1, 1, 1],
        ));

        // Per layer, from the top: grad[l] holds ∂L/∂z of layer l. The
        // weight gradient (and bias) reads it; the input gradient turns it
        // into grad[l − 1], ∂L/∂z of the layer below, applying that
        // layer's activation backward in its store.
        let mut backward = Vec::new();
        for (l, shape) in layout.layers.iter().enumerate().rev() {
            let x = if l == 0 { &b.batch_inputs } else { &b.a[l - 1] };
            let weight = matmuls[l].backward_weight;
            backward.push(matmul::backward_weight(
                ctx,
                weight,
                &format!("dense_backward_weight layer {l}"),
                [&b.grads, &b.flags, &b.grad[l], x],
                batch,
                shape,
                l,
            ));
            if weight == MatmulVariant::Tiled {
                backward.push(matmul::bias_backward(
                    ctx,
                    &format!("bias_backward layer {l}"),
                    [&b.grads, &b.flags, &b.grad[l]],
                    batch,
                    shape,
                    l,
                ));
            }
            if l > 0 {
                if b.checkpointing {
                    // Recompute z[l − 1] (and a[l − 1], rewritten with the
                    // same bits) with forward's kernel on forward's inputs,
                    // for the activation backward below: a[l − 2] is
                    // untouched, and layer l's z is no longer needed. Its
                    // flags go to a buffer nobody reads: forward reported
                    // any NaN already.
                    backward.push(forward_layer(l - 1, &b.recompute_flags, "dense_forward (recompute)"));
                }
                backward.push(matmul::backward_input(
                    ctx,
                    matmuls[l].backward_input,
                    &format!("dense_backward_input layer {l}"),
                    [&b.grad[l - 1], &b.grad[l], &b.params, z(l - 1), &b.a[l - 1]],
                    batch,
                    shape,
                    activation_code(e.model.layers[l - 1].activation),
                ));
            }
        }

        let regularize = regularize_dispatches(ctx, b, e, tensors);
        let optimizer = optimizer_dispatches(ctx, b, e, layout, tensors);
        let layer_stats = super::readout::layer_stats_plan(ctx, b, layout, batch);
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
    match &e.regularization {
        Some(reg) => tensors
            .iter()
            .filter(|t| t.is_weight)
            .map(|t| {
                dispatch(
                    ctx,
                    Kernel::RegularizationBackward,
                    &format!("regularization_backward {}", t.name),
                    &[&b.grads, &b.params],
                    &RegularizationBackwardParams {
                        offset: u(t.offset),
                        len: u(t.len),
                        kind: u32::from(reg.kind == RegularizationKind::L2),
                        rate: reg.rate as f32,
                    },
                    elementwise_grid(t.len),
                )
            })
            .collect(),
        None => Vec::new(),
    }
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
    let n_tensors = u(tensors.len());
    let mut optimizer = vec![
        dispatch(
            ctx,
            Kernel::GradNorm,
            "grad_norm",
            &[&b.tensor_norms, &b.grads, &b.tensor_table],
            &GradNormParams { n_tensors, _pad: [0; 3] },
            [n_tensors, 1, 1],
        ),
        dispatch(
            ctx,
            Kernel::ClipGradNorm,
            "clip_grad_norm",
            &[&b.grads, &b.stats, &b.flags, &b.tensor_norms],
            &ClipGradNormParams {
                count: u(count),
                n_tensors,
                max_norm: e.clip_grad_norm.unwrap_or(0.0) as f32,
                clip_enabled: u32::from(e.clip_grad_norm.is_some()),
            },
            elementwise_grid(count),
        ),
    ];
    let n_layers = u(layout.layers.len());
    let ends = layer_ends(layout);
    match e.optimizer {
        OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } => optimizer.push(dispatch(
            ctx,
            Kernel::SgdStep,
            "sgd_step",
            &[&b.params, &b.momentum_buffer, &b.updates, &b.flags, &b.grads, &b.scalars],
            &SgdStepParams {
                count: u(count),
                momentum: momentum as f32,
                one_minus_dampening: (1.0 - dampening) as f32,
                nesterov: u32::from(nesterov),
                weight_decay: weight_decay as f32,
                use_momentum: u32::from(momentum != 0.0),
                n_layers,
                _pad: 0,
                layer_ends: ends,
            },
            elementwise_grid(count),
        )),
        OptimizerSpec::Adam { betas, eps, weight_decay, .. }
        | OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => optimizer.push(dispatch(
            ctx,
            Kernel::AdamStep,
            "adam_step",
            &[&b.params, &b.exp_avg, &b.exp_avg_sq, &b.updates, &b.flags, &b.grads, &b.scalars],
            &AdamStepParams {
                count: u(count),
                one_minus_beta1: (1.0 - betas[0]) as f32,
                beta2: betas[1] as f32,
                one_minus_beta2: (1.0 - betas[1]) as f32,
                eps: eps as f32,
                weight_decay: weight_decay as f32,
                decoupled: u32::from(matches!(e.optimizer, OptimizerSpec::Adamw { .. })),
                n_layers,
                layer_ends: ends,
            },
            elementwise_grid(count),
        )),
        OptimizerSpec::Lamb { betas, eps, weight_decay, .. } => {
            let params = LambParams {
                n_tensors,
                beta1: betas[0] as f32,
                one_minus_beta1: (1.0 - betas[0]) as f32,
                beta2: betas[1] as f32,
                one_minus_beta2: (1.0 - betas[1]) as f32,
                eps: eps as f32,
                weight_decay: weight_decay as f32,
                _pad: 0,
            };
            optimizer.push(dispatch(
                ctx,
                Kernel::LambMoments,
                "lamb_moments",
                &[&b.exp_avg, &b.exp_avg_sq, &b.lamb_norms, &b.flags, &b.params, &b.grads, &b.scalars, &b.tensor_table],
                &params,
                [n_tensors, 1, 1],
            ));
            optimizer.push(dispatch(
                ctx,
                Kernel::LambStep,
                "lamb_step",
                &[
                    &b.params,
                    &b.updates,
                    &b.flags,
                    &b.exp_avg,
                    &b.exp_avg_sq,
                    &b.lamb_norms,
                    &b.scalars,
                    &b.tensor_table,
                ],
                &params,
                [n_tensors, 1, 1],
            ));
        }
    }
    optimizer.push(dispatch(
        ctx,
        Kernel::Advance,
        "advance step",
        &[&b.flags],
        &AdvanceParams { counter: 1, _pad: [0; 3] },
        [1, 1, 1],
    ));
    optimizer
}
