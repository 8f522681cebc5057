//! Flat parameter memory (STYLE rule 6): all weights and biases live in one
//! `Vec<f32>` of P elements; gradients and optimizer moments use the same
//! layout, so the optimizer is one loop and zeroing the gradients a fill.
//!
//! Layer l with I inputs and O units owns `weight` (O, I) row-major at
//! `weight_offset` followed directly by `bias` (O). A conv layer's weight
//! is (F, C, K, K) and its bias (F); a pool layer owns nothing. For every
//! kind, `inputs` and `units` are the floats of a row before and after the
//! layer (an image's C·H·W).

use crate::experiment::{Experiment, LayerKind};
use crate::model::conv::{Conv2d, Pool2d};
use crate::model::gpt::GptShape;
use crate::rng::{stream, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    pub inputs: usize,
    pub units: usize,
    pub weight_offset: usize,
    pub bias_offset: usize,
    pub op: LayerOp,
}

/// What a layer computes, with the shapes its op needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerOp {
    Dense,
    Conv(Conv2d),
    MaxPool(Pool2d),
    AvgPool(Pool2d),
}

impl LayerShape {
    /// A dense layer of `inputs` → `units` at `weight_offset`.
    pub fn dense(inputs: usize, units: usize, weight_offset: usize) -> LayerShape {
        LayerShape { inputs, units, weight_offset, bias_offset: weight_offset + inputs * units, op: LayerOp::Dense }
    }

    /// The bias's length: O for a dense layer, F for a conv, 0 for a pool.
    pub fn bias_len(&self) -> usize {
        match self.op {
            LayerOp::Dense => self.units,
            LayerOp::Conv(c) => c.filters,
            LayerOp::MaxPool(_) | LayerOp::AvgPool(_) => 0,
        }
    }

    /// One past the layer's last parameter.
    pub fn end(&self) -> usize {
        self.bias_offset + self.bias_len()
    }

    /// Multiply-adds of the layer's forward for one row: I·O for a dense
    /// layer, F·C·K·K·P for a conv, 0 for a pool (its compares and adds are
    /// not products). Backward does as many again for ∂W and for ∂x.
    pub fn macs(&self) -> usize {
        match self.op {
            LayerOp::Dense => self.inputs * self.units,
            LayerOp::Conv(c) => c.macs(),
            LayerOp::MaxPool(_) | LayerOp::AvgPool(_) => 0,
        }
    }

    /// Inputs each weight row reads (the fan-in of `nn.Linear` and
    /// `nn.Conv2d`'s initialisation).
    pub fn fan_in(&self) -> usize {
        match self.op {
            LayerOp::Conv(c) => c.patch(),
            _ => self.inputs,
        }
    }
}

/// One named tensor in the flat buffer, named as PyTorch would name a
/// `ModuleList` called `layers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
    /// Weights get L1/L2 regularization; biases do not.
    pub is_weight: bool,
    /// Weight decay applies (`optimizer_step`): every MLP tensor; the
    /// transformer's tensors of two or more dimensions.
    pub decays: bool,
}

/// The flat layout of a model's parameters. For the MLP, its dense
/// layers; for the transformer (`gpt`), no `layers` and the tensors of
/// `GptShape::tensors`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub layers: Vec<LayerShape>,
    pub parameter_count: usize, // P
    pub gpt: Option<GptShape>,
}

impl Layout {
    pub fn new(experiment: &Experiment) -> Layout {
        if let Some(gpt) = experiment.gpt() {
            let shape = gpt.shape();
            return Layout { layers: Vec::new(), parameter_count: shape.parameter_count(), gpt: Some(shape) };
        }
        let widths = experiment.widths();
        let images = experiment.images();
        let mut offset = 0;
        let layers = widths
            .windows(2)
            .zip(&experiment.model.layers)
            .zip(images)
            .map(|((w, spec), image)| {
                let (inputs, units) = (w[0], w[1]);
                let [c, h, wide] = image.unwrap_or([0; 3]);
                let shape = match spec.kind {
                    LayerKind::Dense => LayerShape::dense(inputs, units, offset),
                    LayerKind::Conv2d { filters, kernel, stride, padding } => {
                        let conv = Conv2d { c_in: c, h, w: wide, filters, kernel, stride, padding };
                        let weights = filters * conv.patch();
                        LayerShape {
                            inputs,
                            units,
                            weight_offset: offset,
                            bias_offset: offset + weights,
                            op: LayerOp::Conv(conv),
                        }
                    }
                    LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => {
                        let pool = Pool2d { c, h, w: wide, kernel, stride };
                        let op = if matches!(spec.kind, LayerKind::MaxPool2d { .. }) {
                            LayerOp::MaxPool(pool)
                        } else {
                            LayerOp::AvgPool(pool)
                        };
                        LayerShape { inputs, units, weight_offset: offset, bias_offset: offset, op }
                    }
                };
                offset = shape.end();
                shape
            })
            .collect();
        Layout { layers, parameter_count: offset, gpt: None }
    }

    /// Every tensor in buffer order: `layers.{i}.weight`, `layers.{i}.bias`
    /// for the MLP, nanoGPT's `state_dict` names for the transformer.
    pub fn tensors(&self) -> Vec<TensorInfo> {
        if let Some(gpt) = &self.gpt {
            return gpt
                .tensors()
                .into_iter()
                .map(|t| TensorInfo {
                    name: t.name,
                    shape: t.shape,
                    offset: t.offset,
                    len: t.len,
                    is_weight: t.decays,
                    decays: t.decays,
                })
                .collect();
        }
        self.layers
            .iter()
            .enumerate()
            .filter(|(_, l)| l.end() > l.weight_offset)
            .flat_map(|(i, l)| {
                let weight = match l.op {
                    LayerOp::Conv(c) => vec![c.filters, c.c_in, c.kernel, c.kernel],
                    _ => vec![l.units, l.inputs],
                };
                [
                    TensorInfo {
                        name: format!("layers.{i}.weight"),
                        len: weight.iter().product(),
                        shape: weight,
                        offset: l.weight_offset,
                        is_weight: true,
                        decays: true,
                    },
                    TensorInfo {
                        name: format!("layers.{i}.bias"),
                        shape: vec![l.bias_len()],
                        offset: l.bias_offset,
                        len: l.bias_len(),
                        is_weight: false,
                        decays: true,
                    },
                ]
            })
            .collect()
    }
}

/// PyTorch `nn.Linear` default initialisation: `kaiming_uniform_(a=√5)`
/// for the weight gives bound gain·√(3/fan_in) with gain = √(2/(1+5)),
/// i.e. 1/√I; the bias is uniform in ±1/√I too
/// (<https://pytorch.org/docs/stable/generated/torch.nn.Linear.html>).
/// Drawn layer by layer, weight then bias, from the seed's init stream.
///
/// The transformer is initialised as nanoGPT's `_init_weights`
/// (`gpt::init_parameters`), from the same stream.
pub fn init_parameters(layout: &Layout, seed: u64) -> Vec<f32> {
    try_init_parameters(layout, seed).expect("a machine without room for the parameters")
}

/// `init_parameters`, or an error when the memory is not there.
pub fn try_init_parameters(layout: &Layout, seed: u64) -> crate::error::Result<Vec<f32>> {
    let mut rng = Rng::new(seed, stream::INIT);
    let mut params = crate::error::zeros(layout.parameter_count, "the parameters")?;
    if let Some(gpt) = &layout.gpt {
        crate::model::gpt::fill_parameters(&mut params, gpt, &mut rng);
        return Ok(params);
    }
    // `nn.Conv2d`'s default is the same rule with fan-in C·K·K; a pool
    // layer draws nothing.
    for layer in &layout.layers {
        let bound = 1.0 / (layer.fan_in() as f64).sqrt();
        for p in &mut params[layer.weight_offset..layer.end()] {
            *p = rng.uniform(-bound, bound) as f32;
        }
    }
    Ok(params)
}
