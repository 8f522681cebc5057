//! A conv net's layers on the GPU: the launches of the convolution and
//! pooling kernels (`shaders/conv2d_*.wgsl`, `shaders/*_pool2d_*.wgsl`,
//! each named as its CPU twin in `model::conv`), and the dispatches the
//! training plan makes of a conv or pool layer.
//!
//! The seam is the dense layers': each kernel's forward writes z and a with
//! the layer's activation fused; each input gradient writes ∂L/∂z of the
//! layer below, applying that layer's activation backward in its store, so
//! `Plan` walks a conv net exactly as an MLP (the loss, the optimizer, the
//! statistics, checkpointing's recomputation and the NaN sentinel are the
//! same dispatches). A pool layer owns no parameters: it has no weight
//! gradient, and max pooling keeps no index of the maximum (its backward
//! finds it again from its inputs, which forward keeps anyway).

use super::dispatch::Dispatch;
use super::launch::{grid_of_64, Launch};
use super::params::{activation_code, ConvParams, PoolParams};
use super::{GpuContext, Kernel};
use crate::experiment::Activation;
use crate::model::conv::{Conv2d, Pool2d};
use crate::model::{LayerOp, LayerShape};

fn u(x: usize) -> u32 {
    x as u32
}

/// The uniform of every conv kernel: the shape, where W and b sit in the
/// flat buffer bound, an activation code and the layer (for the NaN
/// sentinel's code).
fn conv_params(batch: usize, s: &Conv2d, at: (usize, usize), activation: Activation, layer: usize) -> ConvParams {
    let (segments, segment_len) = weight_segments(batch, s);
    ConvParams {
        batch: u(batch),
        c_in: u(s.c_in),
        h: u(s.h),
        w: u(s.w),
        filters: u(s.filters),
        kernel: u(s.kernel),
        stride: u(s.stride),
        padding: u(s.padding),
        out_h: u(s.out_h()),
        out_w: u(s.out_w()),
        weight_offset: u(at.0),
        bias_offset: u(at.1),
        activation: activation_code(activation),
        layer: u(layer),
        segments: u(segments),
        segment_len: u(segment_len),
    }
}

/// How ∂W splits its N = B·OH·OW terms per gradient: (segments, terms per
/// segment), segments of at least 256 terms, at most 64 of them (enough
/// invocations to fill a large GPU, few partials to add).
pub fn weight_segments(batch: usize, s: &Conv2d) -> (usize, usize) {
    let n = (batch * s.positions()).max(1);
    let segments = n.div_ceil(256).clamp(1, 64);
    (segments, n.div_ceil(segments))
}

/// Floats of ∂W's partial sums for a conv layer: segments × F × (C·K·K + 1).
pub fn partials_floats(batch: usize, s: &Conv2d) -> usize {
    weight_segments(batch, s).0 * s.filters * (s.patch() + 1)
}

fn pool_params(batch: usize, s: &Pool2d, activation: Activation, layer: usize) -> PoolParams {
    PoolParams {
        batch: u(batch),
        c: u(s.c),
        h: u(s.h),
        w: u(s.w),
        kernel: u(s.kernel),
        stride: u(s.stride),
        out_h: u(s.out_h()),
        out_w: u(s.out_w()),
        activation: activation_code(activation),
        layer: u(layer),
        _pad: [0; 2],
    }
}

/// z and a = act(z) of layer `layer`, a conv with W and b at `at`
/// (weight, bias offsets). Bindings: z, a, x, params, flags.
pub fn conv2d_forward(
    batch: usize,
    s: &Conv2d,
    at: (usize, usize),
    activation: Activation,
    layer: usize,
) -> Launch<ConvParams, 5> {
    let grid = grid_of_64(s.filters.div_ceil(8) * batch * s.positions().div_ceil(4));
    Launch::new(Kernel::Conv2dForward, conv_params(batch, s, at, activation, layer), grid)
}

/// ∂L/∂z of the layer below (activation `below`), overwritten; W at
/// `weight_offset`. Bindings: dx, dz, params, z_in, a_in.
pub fn conv2d_backward_input(
    batch: usize,
    s: &Conv2d,
    weight_offset: usize,
    below: Activation,
) -> Launch<ConvParams, 5> {
    let p = conv_params(batch, s, (weight_offset, 0), below, 0);
    let grid = grid_of_64(s.c_in.div_ceil(4) * batch * (s.h * s.w).div_ceil(4));
    Launch::new(Kernel::Conv2dBackwardInput, p, grid)
}

/// ∂W and ∂b added into the flat gradients at `at`, in two passes: the
/// partial sums (bindings: partials, dz, x), then their sum onto the
/// gradients (bindings: grads, flags, partials). `partials` holds
/// `partials_floats` floats.
pub fn conv2d_backward_weight(
    batch: usize,
    s: &Conv2d,
    at: (usize, usize),
    layer: usize,
) -> (Launch<ConvParams, 3>, Launch<ConvParams, 3>) {
    let p = conv_params(batch, s, at, Activation::Linear, layer);
    let entries = s.patch() + 1;
    let blocks = weight_segments(batch, s).0 * s.filters.div_ceil(8) * entries.div_ceil(4);
    (
        Launch::new(Kernel::Conv2dBackwardWeight, p, grid_of_64(blocks)),
        Launch::new(Kernel::Conv2dBackwardWeightSum, p, grid_of_64(s.filters * entries)),
    )
}

/// Max (`max`) or average pooling's z and a = act(z). Bindings: z, a, x,
/// flags.
pub fn pool2d_forward(
    max: bool,
    batch: usize,
    s: &Pool2d,
    activation: Activation,
    layer: usize,
) -> Launch<PoolParams, 4> {
    let kernel = if max { Kernel::MaxPool2dForward } else { Kernel::AvgPool2dForward };
    Launch::new(kernel, pool_params(batch, s, activation, layer), grid_of_64(batch * s.out_len()))
}

/// Its backward: ∂L/∂z of the layer below (activation `below`),
/// overwritten. Bindings: dx, dout, z_in, a_in (the pool's inputs).
pub fn pool2d_backward(max: bool, batch: usize, s: &Pool2d, below: Activation) -> Launch<PoolParams, 4> {
    let kernel = if max { Kernel::MaxPool2dBackward } else { Kernel::AvgPool2dBackward };
    Launch::new(kernel, pool_params(batch, s, below, 0), grid_of_64(batch * s.in_len()))
}

/// The buffers a layer's dispatches bind, as `Plan` holds them.
pub(super) struct LayerBuffers<'a> {
    pub z: &'a wgpu::Buffer,
    pub a: &'a wgpu::Buffer,
    pub x: &'a wgpu::Buffer,
    pub params: &'a wgpu::Buffer,
    pub flags: &'a wgpu::Buffer,
}

/// The forward dispatch of conv or pool layer `l` (None for a dense one:
/// the matmuls make those).
pub(super) fn forward(
    ctx: &GpuContext,
    shape: &LayerShape,
    batch: usize,
    activation: Activation,
    l: usize,
    b: LayerBuffers<'_>,
    label: &str,
) -> Option<Dispatch> {
    let label = |k: Kernel| format!("{}{label} layer {l}", k.name());
    Some(match shape.op {
        LayerOp::Dense => return None,
        LayerOp::Conv(s) => {
            let launch = conv2d_forward(batch, &s, (shape.weight_offset, shape.bias_offset), activation, l);
            launch.bind(ctx, &label(launch.kernel), [b.z, b.a, b.x, b.params, b.flags])
        }
        LayerOp::MaxPool(s) | LayerOp::AvgPool(s) => {
            let launch = pool2d_forward(matches!(shape.op, LayerOp::MaxPool(_)), batch, &s, activation, l);
            launch.bind(ctx, &label(launch.kernel), [b.z, b.a, b.x, b.flags])
        }
    })
}

/// The weight gradient's two dispatches of conv layer `l` (none for a
/// pool, which owns no parameters, or a dense layer). Buffers: grads,
/// flags, dz, x, partials.
pub(super) fn backward_weight(
    ctx: &GpuContext,
    shape: &LayerShape,
    batch: usize,
    l: usize,
    [grads, flags, dz, x, partials]: [&wgpu::Buffer; 5],
) -> Vec<Dispatch> {
    let LayerOp::Conv(s) = shape.op else {
        return Vec::new();
    };
    let (sums, total) = conv2d_backward_weight(batch, &s, (shape.weight_offset, shape.bias_offset), l);
    vec![
        sums.bind(ctx, &format!("conv2d_backward_weight layer {l}"), [partials, dz, x]),
        total.bind(ctx, &format!("conv2d_backward_weight_sum layer {l}"), [grads, flags, partials]),
    ]
}

/// The input gradient's dispatch of conv or pool layer `l` > 0, into ∂L/∂z
/// of the layer below (activation `below`). Bindings: dx, dz, params, z_in,
/// a_in (a pool binds all but params). None for a dense layer.
pub(super) fn backward_input(
    ctx: &GpuContext,
    shape: &LayerShape,
    batch: usize,
    below: Activation,
    l: usize,
    [dx, dz, params, z_in, a_in]: [&wgpu::Buffer; 5],
) -> Option<Dispatch> {
    Some(match shape.op {
        LayerOp::Dense => return None,
        LayerOp::Conv(s) => conv2d_backward_input(batch, &s, shape.weight_offset, below).bind(
            ctx,
            &format!("conv2d_backward_input layer {l}"),
            [dx, dz, params, z_in, a_in],
        ),
        LayerOp::MaxPool(s) | LayerOp::AvgPool(s) => {
            let launch = pool2d_backward(matches!(shape.op, LayerOp::MaxPool(_)), batch, &s, below);
            launch.bind(ctx, &format!("{} layer {l}", launch.kernel.name()), [dx, dz, z_in, a_in])
        }
    })
}
