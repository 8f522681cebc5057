//! One typed launch per kernel: the kernel, its `Params` (built here and
//! nowhere else) and its grid, with the number of storage bindings its WGSL
//! header declares as a type parameter. The training plan binds a launch to
//! its buffers (`Launch::bind`); the twin tests and the benchmark probes run
//! the same launch on their own data (`Launch::run`), so all three dispatch
//! a kernel the same way. The matmuls' launches are in `gpu::matmul`.

use super::dispatch::{dispatch, Dispatch};
use super::harness::{run_kernel, Arg};
use super::params::*;
use super::{GpuContext, Kernel};
use crate::error::Result;
use crate::experiment::{Activation, Loss, OptimizerSpec, Regularization, RegularizationKind};
use crate::model::{Layout, TensorInfo};

/// A dispatch of `kernel` over `grid` with `params`, its `N` storage
/// bindings given in the WGSL header's order and the uniform after them.
#[derive(Clone, Copy, Debug)]
pub struct Launch<P: bytemuck::Pod, const N: usize> {
    pub kernel: Kernel,
    pub params: P,
    pub grid: [u32; 3],
}

impl<P: bytemuck::Pod, const N: usize> Launch<P, N> {
    pub(crate) fn new(kernel: Kernel, params: P, grid: [u32; 3]) -> Self {
        Launch { kernel, params, grid }
    }

    /// The plan's dispatch: `buffers` bound to bindings 0..N, the `Params`
    /// uniform to binding N.
    pub(crate) fn bind(&self, ctx: &GpuContext, label: &str, buffers: [&wgpu::Buffer; N]) -> Dispatch {
        dispatch(ctx, self.kernel, label, &buffers, &self.params, self.grid)
    }

    /// Runs once on given data (twin tests, probes) and returns every
    /// `Arg::Out` after the run, in order.
    pub async fn run(&self, ctx: &GpuContext, args: [Arg<'_>; N]) -> Result<Vec<Vec<u8>>> {
        let mut all: Vec<Arg> = args.into_iter().collect();
        all.push(Arg::Uniform(bytemuck::bytes_of(&self.params)));
        run_kernel(ctx, self.kernel, &all, self.grid).await
    }
}

fn u(x: usize) -> u32 {
    x as u32
}

/// Bindings: batch_inputs, batch_targets, flags, table_inputs,
/// table_targets, rows.
pub fn gather_rows(batch: usize, inputs: usize, target_width: usize) -> Launch<GatherRowsParams, 6> {
    let p = GatherRowsParams { batch: u(batch), inputs: u(inputs), target_width: u(target_width), _pad: 0 };
    Launch::new(Kernel::GatherRows, p, elementwise_grid(batch * (inputs + target_width)))
}

/// Which counter of `flags` `advance` increments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Step = 1,
    MicroBatch = 2,
}

/// Bindings: flags.
pub fn advance(counter: Counter) -> Launch<AdvanceParams, 1> {
    Launch::new(Kernel::Advance, AdvanceParams { counter: counter as u32, _pad: [0; 3] }, [1, 1, 1])
}

/// The loss with the output layer's ∂L/∂z, scaled by `scale` (1/k under
/// accumulation). Bindings: stats, flags, dz, y, z, targets.
pub fn loss_forward_backward(
    batch: usize,
    outputs: usize,
    loss: Loss,
    target_width: usize,
    scale: f32,
    activation: Activation,
) -> Launch<LossForwardBackwardParams, 6> {
    let p = LossForwardBackwardParams {
        batch: u(batch),
        outputs: u(outputs),
        loss: loss_code(loss),
        target_width: u(target_width),
        scale,
        activation: activation_code(activation),
        _pad: [0; 2],
    };
    Launch::new(Kernel::LossForwardBackward, p, [1, 1, 1])
}

/// The regularization term's gradient of one tensor. Bindings: grads,
/// params.
pub fn regularization_backward(t: &TensorInfo, reg: &Regularization) -> Launch<RegularizationBackwardParams, 2> {
    let p = RegularizationBackwardParams {
        offset: u(t.offset),
        len: u(t.len),
        kind: u32::from(reg.kind == RegularizationKind::L2),
        rate: reg.rate as f32,
    };
    Launch::new(Kernel::RegularizationBackward, p, elementwise_grid(t.len))
}

/// Per-tensor gradient norms. Bindings: tensor_norms, grads, tensor_table.
pub fn grad_norm(n_tensors: usize) -> Launch<GradNormParams, 3> {
    Launch::new(Kernel::GradNorm, GradNormParams { n_tensors: u(n_tensors), _pad: [0; 3] }, [u(n_tensors), 1, 1])
}

/// The global norm and, with `max_norm`, clipping. Bindings: grads, stats,
/// flags, tensor_norms.
pub fn clip_grad_norm(count: usize, n_tensors: usize, max_norm: Option<f64>) -> Launch<ClipGradNormParams, 4> {
    let p = ClipGradNormParams {
        count: u(count),
        n_tensors: u(n_tensors),
        max_norm: max_norm.unwrap_or(0.0) as f32,
        clip_enabled: u32::from(max_norm.is_some()),
    };
    Launch::new(Kernel::ClipGradNorm, p, elementwise_grid(count))
}

/// End (exclusive) of each layer's parameters, for the elementwise
/// optimizers' non-finite reports.
pub fn layer_ends(layout: &Layout) -> LayerEnds {
    let mut ends = [[u32::MAX; 4]; 4];
    for (l, shape) in layout.layers.iter().enumerate() {
        ends[l / 4][l % 4] = u(shape.end());
    }
    ends
}

/// SGD over `count` parameters of `n_layers` layers, every one decaying
/// (`decay_groups` for a transformer's). Bindings: params,
/// momentum_buffer, updates, flags, grads, scalars, tensor_table. None for
/// another optimizer.
pub fn sgd_step(
    spec: &OptimizerSpec,
    count: usize,
    n_layers: usize,
    layer_ends: LayerEnds,
) -> Option<Launch<SgdStepParams, 7>> {
    let OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } = *spec else {
        return None;
    };
    let p = SgdStepParams {
        count: u(count),
        momentum: momentum as f32,
        one_minus_dampening: (1.0 - dampening) as f32,
        nesterov: u32::from(nesterov),
        weight_decay: weight_decay as f32,
        use_momentum: u32::from(momentum != 0.0),
        n_layers: u(n_layers),
        decay_tensors: 0,
        layer_ends,
    };
    Some(Launch::new(Kernel::SgdStep, p, elementwise_grid(count)))
}

/// Adam or AdamW, every parameter decaying (`decay_groups` for a
/// transformer's). Bindings: params, exp_avg, exp_avg_sq, updates, flags,
/// grads, scalars, tensor_table. None for another optimizer.
pub fn adam_step(
    spec: &OptimizerSpec,
    count: usize,
    n_layers: usize,
    layer_ends: LayerEnds,
) -> Option<Launch<AdamStepParams, 8>> {
    let (OptimizerSpec::Adam { betas, eps, weight_decay, .. } | OptimizerSpec::Adamw { betas, eps, weight_decay, .. }) =
        *spec
    else {
        return None;
    };
    let p = AdamStepParams {
        count: u(count),
        one_minus_beta1: (1.0 - betas[0]) as f32,
        beta2: betas[1] as f32,
        one_minus_beta2: (1.0 - betas[1]) as f32,
        eps: eps as f32,
        weight_decay: weight_decay as f32,
        decoupled: u32::from(matches!(spec, OptimizerSpec::Adamw { .. })),
        n_layers: u(n_layers),
        layer_ends,
        decay_tensors: 0,
        _pad: [0; 3],
    };
    Some(Launch::new(Kernel::AdamStep, p, elementwise_grid(count)))
}

/// LAMB's two passes over `n_tensors` tensors, one workgroup each:
/// `lamb_moments` (bindings: exp_avg, exp_avg_sq, lamb_norms, flags,
/// params, grads, scalars, tensor_table), then `lamb_step` (params,
/// updates, flags, exp_avg, exp_avg_sq, lamb_norms, scalars,
/// tensor_table). Weight decay applies to the tensors whose table row
/// decays. None for another optimizer.
pub fn lamb(spec: &OptimizerSpec, n_tensors: usize) -> Option<[Launch<LambParams, 8>; 2]> {
    let OptimizerSpec::Lamb { betas, eps, weight_decay, .. } = *spec else {
        return None;
    };
    let p = LambParams {
        n_tensors: u(n_tensors),
        beta1: betas[0] as f32,
        one_minus_beta1: (1.0 - betas[0]) as f32,
        beta2: betas[1] as f32,
        one_minus_beta2: (1.0 - betas[1]) as f32,
        eps: eps as f32,
        weight_decay: weight_decay as f32,
        _pad: 0,
    };
    let grid = [u(n_tensors), 1, 1];
    Some([Launch::new(Kernel::LambMoments, p, grid), Launch::new(Kernel::LambStep, p, grid)])
}

/// Statistics of `len` values at `offset` into record `out_offset` (in
/// floats) of the output. Bindings: out, src.
pub fn tensor_stats(offset: usize, len: usize, out_offset: usize) -> Launch<TensorStatsParams, 2> {
    let p = TensorStatsParams { offset: u(offset), len: u(len), out_offset: u(out_offset), _pad: 0 };
    Launch::new(Kernel::TensorStats, p, [1, 1, 1])
}

/// The exact GELU over `count` elements. Bindings: out, inp.
pub fn gelu_forward(count: usize) -> Launch<ElementwiseParams, 2> {
    let p = ElementwiseParams { count: u(count), _pad: [0; 3] };
    Launch::new(Kernel::GeluForward, p, elementwise_grid(count))
}

/// GELU's backward over `count` elements, added into dinp (`accumulate`)
/// or overwriting it. Bindings: dinp, inp, dout.
pub fn gelu_backward(count: usize, accumulate: bool) -> Launch<GeluBackwardParams, 3> {
    let p = GeluBackwardParams { count: u(count), accumulate: u32::from(accumulate), _pad: [0; 2] };
    Launch::new(Kernel::GeluBackward, p, elementwise_grid(count))
}

/// Where a LayerNorm's w and b (or their gradients) sit in the flat
/// buffer bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormAt {
    pub weight: usize,
    pub bias: usize,
}

fn layernorm_params(rows: usize, c: usize, at: NormAt) -> LayerNormParams {
    LayerNormParams { rows: u(rows), c: u(c), weight_offset: u(at.weight), bias_offset: u(at.bias) }
}

/// LayerNorm over `rows` rows of `c`. Bindings: out, mean, rstd, inp,
/// params.
pub fn layernorm_forward(rows: usize, c: usize, at: NormAt) -> Launch<LayerNormParams, 5> {
    Launch::new(Kernel::LayerNormForward, layernorm_params(rows, c, at), row_grid(rows))
}

/// LayerNorm's ∂L/∂x, added into dinp (`accumulate`) or overwriting it
/// (w at `at.weight`). Bindings: dinp, dout, inp, params, mean, rstd.
pub fn layernorm_backward_input(
    rows: usize,
    c: usize,
    at: NormAt,
    accumulate: bool,
) -> Launch<LayerNormBackwardInputParams, 6> {
    let p = LayerNormBackwardInputParams {
        rows: u(rows),
        c: u(c),
        weight_offset: u(at.weight),
        accumulate: u32::from(accumulate),
    };
    Launch::new(Kernel::LayerNormBackwardInput, p, row_grid(rows))
}

/// LayerNorm's dγ and dβ, accumulated into the flat gradients. Bindings:
/// grads, dout, inp, mean, rstd.
pub fn layernorm_backward_params(rows: usize, c: usize, at: NormAt) -> Launch<LayerNormParams, 5> {
    Launch::new(Kernel::LayerNormBackwardParams, layernorm_params(rows, c, at), [u(c.max(1)), 1, 1])
}

/// Where wte and wpe (or their gradients) sit in the flat buffer bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingsAt {
    pub wte: usize,
    pub wpe: usize,
}

fn encoder_params(rows: usize, t: usize, c: usize, vocab: usize, at: EmbeddingsAt) -> EncoderParams {
    EncoderParams {
        rows: u(rows),
        t: u(t),
        c: u(c),
        vocab: u(vocab),
        wte_offset: u(at.wte),
        wpe_offset: u(at.wpe),
        _pad: [0; 2],
    }
}

/// The embeddings of `rows` positions in windows of `t`. Bindings: out,
/// tokens (ids as f32), params.
pub fn encoder_forward(rows: usize, t: usize, c: usize, vocab: usize, at: EmbeddingsAt) -> Launch<EncoderParams, 3> {
    Launch::new(Kernel::EncoderForward, encoder_params(rows, t, c, vocab, at), elementwise_grid(rows * c))
}

/// The embeddings' gradients, accumulated into the flat gradients.
/// Bindings: grads, dout, tokens (ids as f32).
pub fn encoder_backward(rows: usize, t: usize, c: usize, vocab: usize, at: EmbeddingsAt) -> Launch<EncoderParams, 3> {
    let grid = elementwise_grid((vocab + t) * c);
    Launch::new(Kernel::EncoderBackward, encoder_params(rows, t, c, vocab, at), grid)
}

fn attention_params(b: usize, t: usize, c: usize, h: usize) -> AttentionParams {
    assert!(t <= ATTENTION_MAX_T && h > 0 && c.is_multiple_of(h), "attention of T {t}, C {c}, H {h}");
    AttentionParams { b: u(b), t: u(t), c: u(c), h: u(h) }
}

/// Causal self-attention over `b` windows of `t` ≤ `ATTENTION_MAX_T`
/// tokens, `h` heads of C/h. Bindings: out, att, inp (q, k, v).
pub fn attention_forward(b: usize, t: usize, c: usize, h: usize) -> Launch<AttentionParams, 3> {
    Launch::new(Kernel::AttentionForward, attention_params(b, t, c, h), row_grid(b * h * t))
}

/// Attention's backward, per query row: ∂L/∂s (stored) and ∂L/∂q
/// (written). Bindings: dinp, ds, dout, inp, att.
pub fn attention_backward_query(b: usize, t: usize, c: usize, h: usize) -> Launch<AttentionParams, 5> {
    Launch::new(Kernel::AttentionBackwardQuery, attention_params(b, t, c, h), row_grid(b * h * t))
}

/// `attention_forward` with an invocation per query row and no barrier.
/// Bindings: out, att, inp.
pub fn attention_forward_rows(b: usize, t: usize, c: usize, h: usize) -> Launch<AttentionParams, 3> {
    Launch::new(Kernel::AttentionForwardRows, attention_params(b, t, c, h), grid_of_64(b * h * t))
}

/// `attention_backward_query` with an invocation per query row and no
/// barrier. Bindings: dinp, ds, dout, inp, att.
pub fn attention_backward_query_rows(b: usize, t: usize, c: usize, h: usize) -> Launch<AttentionParams, 5> {
    Launch::new(Kernel::AttentionBackwardQueryRows, attention_params(b, t, c, h), grid_of_64(b * h * t))
}

/// Workgroups of 64 invocations for `count` items, 2-D past 65535 (the
/// kernel's item is `(wid.y · num_workgroups.x + wid.x) · 64 + lid.x`).
pub fn grid_of_64(count: usize) -> [u32; 3] {
    let groups = count.div_ceil(64).max(1);
    let x = groups.min(65_535);
    [x as u32, groups.div_ceil(x) as u32, 1]
}

/// Attention's backward down the columns: ∂L/∂k and ∂L/∂v (written).
/// Bindings: dinp, dout, inp, att, ds.
pub fn attention_backward_key(b: usize, t: usize, c: usize, h: usize) -> Launch<AttentionParams, 5> {
    Launch::new(Kernel::AttentionBackwardKey, attention_params(b, t, c, h), elementwise_grid(b * t * c))
}

/// The cross-entropy of `rows` rows of `v` logits, each row's loss and
/// logsumexp stored and its gradient written. Bindings: dlogits, losses,
/// logits, targets (ids as f32).
pub fn cross_entropy_forward_backward(rows: usize, v: usize, z_loss: f32, scale: f32) -> Launch<CrossEntropyParams, 4> {
    let p = CrossEntropyParams { rows: u(rows), v: u(v), z_loss, scale };
    Launch::new(Kernel::CrossEntropyForwardBackward, p, row_grid(rows))
}

/// The micro-batch's mean cross-entropy and z-loss, added to the step's
/// statistics. Bindings: stats, flags, losses.
pub fn cross_entropy_loss(rows: usize, order: usize) -> Launch<CrossEntropyLossParams, 3> {
    let p = CrossEntropyLossParams { rows: u(rows), order: u(order), _pad: [0; 2] };
    Launch::new(Kernel::CrossEntropyLoss, p, [1, 1, 1])
}

fn qk_params(rows: usize, c: usize, h: usize, q: NormAt, k: NormAt) -> QkLayerNormParams {
    QkLayerNormParams {
        rows: u(rows),
        c: u(c),
        h: u(h),
        _pad: 0,
        q_weight: u(q.weight),
        q_bias: u(q.bias),
        k_weight: u(k.weight),
        k_bias: u(k.bias),
    }
}

/// The q/k LayerNorm of `rows` rows of q, k, v (3C, H heads): q and k
/// normalised per head, v copied. Bindings: out, mean, rstd, inp, params.
pub fn qk_layernorm_forward(rows: usize, c: usize, h: usize, q: NormAt, k: NormAt) -> Launch<QkLayerNormParams, 5> {
    let grid = elementwise_grid(rows * 2 * h + rows * c);
    Launch::new(Kernel::QkLayerNormForward, qk_params(rows, c, h, q, k), grid)
}

/// Its ∂L/∂x (overwritten; v's passes through). Bindings: dinp, dout, inp,
/// params, mean, rstd.
pub fn qk_layernorm_backward_input(
    rows: usize,
    c: usize,
    h: usize,
    q: NormAt,
    k: NormAt,
) -> Launch<QkLayerNormParams, 6> {
    let grid = elementwise_grid(rows * 2 * h + rows * c);
    Launch::new(Kernel::QkLayerNormBackwardInput, qk_params(rows, c, h, q, k), grid)
}

/// Its dγ and dβ (q's and k's), added into the flat gradients. Bindings:
/// grads, dout, inp, mean, rstd.
pub fn qk_layernorm_backward_params(
    rows: usize,
    c: usize,
    h: usize,
    q: NormAt,
    k: NormAt,
) -> Launch<QkLayerNormParams, 5> {
    let grid = elementwise_grid(2 * (c / h.max(1)));
    Launch::new(Kernel::QkLayerNormBackwardParams, qk_params(rows, c, h, q, k), grid)
}

/// y += x over `count` elements (the residual adds). Bindings: y, x.
pub fn residual_forward(count: usize) -> Launch<ElementwiseParams, 2> {
    let p = ElementwiseParams { count: u(count), _pad: [0; 3] };
    Launch::new(Kernel::ResidualForward, p, elementwise_grid(count))
}

/// The value of `decay_tensors` for `tensors`: 0 where every tensor decays
/// (one pass, no table look-up), else their number.
fn decay_tensors(tensors: &[TensorInfo]) -> u32 {
    if tensors.iter().all(|t| t.decays) {
        0
    } else {
        u(tensors.len())
    }
}

impl Launch<SgdStepParams, 7> {
    /// Weight decay only where the tensor table says the tensor decays (a
    /// transformer's groups): still one dispatch over every parameter.
    pub fn decay_groups(mut self, tensors: &[TensorInfo]) -> Self {
        self.params.decay_tensors = decay_tensors(tensors);
        self
    }
}

impl Launch<AdamStepParams, 8> {
    /// As SGD's: neither Adam's nor AdamW's decay where the tensor does
    /// not decay.
    pub fn decay_groups(mut self, tensors: &[TensorInfo]) -> Self {
        self.params.decay_tensors = decay_tensors(tensors);
        self
    }
}

/// The FMA probe: `workgroups` × 256 invocations of `iterations` × 8
/// FMAs. Bindings: out.
pub fn fma_peak(workgroups: u32, iterations: u32) -> Launch<FmaPeakParams, 1> {
    Launch::new(Kernel::FmaPeak, FmaPeakParams { iterations, _pad: [0; 3] }, [workgroups, 1, 1])
}
