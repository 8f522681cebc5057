//! What the page draws, computed from the engine's real parameters: the
//! output over the input plane (decision boundary or regression surface),
//! each neuron's output over the plane (thumbnails), and the points.
//!
//! The plane is the built-in data's [-6, 6]² (or a CSV's x1, x2 range);
//! inputs are made from each grid point with the experiment's features, and
//! the CPU reference forward pass gives every layer's outputs at once.

use std::sync::Arc;

use stepscope_core::data::Dataset;
use stepscope_core::engine::{forward_pass, Activations, Evaluation};
use stepscope_core::experiment::{DataSource, Loss};
use stepscope_core::model::Layout;
use stepscope_core::Experiment;

/// Grid points per side for the boundary and the thumbnails.
pub const GRID: usize = 48;

/// Units of a layer the diagram draws (and the views carry thumbnails
/// of): the first this many; a wider layer shows "+N more". This bounds
/// what crosses from the worker and what the page draws, whatever the width.
pub const SHOWN_UNITS: usize = 24;

/// A point to draw: position on the plane, value in [-1, 1] (class 0 → -1,
/// class 1 → +1, or the regression target), test or train.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlotPoint {
    pub x1: f32,
    pub x2: f32,
    pub value: f32,
    pub test: bool,
}

/// Everything the views need after a frame of training.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub step: u64,
    /// The plane's extent: [min, max] of x1 and of x2.
    pub extent: [f32; 4],
    /// Output over the plane, (GRID, GRID) row-major from the top-left,
    /// as a value in [-1, 1] per point (None when the data are not 2-D).
    pub boundary: Option<Vec<f32>>,
    /// Number of classes for cross_entropy (colours by argmax), else 0.
    pub classes: usize,
    /// Per layer, per unit (the first `SHOWN_UNITS`): the unit's output over
    /// the plane, (GRID, GRID), scaled to [-1, 1].
    pub neurons: Vec<Vec<Vec<f32>>>,
    pub points: Vec<PlotPoint>,
    pub params: Vec<f32>,
    pub grads: Vec<f32>,
    pub updates: Vec<f32>,
    pub train: Option<Evaluation>,
    pub test: Option<Evaluation>,
}

pub fn plane_extent(e: &Experiment, data: &Dataset) -> Option<[f32; 4]> {
    if e.data.source != DataSource::Csv {
        return Some([-6.0, 6.0, -6.0, 6.0]);
    }
    if e.model.inputs != 2 {
        return None;
    }
    let (mut lo, mut hi) = ([f32::INFINITY; 2], [f32::NEG_INFINITY; 2]);
    for row in data.train.inputs.chunks_exact(2) {
        for k in 0..2 {
            lo[k] = lo[k].min(row[k]);
            hi[k] = hi[k].max(row[k]);
        }
    }
    let pad = |l: f32, h: f32| ((h - l) * 0.05).max(1e-3);
    Some([lo[0] - pad(lo[0], hi[0]), hi[0] + pad(lo[0], hi[0]), lo[1] - pad(lo[1], hi[1]), hi[1] + pad(lo[1], hi[1])])
}

/// Maps a network output row to [-1, 1] for colouring: probability of
/// class 1 scaled for bce and 2-class cross_entropy, the value itself for
/// mse (clamped).
fn output_value(row: &[f32], loss: Loss) -> f32 {
    match loss {
        Loss::BceWithLogits => 2.0 / (1.0 + (-row[0]).exp()) - 1.0,
        Loss::CrossEntropy if row.len() == 2 => {
            let p1 = 1.0 / (1.0 + (row[0] - row[1]).exp());
            2.0 * p1 - 1.0
        }
        Loss::CrossEntropy => {
            let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
            best as f32
        }
        Loss::Mse => row[0].clamp(-1.0, 1.0),
    }
}

/// Computes the snapshot for `params` (P).
pub fn snapshot(
    e: &Experiment,
    layout: &Layout,
    data: &Dataset,
    step: u64,
    tensors: [Vec<f32>; 3],
    train: Option<Evaluation>,
    test: Option<Evaluation>,
) -> Arc<Snapshot> {
    let [params, grads, updates] = tensors;
    let mut snap = Snapshot { step, params, grads, updates, train, test, ..Snapshot::default() };
    snap.classes = if e.loss == Loss::CrossEntropy { e.outputs() } else { 0 };
    let Some(extent) = plane_extent(e, data) else {
        return Arc::new(snap);
    };
    snap.extent = extent;
    let [x_lo, x_hi, y_lo, y_hi] = extent;
    let features = e.data.features();
    let csv = e.data.source == DataSource::Csv;
    let mut inputs = Vec::with_capacity(GRID * GRID * e.model.inputs);
    for r in 0..GRID {
        // Row 0 is the top of the picture: the largest x2.
        let x2 = y_hi - (r as f32 + 0.5) / GRID as f32 * (y_hi - y_lo);
        for c in 0..GRID {
            let x1 = x_lo + (c as f32 + 0.5) / GRID as f32 * (x_hi - x_lo);
            if csv {
                inputs.extend([x1, x2]);
            } else {
                inputs.extend(features.iter().map(|f| f.eval(x1 as f64, x2 as f64) as f32));
            }
        }
    }
    let mut acts = Activations::new(layout, GRID * GRID);
    forward_pass(&mut acts, &snap.params, &inputs, layout, e);
    let outputs = e.outputs();
    snap.boundary = Some(acts.output().chunks_exact(outputs).map(|row| output_value(row, e.loss)).collect());
    snap.neurons = layout
        .layers
        .iter()
        .enumerate()
        .map(|(l, shape)| {
            let a = &acts.a[l];
            (0..shape.units.min(SHOWN_UNITS))
                .map(|u| {
                    let column: Vec<f32> = (0..GRID * GRID).map(|i| a[i * shape.units + u]).collect();
                    let scale = column.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
                    column.iter().map(|v| v / scale).collect()
                })
                .collect()
        })
        .collect();
    snap.points = plot_points(e, data);
    Arc::new(snap)
}

fn plot_points(e: &Experiment, data: &Dataset) -> Vec<PlotPoint> {
    let regression = e.data.source.is_regression();
    let value = |label: f64| if regression { label as f32 } else { 2.0 * label as f32 - 1.0 };
    if e.data.source != DataSource::Csv {
        let train = data.train_points.iter().map(|p| PlotPoint {
            x1: p.x1 as f32,
            x2: p.x2 as f32,
            value: value(p.label),
            test: false,
        });
        let test = data.test_points.iter().map(|p| PlotPoint {
            x1: p.x1 as f32,
            x2: p.x2 as f32,
            value: value(p.label),
            test: true,
        });
        return train.chain(test).collect();
    }
    let t = data.train.target_width;
    data.train
        .inputs
        .chunks_exact(2)
        .zip(data.train.targets.chunks_exact(t))
        .map(|(x, y)| {
            let v = match e.loss {
                Loss::BceWithLogits => 2.0 * y[0] - 1.0,
                Loss::CrossEntropy => y[0],
                Loss::Mse => y[0].clamp(-1.0, 1.0),
            };
            PlotPoint { x1: x[0], x2: x[1], value: v, test: false }
        })
        .collect()
}

/// Colour of a value in [-1, 1]: orange (-1) through white (0) to blue (+1),
/// as TensorFlow Playground. For multi-class, a hue per class.
pub fn color(value: f32, classes: usize) -> [u8; 3] {
    if classes > 2 {
        const HUES: [[u8; 3]; 8] = [
            [245, 147, 34],
            [8, 119, 189],
            [46, 160, 67],
            [214, 39, 40],
            [148, 103, 189],
            [140, 86, 75],
            [227, 119, 194],
            [127, 127, 127],
        ];
        return HUES[(value as usize) % HUES.len()];
    }
    let v = value.clamp(-1.0, 1.0);
    let (from, to) = if v < 0.0 { ([245.0, 147.0, 34.0], -v) } else { ([8.0, 119.0, 189.0], v) };
    let mix = |c: f32| (255.0 + (c - 255.0) * to).round() as u8;
    [mix(from[0]), mix(from[1]), mix(from[2])]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_run_from_orange_through_white_to_blue() {
        assert_eq!(color(-1.0, 0), [245, 147, 34]);
        assert_eq!(color(0.0, 0), [255, 255, 255]);
        assert_eq!(color(1.0, 0), [8, 119, 189]);
    }

    #[test]
    fn boundary_and_thumbnails_come_from_the_parameters() {
        let e = super::super::edit::default_experiment();
        let data = Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = stepscope_core::model::init_parameters(&layout, 1);
        let p = params.len();
        let snap = snapshot(&e, &layout, &data, 0, [params.clone(), vec![0.0; p], vec![0.0; p]], None, None);
        let boundary = snap.boundary.as_ref().unwrap();
        assert_eq!(boundary.len(), GRID * GRID);
        assert!(boundary.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert_eq!(snap.neurons.len(), 3);
        assert_eq!(snap.neurons[0].len(), 16, "the default network's first hidden layer");
        // A layer wider than the diagram shows carries only what it draws.
        let mut wide = e.clone();
        wide.model.layers[0].units = 64;
        let wide_layout = Layout::new(&wide);
        let wide_params = stepscope_core::model::init_parameters(&wide_layout, 1);
        let q = wide_params.len();
        let wide_snap = snapshot(&wide, &wide_layout, &data, 0, [wide_params, vec![0.0; q], vec![0.0; q]], None, None);
        assert_eq!(wide_snap.neurons[0].len(), SHOWN_UNITS);
        assert_eq!(snap.points.len(), 500);
        // Other parameters, another picture.
        let other = snapshot(
            &e,
            &layout,
            &data,
            0,
            [params.iter().map(|v| -v).collect(), vec![0.0; p], vec![0.0; p]],
            None,
            None,
        );
        assert_ne!(other.boundary, snap.boundary);
    }
}
