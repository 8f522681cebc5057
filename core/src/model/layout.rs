//! Flat parameter memory (STYLE rule 6): all weights and biases live in one
//! `Vec<f32>` of P elements; gradients and optimizer moments use the same
//! layout, so the optimizer is one loop and zeroing the gradients a fill.
//!
//! Layer l with I inputs and O units owns `weight` (O, I) row-major at
//! `weight_offset` followed directly by `bias` (O).

use crate::experiment::Experiment;
use crate::model::gpt::GptShape;
use crate::rng::{stream, Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerShape {
    pub inputs: usize,
    pub units: usize,
    pub weight_offset: usize,
    pub bias_offset: usize,
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
        let mut offset = 0;
        let layers = widths
            .windows(2)
            .map(|w| {
                let (inputs, units) = (w[0], w[1]);
                let shape = LayerShape { inputs, units, weight_offset: offset, bias_offset: offset + units * inputs };
                offset += units * inputs + units;
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
            .flat_map(|(i, l)| {
                [
                    TensorInfo {
                        name: format!("layers.{i}.weight"),
                        shape: vec![l.units, l.inputs],
                        offset: l.weight_offset,
                        len: l.units * l.inputs,
                        is_weight: true,
                        decays: true,
                    },
                    TensorInfo {
                        name: format!("layers.{i}.bias"),
                        shape: vec![l.units],
                        offset: l.bias_offset,
                        len: l.units,
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
    for layer in &layout.layers {
        let bound = 1.0 / (layer.inputs as f64).sqrt();
        let end = layer.bias_offset + layer.units;
        for p in &mut params[layer.weight_offset..end] {
            *p = rng.uniform(-bound, bound) as f32;
        }
    }
    Ok(params)
}
