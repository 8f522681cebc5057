//! The forward pass over the whole network, shared by training and
//! evaluation.

use crate::experiment::Experiment;
use crate::model::{activation_forward, dense_forward, Layout};

/// What the forward pass stores for backward, per layer l:
/// `z[l]` pre-activations and `a[l]` outputs, each (B, O_l).
#[derive(Clone, Debug, Default)]
pub struct Activations {
    pub z: Vec<Vec<f32>>,
    pub a: Vec<Vec<f32>>,
    pub rows: usize,
}

impl Activations {
    pub fn new(layout: &Layout, rows: usize) -> Activations {
        let sizes = || layout.layers.iter().map(|l| vec![0.0; rows * l.units]);
        Activations {
            z: sizes().collect(),
            a: sizes().collect(),
            rows,
        }
    }

    /// Resizes for `rows` rows, reusing the allocations.
    pub fn resize(&mut self, layout: &Layout, rows: usize) {
        if self.rows != rows || self.z.len() != layout.layers.len() {
            *self = Activations::new(layout, rows);
        }
    }

    pub fn output(&self) -> &[f32] {
        self.a.last().map_or(&[], |a| a.as_slice())
    }

    pub fn bytes(&self) -> usize {
        4 * self.z.iter().chain(&self.a).map(Vec::len).sum::<usize>()
    }
}

/// Runs every layer on `inputs` (rows, I). Returns the index of the first
/// layer whose pre-activation or output holds a NaN or Inf, if any (a
/// saturating activation would hide an overflowed pre-activation).
pub fn forward_pass(
    acts: &mut Activations,
    params: &[f32],
    inputs: &[f32],
    layout: &Layout,
    experiment: &Experiment,
) -> Option<usize> {
    let rows = acts.rows;
    let mut first_non_finite = None;
    for (l, shape) in layout.layers.iter().enumerate() {
        let (before, after) = acts.a.split_at_mut(l);
        let x = if l == 0 { inputs } else { &before[l - 1] };
        let weight = &params[shape.weight_offset..shape.bias_offset];
        let bias = &params[shape.bias_offset..shape.bias_offset + shape.units];
        dense_forward(
            &mut acts.z[l],
            x,
            weight,
            bias,
            rows,
            shape.inputs,
            shape.units,
        );
        activation_forward(
            &mut after[0],
            &acts.z[l],
            experiment.model.layers[l].activation,
        );
        if first_non_finite.is_none()
            && (acts.z[l].iter().any(|v| !v.is_finite()) || after[0].iter().any(|v| !v.is_finite()))
        {
            first_non_finite = Some(l);
        }
    }
    first_non_finite
}
