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
//!
//! Each convolution kernel comes in the dense matmuls' two variants
//! (`MatmulVariant`), with the same bindings and the same bits: `Blocked`,
//! the direct kernels (register-blocked, no workgroup memory, no barrier),
//! and `Tiled`, implicit GEMM (`*_tiled.wgsl`: the patch matrix gathered
//! tile by tile into workgroup memory behind barriers, 64 × 64 outputs a
//! workgroup). The calibration times both per layer and kernel
//! (`gpu::choose`); the direct kernels run until it has.

use super::dispatch::Dispatch;
use super::launch::{grid_of_64, Launch};
use super::matmul::{Matmul, MatmulVariant};
use super::params::{activation_code, ConvParams, PoolParams, FLAGS_INIT};
use super::timing::{buffer, seconds_per_dispatch, Seeded};
use super::{GpuContext, Kernel};
use crate::error::Result;
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

/// The grid of a tiled kernel: `cols` workgroups along x, `rows` along y,
/// folded into z past 65,535 (the kernel's row tile is y + z·groups.y).
pub fn tile_grid(cols: usize, rows: usize) -> [u32; 3] {
    let y = rows.clamp(1, 65_535);
    [cols.max(1) as u32, y as u32, rows.max(1).div_ceil(y) as u32]
}

/// z and a = act(z) of layer `layer`, a conv with W and b at `at`
/// (weight, bias offsets). Bindings: z, a, x, params, flags.
pub fn conv2d_forward(
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    at: (usize, usize),
    activation: Activation,
    layer: usize,
) -> Launch<ConvParams, 5> {
    let p = conv_params(batch, s, at, activation, layer);
    match v {
        MatmulVariant::Blocked => {
            let grid = grid_of_64(s.filters.div_ceil(8) * batch * s.positions().div_ceil(4));
            Launch::new(Kernel::Conv2dForward, p, grid)
        }
        MatmulVariant::Tiled => {
            let grid = tile_grid(s.filters.div_ceil(64), (batch * s.positions()).div_ceil(64));
            Launch::new(Kernel::Conv2dForwardTiled, p, grid)
        }
    }
}

/// ∂L/∂z of the layer below (activation `below`), overwritten; W at
/// `weight_offset`. Bindings: dx, dz, params, z_in, a_in.
pub fn conv2d_backward_input(
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    weight_offset: usize,
    below: Activation,
) -> Launch<ConvParams, 5> {
    let p = conv_params(batch, s, (weight_offset, 0), below, 0);
    match v {
        MatmulVariant::Blocked => {
            let grid = grid_of_64(s.c_in.div_ceil(4) * batch * (s.h * s.w).div_ceil(4));
            Launch::new(Kernel::Conv2dBackwardInput, p, grid)
        }
        MatmulVariant::Tiled => {
            let grid = tile_grid(s.c_in.div_ceil(64), (batch * s.h * s.w).div_ceil(64));
            Launch::new(Kernel::Conv2dBackwardInputTiled, p, grid)
        }
    }
}

/// ∂W and ∂b added into the flat gradients at `at`, in two passes: the
/// partial sums (bindings: partials, dz, x), then their sum onto the
/// gradients (bindings: grads, flags, partials). `partials` holds
/// `partials_floats` floats; both variants write the same partials.
pub fn conv2d_backward_weight(
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    at: (usize, usize),
    layer: usize,
) -> (Launch<ConvParams, 3>, Launch<ConvParams, 3>) {
    let p = conv_params(batch, s, at, Activation::Linear, layer);
    let entries = s.patch() + 1;
    let segments = weight_segments(batch, s).0;
    let sums = match v {
        MatmulVariant::Blocked => {
            let blocks = segments * s.filters.div_ceil(8) * entries.div_ceil(4);
            Launch::new(Kernel::Conv2dBackwardWeight, p, grid_of_64(blocks))
        }
        MatmulVariant::Tiled => {
            let grid = [entries.div_ceil(64) as u32, s.filters.div_ceil(64) as u32, segments as u32];
            Launch::new(Kernel::Conv2dBackwardWeightTiled, p, grid)
        }
    };
    (sums, Launch::new(Kernel::Conv2dBackwardWeightSum, p, grid_of_64(s.filters * entries)))
}

/// FLOPs a calibration dispatch of a convolution does at most: 2²⁸, a
/// few milliseconds on a discrete GPU, 0.05 s (direct) to 1 s (implicit
/// GEMM on few channels) on lavapipe.
pub const TIMED_FLOPS: usize = 1 << 28;

/// Seconds per dispatch of one convolution kernel in variant `v` on seeded
/// data of the layer's shape, dispatched as the plan dispatches it (∂W:
/// its two passes together). Batches whose kernel would do more than
/// `TIMED_FLOPS` are cut to that (both variants' cost grows linearly
/// with the batch, so their ratio holds and the calibration stays short
/// on a software adapter).
pub async fn time_conv(
    ctx: &GpuContext,
    m: Matmul,
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    target_s: f64,
) -> Result<f64> {
    let cut = batch.min((TIMED_FLOPS / (2 * s.macs()).max(1)).max(1));
    // Scaled to the batch asked for.
    Ok(time_conv_at(ctx, m, v, cut, s, target_s).await? * batch as f64 / cut as f64)
}

/// Seconds per dispatch of one convolution kernel in variant `v` at
/// exactly this batch (∂W: its two passes together).
pub async fn time_conv_at(
    ctx: &GpuContext,
    m: Matmul,
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    target_s: f64,
) -> Result<f64> {
    let mut seeded = Seeded::new(&ctx.device, (batch * 31 + s.macs()) as u64, 11);
    let weights = s.filters * s.patch();
    let params = seeded.buffer("params", weights + s.filters);
    let flags = buffer(ctx, "flags", bytemuck::cast_slice(&FLAGS_INIT), wgpu::BufferUsages::STORAGE);
    let at = (0, weights);
    let dispatches = match m {
        Matmul::Forward => {
            let (z, a) = (seeded.buffer("z", batch * s.out_len()), seeded.buffer("a", batch * s.out_len()));
            let x = seeded.buffer("x", batch * s.in_len());
            vec![conv2d_forward(v, batch, s, at, Activation::Relu, 0).bind(ctx, "timed", [&z, &a, &x, &params, &flags])]
        }
        Matmul::BackwardInput => {
            let (dx, dz) = (seeded.buffer("dx", batch * s.in_len()), seeded.buffer("dz", batch * s.out_len()));
            let (z_in, a_in) = (seeded.buffer("z_in", batch * s.in_len()), seeded.buffer("a_in", batch * s.in_len()));
            let launch = conv2d_backward_input(v, batch, s, 0, Activation::Relu);
            vec![launch.bind(ctx, "timed", [&dx, &dz, &params, &z_in, &a_in])]
        }
        Matmul::BackwardWeight => {
            let (dz, x) = (seeded.buffer("dz", batch * s.out_len()), seeded.buffer("x", batch * s.in_len()));
            let grads = seeded.buffer("grads", weights + s.filters);
            let partials = seeded.buffer("partials", partials_floats(batch, s));
            let (sums, total) = conv2d_backward_weight(v, batch, s, at, 0);
            vec![sums.bind(ctx, "timed", [&partials, &dz, &x]), total.bind(ctx, "timed", [&grads, &flags, &partials])]
        }
    };
    let mut seconds = 0.0;
    for d in &dispatches {
        seconds += seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await?;
    }
    Ok(seconds)
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

/// The buffers a layer's forward binds, as `Plan` holds them, and the
/// variant of its convolution kernel.
pub(super) struct LayerBuffers<'a> {
    pub variant: MatmulVariant,
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
            let launch = conv2d_forward(b.variant, batch, &s, (shape.weight_offset, shape.bias_offset), activation, l);
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
    variant: MatmulVariant,
    [grads, flags, dz, x, partials]: [&wgpu::Buffer; 5],
) -> Vec<Dispatch> {
    let LayerOp::Conv(s) = shape.op else {
        return Vec::new();
    };
    let (sums, total) = conv2d_backward_weight(variant, batch, &s, (shape.weight_offset, shape.bias_offset), l);
    vec![
        sums.bind(ctx, &format!("{} layer {l}", sums.kernel.name()), [partials, dz, x]),
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
    variant: MatmulVariant,
    [dx, dz, params, z_in, a_in]: [&wgpu::Buffer; 5],
) -> Option<Dispatch> {
    Some(match shape.op {
        LayerOp::Dense => return None,
        LayerOp::Conv(s) => {
            let launch = conv2d_backward_input(variant, batch, &s, shape.weight_offset, below);
            launch.bind(ctx, &format!("{} layer {l}", launch.kernel.name()), [dx, dz, params, z_in, a_in])
        }
        LayerOp::MaxPool(s) | LayerOp::AvgPool(s) => {
            let launch = pool2d_backward(matches!(shape.op, LayerOp::MaxPool(_)), batch, &s, below);
            launch.bind(ctx, &format!("{} layer {l}", launch.kernel.name()), [dx, dz, z_in, a_in])
        }
    })
}
