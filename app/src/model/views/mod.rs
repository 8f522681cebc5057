//! What the page draws, computed from the engine's real parameters: the
//! output over the input plane (decision boundary or regression surface),
//! each drawn neuron's output over the plane (thumbnails), the links the
//! diagram draws, the points, and full-set evaluations.
//!
//! The plane is the built-in data's [-6, 6]² (or a CSV's x1, x2 range);
//! inputs are made from each grid point with the experiment's features, and
//! the CPU reference forward pass gives every layer's outputs at once.
//!
//! What a view costs is bounded whatever the network (`job`): the grid
//! is coarser for a large network, the work is done in parts between
//! training frames, and only what the page draws crosses to it.

#[cfg(test)]
use stepscope_core::data::Dataset;
use stepscope_core::engine::Evaluation;
use stepscope_core::experiment::{DataSource, Loss};
#[cfg(test)]
use stepscope_core::model::Layout;
use stepscope_core::Experiment;

mod conv;
mod diagram;
pub mod gpt;
mod images;
mod job;
mod plane;
pub mod raster;

pub use conv::{conv_views, filter_images, ConvLayerView, ConvViews, SHOWN_MAPS};
pub use diagram::{draw_diagram, Diagram, LinkMode};
pub use images::{filters, ImageViews, Misclassified, SHOWN_FILTERS, SHOWN_MISCLASSIFIED};
pub use job::{grid_side, link_blocks, ViewJob};
pub use plane::{color, grid_inputs, plane_extent, PlotPoint, CERTAIN, GRID};
use plane::{output_value, plot_points};

/// Units of a layer the diagram draws (and the views carry thumbnails
/// of): the first this many; a wider layer shows "+N more". This bounds
/// what crosses from the worker and what the page draws, whatever the width.
pub const SHOWN_UNITS: usize = 24;

/// The links the diagram draws into one layer: between its first
/// `outs` units and the first `ins` units of its input, each kind
/// [weights, gradients, last updates] as an (outs, ins) block, with the
/// largest magnitude over the layer's whole weight matrix (a link's width
/// is relative to it).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkBlock {
    pub outs: usize,
    pub ins: usize,
    pub values: [Vec<f32>; 3],
    pub max: [f32; 3],
}

/// Everything the views need after a frame of training.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Snapshot {
    pub step: u64,
    /// The plane's extent: [min, max] of x1 and of x2.
    pub extent: [f32; 4],
    /// Grid points per side of `boundary` and of the thumbnails.
    pub grid: usize,
    /// Output over the plane, (grid, grid) row-major from the top-left,
    /// as a value in [-1, 1] per point (None when the data are not 2-D).
    pub boundary: Option<Vec<f32>>,
    /// Number of classes for cross_entropy (colours by argmax), else 0.
    pub classes: usize,
    /// Per layer, per unit (the first `SHOWN_UNITS`): the unit's output over
    /// the plane, (grid, grid), scaled to [-1, 1]. Drawn into `diagram` on
    /// the engine's side and not sent to the page (a deep, wide network's
    /// thumbnails and links were most of what the page decoded).
    #[serde(skip)]
    pub neurons: Vec<Vec<Vec<f32>>>,
    pub points: Vec<PlotPoint>,
    /// Per layer, the links the diagram draws (not sent, as `neurons`).
    #[serde(skip)]
    pub links: Vec<LinkBlock>,
    pub train: Option<Evaluation>,
    pub test: Option<Evaluation>,
    /// For an image dataset: per-class results, the confusion matrix, the
    /// misclassified test images and the first layer's weights as images.
    pub images: Option<ImageViews>,
    /// The network diagram, drawn (`diagram`), in the runner's link mode.
    pub diagram: Option<Diagram>,
    /// A transformer's views (`gpt`).
    pub gpt: Option<gpt::GptViews>,
}

/// Whether the data are images (digits, MNIST, a CSV given a shape): the
/// output is drawn as per-class results and images, not over a plane.
pub fn is_image_data(e: &Experiment) -> bool {
    // A CSV's images are drawn by class where its targets are classes.
    image_side(e).is_some() && (e.data.source != DataSource::Csv || e.loss == Loss::CrossEntropy)
}

/// The side of the run's images where they are square and of one channel,
/// as the image views draw them (a conv net's views draw any shape).
pub fn image_side(e: &Experiment) -> Option<usize> {
    match e.image_shape() {
        Some([1, h, w]) if h == w => Some(h),
        _ => None,
    }
}

/// The views of `params` at `step`, computed at once (tests; the loop
/// computes them in parts, `ViewJob`).
#[cfg(test)]
pub fn snapshot(e: &Experiment, data: &Dataset, step: u64, tensors: [&[f32]; 3]) -> Snapshot {
    let layout = Layout::new(e);
    let links = link_blocks(&layout, tensors);
    let mut job = ViewJob::new(e, data, step, tensors[0].to_vec(), links).expect("room for the views' chunks");
    job.set_gradients(tensors[1].to_vec());
    loop {
        if let Some(snap) = job.advance(data, f64::INFINITY) {
            return snap;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_and_thumbnails_come_from_the_parameters() {
        let e = super::super::edit::default_experiment();
        let data = Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = stepscope_core::model::init_parameters(&layout, 1);
        let zeros = vec![0.0; params.len()];
        let snap = snapshot(&e, &data, 0, [&params, &zeros, &zeros]);
        assert_eq!(snap.grid, GRID, "a small network gets the full grid");
        let boundary = snap.boundary.as_ref().unwrap();
        assert_eq!(boundary.len(), GRID * GRID);
        assert!(boundary.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert_eq!(snap.neurons.len(), 3);
        assert_eq!(snap.neurons[0].len(), 16, "the default network's first hidden layer");
        assert_eq!(snap.points.len(), 500);
        // The evaluations are the engine's own.
        let train = stepscope_core::engine::evaluate(&params, &layout, &e, &data.train);
        assert_eq!(snap.train, train);
        // The links: the first layer's 16 × 2 weights, all drawn.
        assert_eq!((snap.links[0].outs, snap.links[0].ins), (16, 2));
        let w0 = &params[layout.layers[0].weight_offset..layout.layers[0].bias_offset];
        assert_eq!(snap.links[0].values[0], w0);
        assert_eq!(snap.links[0].max[0], w0.iter().fold(0.0f32, |m, v| m.max(v.abs())));
        // Other parameters, another picture.
        let negated: Vec<f32> = params.iter().map(|v| -v).collect();
        let other = snapshot(&e, &data, 0, [&negated, &zeros, &zeros]);
        assert_ne!(other.boundary, snap.boundary);
    }

    #[test]
    fn digits_get_image_views_and_no_plane() {
        let mut e = super::super::edit::default_experiment();
        e.data.source = DataSource::Digits;
        e.data.samples = None;
        e.data.noise = None;
        e.data.features = None;
        super::super::edit::fit_new_data(&mut e);
        e.validate().unwrap();
        let data = Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = stepscope_core::model::init_parameters(&layout, 1);
        let zeros = vec![0.0; params.len()];
        let snap = snapshot(&e, &data, 0, [&params, &zeros, &zeros]);
        assert!(snap.boundary.is_none() && snap.points.is_empty(), "no plane for images");
        let images = snap.images.expect("image views");
        assert_eq!((images.side, images.classes), (8, 10));
        // The confusion matrix is the core's, over the whole test set.
        let metrics = stepscope_core::metrics::class_metrics(&params, &layout, &e, &data.test).unwrap();
        assert_eq!(images.confusion, metrics.confusion);
        assert_eq!(images.confusion.iter().sum::<u64>() as usize, data.test.rows());
        assert_eq!(images.wrong, metrics.wrong());
        assert_eq!(images.accuracy().map(|a| a as f32), snap.test.and_then(|t| t.accuracy));
        // Each shown image is its test row's pixels, wrongly classified.
        assert_eq!(images.misclassified.len(), SHOWN_MISCLASSIFIED.min(metrics.wrong() as usize));
        for m in &images.misclassified {
            assert_ne!(m.truth, m.predicted);
            assert_eq!(m.pixels, &data.test.inputs[m.row * 64..(m.row + 1) * 64]);
            assert_eq!(m.truth as f32, data.test.targets[m.row]);
        }
        assert_eq!(images.first_layer.len(), SHOWN_FILTERS.min(e.model.layers[0].units));
        assert!(images.first_layer.iter().all(|f| f.len() == 64 && f.iter().any(|v| v.abs() == 1.0)));
    }

    /// A conv net on the digits: no diagram of units; every conv and pool
    /// layer's maps of test image 0 (the forward pass's own outputs) and
    /// the conv layers' filters (the parameters, channel by channel).
    #[test]
    fn a_conv_net_gets_its_feature_maps_and_filters() {
        let e = super::super::edit::edited(&super::super::edit::default_experiment(), super::super::edit::conv_preset)
            .unwrap();
        let data = Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = stepscope_core::model::init_parameters(&layout, 1);
        let zeros = vec![0.0; params.len()];
        assert!(link_blocks(&layout, [&params, &zeros, &zeros]).is_empty());
        let snap = snapshot(&e, &data, 0, [&params, &zeros, &zeros]);
        assert!(draw_diagram(&e, &snap, LinkMode::Weight).is_none());
        let images = snap.images.expect("image views");
        assert!(images.first_layer.is_empty(), "the filters are the conv view's");
        let conv = images.conv.expect("conv views");
        assert_eq!((conv.row, conv.input_shape), (0, [1, 8, 8]));
        assert_eq!(conv.image, &data.test.inputs[..64]);
        let shapes: Vec<[usize; 3]> = conv.layers.iter().map(|l| l.shape).collect();
        assert_eq!(shapes, vec![[8, 8, 8], [8, 4, 4], [16, 4, 4], [16, 2, 2]]);
        let mut acts = stepscope_core::engine::Activations::try_new(&layout, 1).unwrap();
        stepscope_core::engine::forward_pass(&mut acts, &params, &data.test.inputs[..64], &layout, &e);
        for view in &conv.layers {
            assert_eq!(view.maps.len(), view.shape[0]);
            let [_, h, w] = view.shape;
            for (c, map) in view.maps.iter().enumerate() {
                let out = &acts.a[view.layer][c * h * w..(c + 1) * h * w];
                let scale = out.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                let expect: Vec<f32> = out.iter().map(|v| v / scale.max(1e-12)).collect();
                assert_eq!(map, &expect, "layer {} channel {c}", view.layer);
            }
        }
        let first = &conv.layers[0];
        assert_eq!((first.kernel, first.filter_channels, first.filters.len()), (3, 1, 8));
        let w = &params[layout.layers[0].weight_offset..][..9];
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_eq!(first.filters[0], w.iter().map(|v| v / scale).collect::<Vec<f32>>());
        let second = &conv.layers[2];
        assert_eq!((second.in_channels, second.filter_channels, second.filters[0].len()), (8, 8, 8 * 9));
        assert!(conv.layers[1].filters.is_empty(), "a pool has no filters");
        // The zero gradients given: laid out as the filters, all zero.
        assert_eq!(first.gradients.len(), first.filters.len());
        assert!(first.gradients.iter().all(|g| g.len() == 9 && g.iter().all(|v| *v == 0.0)));
    }

    /// A wide network: the views carry only
    /// what the diagram draws, on a coarser grid, and the same picture
    /// comes out whether they are computed at once or in many small parts.
    #[test]
    fn a_large_network_gets_bounded_views() {
        let mut e = super::super::edit::default_experiment();
        let hidden = e.model.layers[0].clone();
        e.model.layers = (0..2).map(|_| hidden.clone()).chain([e.model.layers.last().unwrap().clone()]).collect();
        for layer in &mut e.model.layers[..2] {
            layer.units = 1024;
        }
        e.data.samples = Some(100);
        let data = Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = stepscope_core::model::init_parameters(&layout, 1);
        let zeros = vec![0.0; params.len()];
        let side = grid_side(&layout);
        assert!((job::MIN_GRID..GRID).contains(&side), "{side}");
        let at_once = snapshot(&e, &data, 3, [&params, &zeros, &zeros]);
        assert_eq!(at_once.grid, side);
        assert_eq!(at_once.boundary.as_ref().unwrap().len(), side * side);
        assert!(at_once.neurons.iter().all(|layer| layer.len() <= SHOWN_UNITS));
        assert!(at_once.neurons[1].iter().all(|unit| unit.len() == side * side));
        assert_eq!((at_once.links[1].outs, at_once.links[1].ins), (SHOWN_UNITS, SHOWN_UNITS));
        assert_eq!(at_once.links[1].values[0].len(), SHOWN_UNITS * SHOWN_UNITS);
        // In parts: each call does at least one chunk, and the job is
        // not done after the first.
        let mut job =
            ViewJob::new(&e, &data, 3, params.clone(), link_blocks(&layout, [&params, &zeros, &zeros])).unwrap();
        let mut calls = 1;
        let in_parts = loop {
            if let Some(snap) = job.advance(&data, 0.0) {
                break snap;
            }
            calls += 1;
        };
        assert!(calls > 10, "{calls} calls");
        assert_eq!(in_parts.boundary, at_once.boundary);
        assert_eq!(in_parts.neurons, at_once.neurons);
        let (a, b) = (in_parts.train.unwrap().loss, at_once.train.unwrap().loss);
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} against {b}");
    }
}
