//! The three matmuls of a dense layer (forward, the input gradient, the
//! weight gradient), each in two variants, and the choice between them per
//! layer, made by timing both on the adapter (as cuDNN's benchmark mode
//! picks convolution algorithms):
//!
//! - `Tiled` stages 64 × 16 tiles in workgroup memory behind barriers:
//!   each loaded value is used 64 times, which suits GPUs with fast
//!   workgroup memory and large layers.
//! - `Blocked` gives each invocation an 8 × 8 block in registers and uses
//!   no workgroup memory and no barrier. On a software adapter (SwiftShader,
//!   lavapipe) a barrier costs up to milliseconds, and this variant is 3–20×
//!   faster; the blocked weight gradient also sums the bias gradient in the
//!   same pass, so a layer needs no `bias_backward` dispatch.
//!
//! Both variants sum every product in the same order (the reduction index
//! ascending, one FMA at a time), so the forward and both gradients of W
//! and x are bit-identical between them; only the bias gradient's order
//! differs (row order, as the CPU engine, against a tree).
//!
//! The launch functions here are the only place a matmul's kernel, grid
//! and `Params` are put together (`gpu::launch::Launch`): the plan binds
//! them, the twin tests and the calibration and benchmark probes run them.
//! A conv layer's three kernels come in the same two variants
//! (`gpu::conv`), and `gpu::choose` picks among both kinds' the same way.

use wgpu::util::DeviceExt;

use super::launch::Launch;
use super::params::{
    activation_code, BiasBackwardParams, DenseBackwardInputParams, DenseBackwardWeightParams, DenseForwardParams,
    FLAGS_INIT,
};
use super::timing::{seconds_per_dispatch, Seeded};
use super::{GpuContext, Kernel};
use crate::error::Result;
use crate::experiment::Activation;
use crate::model::LayerShape;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MatmulVariant {
    Tiled,
    Blocked,
}

impl MatmulVariant {
    pub const ALL: [MatmulVariant; 2] = [MatmulVariant::Tiled, MatmulVariant::Blocked];

    pub fn name(self) -> &'static str {
        match self {
            MatmulVariant::Tiled => "tiled",
            MatmulVariant::Blocked => "blocked",
        }
    }
}

/// Which of a layer's matmuls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Matmul {
    /// z = x·Wᵀ + b, a = act(z): (B, I) × (I, O).
    Forward,
    /// dx = (dz·W) ⊙ f'(z_in): (B, O) × (O, I), the layer below's
    /// activation backward in the store.
    BackwardInput,
    /// dW += dzᵀ·x: (O, B) × (B, I) (and, blocked, db += Σ_b dz).
    BackwardWeight,
}

impl Matmul {
    pub const ALL: [Matmul; 3] = [Matmul::Forward, Matmul::BackwardInput, Matmul::BackwardWeight];

    pub fn name(self) -> &'static str {
        match self {
            Matmul::Forward => "forward",
            Matmul::BackwardInput => "backward input",
            Matmul::BackwardWeight => "backward weight",
        }
    }

    pub fn kernel(self, v: MatmulVariant) -> Kernel {
        use MatmulVariant::*;
        match (self, v) {
            (Matmul::Forward, Tiled) => Kernel::DenseForward,
            (Matmul::Forward, Blocked) => Kernel::DenseForwardBlocked,
            (Matmul::BackwardInput, Tiled) => Kernel::DenseBackwardInput,
            (Matmul::BackwardInput, Blocked) => Kernel::DenseBackwardInputBlocked,
            (Matmul::BackwardWeight, Tiled) => Kernel::DenseBackwardWeight,
            (Matmul::BackwardWeight, Blocked) => Kernel::DenseBackwardWeightBlocked,
        }
    }

    /// The workgroup grid for a layer of `inputs` → `units` at `batch` rows.
    pub fn grid(self, v: MatmulVariant, batch: usize, inputs: usize, units: usize) -> [u32; 3] {
        // (rows, columns) of the output.
        let (rows, cols) = match self {
            Matmul::Forward => (batch, units),
            Matmul::BackwardInput => (batch, inputs),
            Matmul::BackwardWeight => (units, inputs),
        };
        match v {
            // Tiled: workgroups of 64 × 64 outputs, x along the columns.
            MatmulVariant::Tiled => [cols.div_ceil(64) as u32, rows.div_ceil(64) as u32, 1],
            // Blocked: one invocation per 8 × 8 block, 64 per workgroup.
            MatmulVariant::Blocked => [(rows.div_ceil(8) * cols.div_ceil(8)).div_ceil(64) as u32, 1, 1],
        }
    }

    /// Multiply-adds of one dispatch.
    pub fn flops(batch: usize, inputs: usize, units: usize) -> f64 {
        2.0 * (batch * inputs * units) as f64
    }
}

/// The variant of each matmul of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerMatmuls {
    pub forward: MatmulVariant,
    pub backward_input: MatmulVariant,
    pub backward_weight: MatmulVariant,
}

impl LayerMatmuls {
    pub fn all(v: MatmulVariant) -> LayerMatmuls {
        LayerMatmuls { forward: v, backward_input: v, backward_weight: v }
    }
    /// What a layer runs before the calibration has timed it: a dense
    /// layer the tiled matmuls, a conv layer its direct kernels (blocked,
    /// the variant that wins on software adapters by 2–10×).
    pub fn default_for(op: &crate::model::LayerOp) -> LayerMatmuls {
        match op {
            crate::model::LayerOp::Conv(_) => LayerMatmuls::all(MatmulVariant::Blocked),
            _ => LayerMatmuls::all(MatmulVariant::Tiled),
        }
    }
    pub fn get(&self, m: Matmul) -> MatmulVariant {
        match m {
            Matmul::Forward => self.forward,
            Matmul::BackwardInput => self.backward_input,
            Matmul::BackwardWeight => self.backward_weight,
        }
    }
    pub(super) fn set(&mut self, m: Matmul, v: MatmulVariant) {
        match m {
            Matmul::Forward => self.forward = v,
            Matmul::BackwardInput => self.backward_input = v,
            Matmul::BackwardWeight => self.backward_weight = v,
        }
    }
}

/// The forward of layer `layer`, z = x·Wᵀ + b, a = act(z). Bindings: z,
/// a, x, params, flags.
pub fn forward(
    v: MatmulVariant,
    batch: usize,
    shape: &LayerShape,
    activation: Activation,
    layer: usize,
) -> Launch<DenseForwardParams, 5> {
    let p = DenseForwardParams {
        batch: batch as u32,
        inputs: shape.inputs as u32,
        units: shape.units as u32,
        weight_offset: shape.weight_offset as u32,
        bias_offset: shape.bias_offset as u32,
        activation: activation_code(activation),
        layer: layer as u32,
        _pad: 0,
    };
    Launch::new(Matmul::Forward.kernel(v), p, Matmul::Forward.grid(v, batch, shape.inputs, shape.units))
}

/// The input gradient of a layer with the layer below's activation
/// backward in its store, dx = (dz·W) ⊙ f'(z_in); `activation` is the
/// layer below's. Bindings: dx, dz, params, z_in, a_in.
pub fn backward_input(
    v: MatmulVariant,
    batch: usize,
    shape: &LayerShape,
    activation: Activation,
) -> Launch<DenseBackwardInputParams, 5> {
    let p = DenseBackwardInputParams {
        batch: batch as u32,
        inputs: shape.inputs as u32,
        units: shape.units as u32,
        weight_offset: shape.weight_offset as u32,
        activation: activation_code(activation),
        _pad: [0; 3],
    };
    let grid = Matmul::BackwardInput.grid(v, batch, shape.inputs, shape.units);
    Launch::new(Matmul::BackwardInput.kernel(v), p, grid)
}

/// dW += dzᵀ·x of a layer (blocked: and db += Σ_b dz). Bindings: grads,
/// flags, dz, x.
pub fn backward_weight(
    v: MatmulVariant,
    batch: usize,
    shape: &LayerShape,
    layer: usize,
) -> Launch<DenseBackwardWeightParams, 4> {
    let p = DenseBackwardWeightParams {
        batch: batch as u32,
        inputs: shape.inputs as u32,
        units: shape.units as u32,
        weight_offset: shape.weight_offset as u32,
        layer: layer as u32,
        bias_offset: shape.bias_offset as u32,
        _pad: [0; 2],
    };
    let grid = Matmul::BackwardWeight.grid(v, batch, shape.inputs, shape.units);
    Launch::new(Matmul::BackwardWeight.kernel(v), p, grid)
}

/// db += Σ_b dz of a layer, for the tiled weight gradient (the blocked
/// one sums it in its own pass). Bindings: grads, flags, dz.
pub fn bias_backward(batch: usize, shape: &LayerShape, layer: usize) -> Launch<BiasBackwardParams, 3> {
    let p = BiasBackwardParams {
        batch: batch as u32,
        units: shape.units as u32,
        bias_offset: shape.bias_offset as u32,
        layer: layer as u32,
    };
    Launch::new(Kernel::BiasBackward, p, [shape.units as u32, 1, 1])
}

/// Longest reduction a calibration dispatch runs: the cost of both
/// variants grows linearly with it, so a cut reduction keeps their ratio
/// and bounds the calibration (a 1024 × 784 → 512 forward takes 0.5 s on
/// SwiftShader).
pub const TIMED_REDUCTION: usize = 128;

/// FLOPs (2 per multiply-add) a calibration dispatch does at most, where the output
/// alone is large (e.g. 4096 rows × 1024 units): the reduction is cut
/// further, to no fewer than `MIN_TIMED_REDUCTION`.
pub const TIMED_FLOPS: usize = 1 << 26;
pub const MIN_TIMED_REDUCTION: usize = 8;

/// The reduction a calibration dispatch runs for a reduction of `n` over
/// an output of `outputs` values.
pub fn timed_reduction(n: usize, outputs: usize) -> usize {
    let by_flops = TIMED_FLOPS / (2 * outputs).max(1);
    n.min(TIMED_REDUCTION).min(by_flops.max(MIN_TIMED_REDUCTION)).max(1)
}

/// Seconds per dispatch of one matmul variant on seeded data of the
/// layer's shape, its reduction cut (`timed_reduction`; forward: the
/// inputs; input gradient: the units; weight gradient: the batch).
pub async fn time_matmul(
    ctx: &GpuContext,
    m: Matmul,
    v: MatmulVariant,
    (batch, inputs, units): (usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let (batch, inputs, units) = match m {
        Matmul::Forward => (batch, timed_reduction(inputs, batch * units), units),
        Matmul::BackwardInput => (batch, inputs, timed_reduction(units, batch * inputs)),
        Matmul::BackwardWeight => (timed_reduction(batch, units * inputs), inputs, units),
    };
    time_full(ctx, m, v, (batch, inputs, units), target_s).await
}

/// Seconds per dispatch of one matmul variant at exactly this shape.
pub async fn time_full(
    ctx: &GpuContext,
    m: Matmul,
    v: MatmulVariant,
    (batch, inputs, units): (usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let mut seeded = Seeded::new(&ctx.device, (batch * 31 + inputs * 7 + units) as u64, 7);
    let mut storage = |label: &str, floats: usize| seeded.buffer(label, floats);
    let shape = LayerShape::dense(inputs, units, 0);
    let params = storage("params", inputs * units + units);
    let flags = ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some("flags"),
        contents: bytemuck::cast_slice(&FLAGS_INIT),
        usage: wgpu::BufferUsages::STORAGE,
    });
    let d = match m {
        Matmul::Forward => {
            let (z, a, x) = (storage("z", batch * units), storage("a", batch * units), storage("x", batch * inputs));
            forward(v, batch, &shape, Activation::Linear, 0).bind(ctx, "timed forward", [&z, &a, &x, &params, &flags])
        }
        Matmul::BackwardInput => {
            let (dx, dz) = (storage("dx", batch * inputs), storage("dz", batch * units));
            let (z_in, a_in) = (storage("z_in", batch * inputs), storage("a_in", batch * inputs));
            // Linear: the epilogue is the same in both variants.
            backward_input(v, batch, &shape, Activation::Linear).bind(
                ctx,
                "timed backward input",
                [&dx, &dz, &params, &z_in, &a_in],
            )
        }
        Matmul::BackwardWeight => {
            let (grads, dz, x) =
                (storage("grads", inputs * units + units), storage("dz", batch * units), storage("x", batch * inputs));
            let d = backward_weight(v, batch, &shape, 0).bind(ctx, "timed backward weight", [&grads, &flags, &dz, &x]);
            if v == MatmulVariant::Tiled {
                // The tiled weight gradient leaves the bias to its own dispatch.
                let bias = bias_backward(batch, &shape, 0).bind(ctx, "timed bias", [&grads, &flags, &dz]);
                let t = seconds_per_dispatch(ctx, bias.kernel, &bias.bind_group, bias.grid, target_s).await?;
                return Ok(t + seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await?);
            }
            d
        }
    };
    seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_reductions_are_cut_by_length_and_by_work() {
        assert_eq!(timed_reduction(2, 32 * 16), 2);
        assert_eq!(timed_reduction(784, 1024 * 512), 64);
        assert_eq!(timed_reduction(256, 256 * 256), 128);
        assert_eq!(timed_reduction(1024, 4096 * 1024), MIN_TIMED_REDUCTION);
        assert_eq!(timed_reduction(3, 4096 * 1024), 3);
    }
}
