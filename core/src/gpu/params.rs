//! `Params` uniforms of the kernels, laid out as the WGSL structs (all
//! 4-byte scalars, padded to a multiple of 16 bytes).

use bytemuck::{Pod, Zeroable};

use crate::experiment::{Activation, Loss};

pub fn activation_code(act: Activation) -> u32 {
    match act {
        Activation::Linear => 0,
        Activation::Relu => 1,
        Activation::LeakyRelu => 2,
        Activation::Tanh => 3,
        Activation::Sigmoid => 4,
        Activation::GeluTanh => 5,
        Activation::Silu => 6,
    }
}

pub fn loss_code(loss: Loss) -> u32 {
    match loss {
        Loss::Mse => 0,
        Loss::BceWithLogits => 1,
        Loss::CrossEntropy => 2,
    }
}

/// `shaders/dense_forward.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct DenseForwardParams {
    pub batch: u32,
    pub inputs: u32,
    pub units: u32,
    pub weight_offset: u32,
    pub bias_offset: u32,
    pub activation: u32,
    pub layer: u32,
    pub _pad: u32,
}

/// Initial contents of the `flags` buffer: no non-finite value seen, step
/// 0, micro-batch 0.
pub const FLAGS_INIT: [u32; 4] = [u32::MAX, 0, 0, 0];

/// Phase numbers in a non-finite code `(step << 16) | (phase << 8) | order`.
pub const PHASE_FORWARD: u32 = 1;
pub const PHASE_LOSS: u32 = 2;
pub const PHASE_BACKWARD: u32 = 3;
pub const PHASE_OPTIMIZER: u32 = 4;

/// Rows of the per-step statistics buffer `stats`: 4 f32 per step of a
/// submit: [loss sum over micro-batches, grad_norm, clipped (1/0), unused].
pub const STEP_STATS_STRIDE: usize = 4;

/// A tensor's range in the flat buffer (`array<TensorRange>` in WGSL).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct TensorRange {
    pub offset: u32,
    pub len: u32,
    /// 1 where the tensor takes weight decay (`TensorInfo::decays`: its
    /// torch parameter group's), else 0.
    pub decays: u32,
    pub _pad: u32,
}

impl TensorRange {
    /// The table row of `t`.
    pub fn of(t: &crate::model::TensorInfo) -> TensorRange {
        TensorRange { offset: t.offset as u32, len: t.len as u32, decays: u32::from(t.decays), _pad: 0 }
    }
}

/// End (exclusive) of each layer's parameters in the flat buffer, as
/// WGSL `array<vec4<u32>, 4>`: element l sits at `[l / 4][l % 4]`. Lets an
/// elementwise optimizer name the layer of a non-finite parameter.
pub type LayerEnds = [[u32; 4]; 4];

/// `shaders/loss_forward_backward.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct LossForwardBackwardParams {
    pub batch: u32,
    pub outputs: u32,
    pub loss: u32,
    pub target_width: u32,
    pub scale: f32,
    pub activation: u32,
    pub _pad: [u32; 2],
}

/// `shaders/dense_backward_input.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct DenseBackwardInputParams {
    pub batch: u32,
    pub inputs: u32,
    pub units: u32,
    pub weight_offset: u32,
    pub activation: u32,
    pub _pad: [u32; 3],
}

/// `shaders/dense_backward_weight.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct DenseBackwardWeightParams {
    pub batch: u32,
    pub inputs: u32,
    pub units: u32,
    pub weight_offset: u32,
    pub layer: u32,
    /// Read by `dense_backward_weight_blocked` only, which sums the bias
    /// gradient in the same pass.
    pub bias_offset: u32,
    pub _pad: [u32; 2],
}

/// `shaders/bias_backward.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct BiasBackwardParams {
    pub batch: u32,
    pub units: u32,
    pub bias_offset: u32,
    pub layer: u32,
}

/// `shaders/gather_rows.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct GatherRowsParams {
    pub batch: u32,
    pub inputs: u32,
    pub target_width: u32,
    pub _pad: u32,
}

/// `shaders/advance.wgsl`: which counter of `flags` to increment.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct AdvanceParams {
    /// 1: the step counter flags[1] (and reset flags[2] is not done: micro
    /// counts across the submit); 2: the micro-batch counter flags[2].
    pub counter: u32,
    pub _pad: [u32; 3],
}

/// `shaders/regularization_backward.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct RegularizationBackwardParams {
    pub offset: u32,
    pub len: u32,
    /// 0 l1, 1 l2
    pub kind: u32,
    pub rate: f32,
}

/// `shaders/grad_norm.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct GradNormParams {
    pub n_tensors: u32,
    pub _pad: [u32; 3],
}

/// `shaders/clip_grad_norm.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct ClipGradNormParams {
    pub count: u32,
    pub n_tensors: u32,
    pub max_norm: f32,
    /// 0: only record the norm; 1: also clip.
    pub clip_enabled: u32,
}

/// `shaders/sgd_step.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct SgdStepParams {
    pub count: u32,
    pub momentum: f32,
    pub one_minus_dampening: f32,
    pub nesterov: u32,
    pub weight_decay: f32,
    pub use_momentum: u32,
    pub n_layers: u32,
    /// 0 where every parameter decays (one parameter group, the MLP's);
    /// else the number of tensors in the tensor table, whose `decays`
    /// each parameter's update reads (a transformer's two groups).
    pub decay_tensors: u32,
    pub layer_ends: LayerEnds,
}

/// `shaders/adam_step.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct AdamStepParams {
    pub count: u32,
    pub one_minus_beta1: f32,
    pub beta2: f32,
    pub one_minus_beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// 1 for AdamW's decoupled decay, 0 for Adam's.
    pub decoupled: u32,
    pub n_layers: u32,
    pub layer_ends: LayerEnds,
    /// As `SgdStepParams::decay_tensors`.
    pub decay_tensors: u32,
    pub _pad: [u32; 3],
}

/// `shaders/lamb_moments.wgsl` and `shaders/lamb_step.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct LambParams {
    pub n_tensors: u32,
    pub beta1: f32,
    pub one_minus_beta1: f32,
    pub beta2: f32,
    pub one_minus_beta2: f32,
    pub eps: f32,
    /// Applied to the tensors whose table row `decays`; the others take 0.
    pub weight_decay: f32,
    pub _pad: u32,
}

/// `shaders/tensor_stats.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct TensorStatsParams {
    pub offset: u32,
    pub len: u32,
    pub out_offset: u32,
    pub _pad: u32,
}

/// The `tensor_stats` record's layout (the CPU twin owns it).
pub use crate::stats::{HISTOGRAM_BINS, TENSOR_STATS_STRIDE};

/// `shaders/fma_peak.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct FmaPeakParams {
    pub iterations: u32,
    pub _pad: [u32; 3],
}

/// `shaders/gelu_forward.wgsl`, `shaders/gelu_backward.wgsl`: an
/// elementwise kernel's length.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct ElementwiseParams {
    pub count: u32,
    pub _pad: [u32; 3],
}

/// `shaders/gelu_backward.wgsl`: the length, and whether ∂L/∂x adds into
/// dinp (1) or overwrites it (0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct GeluBackwardParams {
    pub count: u32,
    pub accumulate: u32,
    pub _pad: [u32; 2],
}

/// `shaders/layernorm_forward.wgsl`, `layernorm_backward_params.wgsl`:
/// rows of C features.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct LayerNormParams {
    pub rows: u32,
    pub c: u32,
    /// w (forward) or dw (dγ, dβ) in the flat buffer bound.
    pub weight_offset: u32,
    /// b or db.
    pub bias_offset: u32,
}

/// `shaders/layernorm_backward_input.wgsl`: rows of C features, w in the
/// flat buffer bound, and whether ∂L/∂x adds into dinp (1) or overwrites
/// it (0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct LayerNormBackwardInputParams {
    pub rows: u32,
    pub c: u32,
    pub weight_offset: u32,
    pub accumulate: u32,
}

/// `shaders/encoder_forward.wgsl`, `shaders/encoder_backward.wgsl`: B·T
/// positions of windows of T, width C, V tokens.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct EncoderParams {
    pub rows: u32,
    pub t: u32,
    pub c: u32,
    pub vocab: u32,
    /// wte and wpe (or their gradients) in the flat buffer bound.
    pub wte_offset: u32,
    pub wpe_offset: u32,
    pub _pad: [u32; 2],
}

/// `shaders/cross_entropy_forward_backward.wgsl`: rows of V logits; the
/// z-loss coefficient and the gradient's scale (1/(rows·k)).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct CrossEntropyParams {
    pub rows: u32,
    pub v: u32,
    pub z_loss: f32,
    pub scale: f32,
}

/// `shaders/qk_layernorm_*.wgsl`: rows of 3C holding H heads' q and k to
/// normalise, and where the q and the k LayerNorm's w and b (or their
/// gradients) sit in the flat buffer bound.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct QkLayerNormParams {
    pub rows: u32,
    pub c: u32,
    pub h: u32,
    pub _pad: u32,
    pub q_weight: u32,
    pub q_bias: u32,
    pub k_weight: u32,
    pub k_bias: u32,
}

/// `shaders/cross_entropy_loss.wgsl`: rows, and the op's place in the
/// non-finite code.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct CrossEntropyLossParams {
    pub rows: u32,
    pub order: u32,
    pub _pad: [u32; 2],
}

/// `shaders/attention_forward.wgsl`: B windows of T, width C, H heads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct AttentionParams {
    pub b: u32,
    pub t: u32,
    pub c: u32,
    pub h: u32,
}

/// `shaders/conv2d_forward.wgsl`, `conv2d_backward_input.wgsl`,
/// `conv2d_backward_weight.wgsl` and `conv2d_backward_weight_sum.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct ConvParams {
    pub batch: u32,
    pub c_in: u32,
    pub h: u32,
    pub w: u32,
    pub filters: u32,
    pub kernel: u32,
    pub stride: u32,
    pub padding: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub weight_offset: u32,
    pub bias_offset: u32,
    pub activation: u32,
    pub layer: u32,
    /// ∂W's split of the B·OH·OW terms (`gpu::conv::weight_segments`), and
    /// each segment's length.
    pub segments: u32,
    pub segment_len: u32,
}

/// `shaders/max_pool2d_*.wgsl` and `avg_pool2d_*.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct PoolParams {
    pub batch: u32,
    pub c: u32,
    pub h: u32,
    pub w: u32,
    pub kernel: u32,
    pub stride: u32,
    pub out_h: u32,
    pub out_w: u32,
    pub activation: u32,
    pub layer: u32,
    pub _pad: [u32; 2],
}

/// The longest window the attention kernels take: a query row's scores
/// live in workgroup memory (4 KiB of the 16 KiB WebGPU guarantees).
pub const ATTENTION_MAX_T: usize = 1024;

/// A workgroup per row: `rows` workgroups, as a 2-D grid past 65535 (the
/// kernel's row is `wid.y · num_workgroups.x + wid.x`).
pub fn row_grid(rows: usize) -> [u32; 3] {
    let x = rows.clamp(1, 65_535);
    [x as u32, rows.max(1).div_ceil(x) as u32, 1]
}

/// Workgroups for an elementwise kernel over `count` items with 256
/// invocations each, as a 2-D grid so that counts past 65535·256 fit:
/// the kernel's index is `(wid.y · num_workgroups.x + wid.x) · 256 + lid.x`.
pub fn elementwise_grid(count: usize) -> [u32; 3] {
    let groups = count.div_ceil(256).max(1);
    let x = groups.min(65_535);
    [x as u32, groups.div_ceil(x) as u32, 1]
}
