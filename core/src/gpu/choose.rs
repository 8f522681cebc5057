//! Choosing each layer's kernel variants on this adapter by timing both,
//! as cuDNN's benchmark mode picks convolution algorithms: a dense layer's
//! three matmuls (`gpu::matmul`) and a conv layer's three convolution
//! kernels (`gpu::conv`), each `Tiled` (workgroup memory behind barriers)
//! or `Blocked` (registers only). Every variant of a kernel gives the same
//! bits, so the choice changes the speed of a run and never its numbers.

use std::sync::Mutex;

use super::conv;
use super::matmul::{time_matmul, LayerMatmuls, Matmul, MatmulVariant};
use super::GpuContext;
use crate::error::Result;
use crate::model::{LayerOp, LayerShape};

/// One kernel of one layer, timed in both variants.
#[derive(Clone, Debug, PartialEq)]
pub struct MatmulTiming {
    pub layer: usize,
    pub matmul: Matmul,
    /// (batch, inputs, units) of the layer (a conv layer's inputs and
    /// units are C·H·W and F·OH·OW).
    pub shape: (usize, usize, usize),
    /// Whether the layer is a convolution (its kernels `gpu::conv`'s).
    pub conv: bool,
    /// Seconds per dispatch, tiled then blocked, with the reduction cut
    /// (dense: `matmul::timed_reduction`) or the batch cut (conv:
    /// `conv::TIMED_FLOPS`).
    pub seconds: [f64; 2],
    pub chosen: MatmulVariant,
}

/// Timings by adapter and (kernel, layer shape).
static CACHE: Mutex<Vec<(String, [f64; 2])>> = Mutex::new(Vec::new());

fn key(ctx: &GpuContext, m: Matmul, batch: usize, shape: &LayerShape) -> String {
    match shape.op {
        LayerOp::Conv(s) => format!("{}|{:?}|B{batch}|{s:?}", ctx.describe(), m),
        _ => format!("{}|{:?}|{:?}", ctx.describe(), m, (batch, shape.inputs, shape.units)),
    }
}

/// The faster variant; ties (within 5 %) keep the layer's default (dense:
/// tiled, the one with the longer record; conv: the direct kernels).
fn pick(seconds: [f64; 2], default: MatmulVariant) -> MatmulVariant {
    let [tiled, blocked] = seconds;
    match default {
        MatmulVariant::Tiled if blocked < 0.95 * tiled => MatmulVariant::Blocked,
        MatmulVariant::Blocked if tiled < 0.95 * blocked => MatmulVariant::Tiled,
        _ => default,
    }
}

/// Whether layer `l` runs kernel `m` at all: pools run their own kernels
/// and the first layer no input gradient.
fn timed(l: usize, shape: &LayerShape, m: Matmul) -> bool {
    matches!(shape.op, LayerOp::Dense | LayerOp::Conv(_)) && !(l == 0 && m == Matmul::BackwardInput)
}

/// The variants measured earlier on this adapter for these layers, where
/// they were; otherwise each layer's default.
pub(super) fn cached_choice(ctx: &GpuContext, batch: usize, layers: &[LayerShape]) -> Vec<LayerMatmuls> {
    let cache = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    layers
        .iter()
        .map(|l| {
            let default = LayerMatmuls::default_for(&l.op);
            let mut choice = default;
            for m in Matmul::ALL {
                let k = key(ctx, m, batch, l);
                if let Some((_, s)) = cache.iter().find(|(c, _)| *c == k) {
                    choice.set(m, pick(*s, default.get(m)));
                }
            }
            choice
        })
        .collect()
}

/// Seconds per dispatch of kernel `m` of layer `shape` in both variants.
async fn time_both(ctx: &GpuContext, m: Matmul, batch: usize, shape: &LayerShape) -> Result<[f64; 2]> {
    let mut s = [0.0; 2];
    for (i, v) in MatmulVariant::ALL.into_iter().enumerate() {
        s[i] = match shape.op {
            LayerOp::Conv(c) => conv::time_conv(ctx, m, v, batch, &c, 2e-3).await?,
            _ => time_matmul(ctx, m, v, (batch, shape.inputs, shape.units), 2e-3).await?,
        };
    }
    Ok(s)
}

/// Times both variants of every dense and conv kernel of `layers` (or
/// takes the cached figures) and picks the faster of each.
pub(super) async fn choose(
    ctx: &GpuContext,
    batch: usize,
    layers: &[LayerShape],
) -> Result<(Vec<LayerMatmuls>, Vec<MatmulTiming>)> {
    let mut choice = Vec::new();
    let mut timings = Vec::new();
    for (l, shape) in layers.iter().enumerate() {
        let default = LayerMatmuls::default_for(&shape.op);
        let mut layer = default;
        for m in Matmul::ALL.into_iter().filter(|&m| timed(l, shape, m)) {
            let k = key(ctx, m, batch, shape);
            let cached = CACHE.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(c, _)| *c == k).map(|c| c.1);
            let seconds = match cached {
                Some(s) => s,
                None => {
                    let s = time_both(ctx, m, batch, shape).await?;
                    CACHE.lock().unwrap_or_else(|p| p.into_inner()).push((k, s));
                    s
                }
            };
            let chosen = pick(seconds, default.get(m));
            layer.set(m, chosen);
            let conv = matches!(shape.op, LayerOp::Conv(_));
            timings.push(MatmulTiming {
                layer: l,
                matmul: m,
                shape: (batch, shape.inputs, shape.units),
                conv,
                seconds,
                chosen,
            });
        }
        choice.push(layer);
    }
    Ok((choice, timings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_the_layers_default() {
        use MatmulVariant::*;
        assert_eq!(pick([1.0, 0.97], Tiled), Tiled);
        assert_eq!(pick([1.0, 0.9], Tiled), Blocked);
        assert_eq!(pick([0.97, 1.0], Blocked), Blocked);
        assert_eq!(pick([0.9, 1.0], Blocked), Tiled);
        assert_eq!(pick([2.0, 1.0], Blocked), Blocked);
        assert_eq!(pick([1.0, 2.0], Tiled), Tiled);
    }
}
