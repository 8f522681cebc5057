//! The views of one step, computed in parts (`ViewJob::advance`) between
//! training frames, so that however large the network, no part runs long
//! and Pause or an edit is never kept waiting behind a picture.
//!
//! The cost is bounded three ways:
//! - the grid is coarser for a large network (`grid_side`): at most
//!   `GRID_BUDGET_MACS` multiply-adds for the whole plane;
//! - the work goes in chunks of about `CHUNK_MACS` (grid points, then test
//!   rows, then train rows), and a call stops once its time is spent;
//! - only what the page draws is kept: the thumbnails and links of the
//!   first `SHOWN_UNITS` units of each layer.
//!
//! The job holds its own copy of the parameters, so training goes on
//! between parts and the views all show the one step they were taken at.

use web_time::Instant;

use stepscope_core::data::{Dataset, Table};
use stepscope_core::engine::{forward_pass, Activations, Evaluator};
use stepscope_core::experiment::Loss;
use stepscope_core::metrics::ClassEvaluator;
use stepscope_core::model::{LayerOp, Layout};
use stepscope_core::{Error, Experiment};

use super::gpt::{attention_view, GptViewSpec, GptViews, SampleJob};
use super::{
    filters, grid_inputs, is_image_data, output_value, plane_extent, plot_points, ImageViews, LinkBlock, Misclassified,
    Snapshot, GRID, SHOWN_MISCLASSIFIED, SHOWN_UNITS,
};

/// Multiply-adds of the whole grid's forward pass, at most (the grid is
/// never coarser than `MIN_GRID` a side, whatever that costs).
pub const GRID_BUDGET_MACS: u64 = 1 << 28;
/// The coarsest grid, a side.
pub const MIN_GRID: usize = 12;
/// Multiply-adds of one chunk of work: a few milliseconds in WebAssembly.
const CHUNK_MACS: u64 = 1 << 22;

/// Grid points a side for a network: the full `GRID` while the plane's
/// forward pass costs at most `GRID_BUDGET_MACS`, else as many as it allows.
pub fn grid_side(layout: &Layout) -> usize {
    let per_point = layout.parameter_count.max(1) as u64;
    let fits = ((GRID_BUDGET_MACS / per_point) as f64).sqrt() as usize;
    fits.clamp(MIN_GRID, GRID)
}

/// The links the diagram draws, from the engine's [parameters, gradients,
/// updates]: per layer, the block between its first `SHOWN_UNITS` units
/// and the first `SHOWN_UNITS` of its inputs, and each kind's largest
/// magnitude over the whole weight matrix.
pub fn link_blocks(layout: &Layout, tensors: [&[f32]; 3]) -> Vec<LinkBlock> {
    // A conv net is drawn by its feature maps and filters (`conv`), not
    // by the diagram of units and links.
    if layout.layers.iter().any(|l| l.op != LayerOp::Dense) {
        return Vec::new();
    }
    layout
        .layers
        .iter()
        .map(|shape| {
            let (outs, ins) = (shape.units.min(SHOWN_UNITS), shape.inputs.min(SHOWN_UNITS));
            let block = |t: &[f32]| -> Vec<f32> {
                let weights = &t[shape.weight_offset..shape.bias_offset];
                (0..outs).flat_map(|o| weights[o * shape.inputs..o * shape.inputs + ins].iter().copied()).collect()
            };
            let max = |t: &[f32]| t[shape.weight_offset..shape.bias_offset].iter().fold(0.0f32, |m, v| m.max(v.abs()));
            LinkBlock { outs, ins, values: tensors.map(block), max: tensors.map(max) }
        })
        .collect()
}

/// The plane's forward pass, some points at a time.
struct GridPass {
    side: usize,
    extent: [f32; 4],
    inputs: Vec<f32>,
    done: usize,
    acts: Activations,
    boundary: Vec<f32>,
    /// Per layer, per drawn unit: its output at each point (not yet scaled).
    neurons: Vec<Vec<Vec<f32>>>,
}

pub struct ViewJob {
    experiment: Experiment,
    layout: Layout,
    step: u64,
    rows: (usize, usize),
    params: Vec<f32>,
    /// A conv net's gradients of the last step (its filters' view).
    grads: Option<Vec<f32>>,
    /// The test image its feature maps are drawn for.
    maps_row: usize,
    links: Vec<LinkBlock>,
    chunk_rows: usize,
    grid: Option<GridPass>,
    test: Evaluator,
    train: Evaluator,
    /// For image data: the test set's confusion matrix and misclassified
    /// rows (read from the test evaluation's outputs).
    classes: Option<ClassEvaluator>,
    /// A transformer's views (`gpt`), and the windows its losses are
    /// evaluated over (test, train).
    gpt: Option<GptJob>,
    spent_ms: f64,
}

/// A transformer's part of the views: the attention of one window, then a
/// sample a token per chunk (when one is due).
struct GptJob {
    model: stepscope_core::model::gpt::Gpt,
    windows: (Table, Table),
    spec: GptViewSpec,
    views: GptViews,
    attention_done: bool,
    sample: Option<SampleJob>,
}

impl ViewJob {
    /// The views of `params` (a copy: training may go on) at `step`.
    /// A transformer's views also take the person's spec and, when a
    /// sample is due, its prompt's tokens.
    pub fn new(
        e: &Experiment,
        data: &Dataset,
        step: u64,
        params: Vec<f32>,
        links: Vec<LinkBlock>,
    ) -> Result<ViewJob, Error> {
        ViewJob::with_gpt(e, data, step, params, links, GptViewSpec::default(), None)
    }

    pub fn with_gpt(
        e: &Experiment,
        data: &Dataset,
        step: u64,
        params: Vec<f32>,
        links: Vec<LinkBlock>,
        spec: GptViewSpec,
        sample_prompt: Option<Vec<u32>>,
    ) -> Result<ViewJob, Error> {
        // Every buffer here is a chunk's (bounded by `CHUNK_MACS`), but a
        // device short of memory refuses it as an error, not an abort.
        let layout = Layout::new(e);
        let per_row = layout.parameter_count.max(1) as u64;
        let chunk_rows = (CHUNK_MACS / per_row).clamp(1, 4096) as usize;
        let grid = match plane_extent(e, data) {
            Some(extent) => {
                let side = grid_side(&layout);
                let shown =
                    layout.layers.iter().map(|l| vec![vec![0.0; side * side]; l.units.min(SHOWN_UNITS)]).collect();
                Some(GridPass {
                    side,
                    extent,
                    inputs: grid_inputs(e, extent, side),
                    done: 0,
                    acts: Activations::try_new(&layout, chunk_rows.min(side * side))?,
                    boundary: Vec::with_capacity(side * side),
                    neurons: shown,
                })
            }
            None => None,
        };
        let rows = (data.train.rows(), data.test.rows());
        let classes = match is_image_data(e) {
            true => ClassEvaluator::observing(&layout, e, rows.1)?,
            false => None,
        };
        let gpt = e.gpt().map(|g| {
            let (train, test) = super::gpt::eval_windows(data);
            let windows = (test, train);
            GptJob {
                model: stepscope_core::model::gpt::Gpt::new(g.shape()),
                sample: sample_prompt.map(|prompt| SampleJob::new(e, step, &spec, &prompt)),
                windows,
                spec,
                views: GptViews::default(),
                attention_done: false,
            }
        });
        let eval_rows = gpt.as_ref().map_or(rows, |g| (g.windows.1.rows(), g.windows.0.rows()));
        Ok(ViewJob {
            gpt,
            classes,
            experiment: e.clone(),
            test: Evaluator::try_new(&layout, eval_rows.1, chunk_rows)?,
            train: Evaluator::try_new(&layout, eval_rows.0, chunk_rows)?,
            layout,
            step,
            rows,
            params,
            grads: None,
            maps_row: 0,
            links,
            chunk_rows,
            grid,
            spent_ms: 0.0,
        })
    }

    /// The last step's gradients, laid out as the parameters: a conv net
    /// draws its filters' beside the filters.
    pub fn set_gradients(&mut self, grads: Vec<f32>) {
        self.grads = (grads.len() == self.params.len()).then_some(grads);
    }

    /// The test image a conv net's feature maps are drawn for (the last
    /// where the test set is shorter).
    pub fn set_maps_row(&mut self, row: usize) {
        self.maps_row = row;
    }

    /// Whether this job still describes the run: the same experiment and
    /// data, and not from after the run's step (a restore went back).
    pub fn is_for(&self, e: &Experiment, data: &Dataset, step: u64) -> bool {
        self.experiment == *e && self.rows == (data.train.rows(), data.test.rows()) && self.step <= step
    }

    /// Milliseconds of work so far.
    pub fn spent_ms(&self) -> f64 {
        self.spent_ms
    }

    /// Does chunks of work until `budget_ms` is spent (at least one);
    /// the views once all are done.
    pub fn advance(&mut self, data: &Dataset, budget_ms: f64) -> Option<Snapshot> {
        let started = Instant::now();
        let mut done = false;
        loop {
            done = done || self.chunk(data);
            let elapsed = started.elapsed().as_secs_f64() * 1e3;
            if done || elapsed >= budget_ms {
                self.spent_ms += elapsed;
                break;
            }
        }
        done.then(|| self.finish(data))
    }

    /// One chunk: grid points, else test rows, else train rows; true when
    /// nothing is left.
    fn chunk(&mut self, data: &Dataset) -> bool {
        let (e, layout, params, n) = (&self.experiment, &self.layout, &self.params, self.chunk_rows);
        if let Some(grid) = self.grid.as_mut().filter(|g| g.done < g.side * g.side) {
            let points = grid.side * grid.side;
            let (start, rows) = (grid.done, n.min(points - grid.done));
            let width = e.model.inputs;
            grid.acts.resize(layout, rows);
            forward_pass(&mut grid.acts, params, &grid.inputs[start * width..(start + rows) * width], layout, e);
            let outputs = e.outputs();
            grid.boundary.extend(grid.acts.output().chunks_exact(outputs).map(|row| output_value(row, e.loss)));
            for (l, shape) in layout.layers.iter().enumerate() {
                let a = &grid.acts.a[l];
                for (u, column) in grid.neurons[l].iter_mut().enumerate() {
                    for p in 0..rows {
                        column[start + p] = a[p * shape.units + u];
                    }
                }
            }
            grid.done += rows;
            return false;
        }
        let (test, train) = match &self.gpt {
            Some(g) => (&g.windows.0, &g.windows.1),
            None => (&data.test, &data.train),
        };
        // Image data's confusion matrix and misclassified rows are read from
        // the test evaluation's own outputs: one forward pass of the test
        // set, not two.
        let classes = &mut self.classes;
        let test_done = self.test.advance_with(params, layout, e, test, n, |start, outputs| {
            if let Some(c) = classes.as_mut() {
                c.observe(outputs, test, start, e);
            }
        });
        if !test_done {
            return false;
        }
        if !self.train.advance(params, layout, e, train, n) {
            return false;
        }
        let Some(g) = self.gpt.as_mut() else { return true };
        let Some(vocabulary) = data.vocabulary.as_ref() else { return true };
        if !g.attention_done {
            // The held-out windows, or the training ones when nothing is
            // held out.
            let table = if data.test.rows() > 0 { &data.test } else { &data.train };
            g.views.attention = attention_view(&g.model, params, table, vocabulary, g.spec.window);
            g.attention_done = true;
            return false;
        }
        match g.sample.as_mut() {
            Some(job) => match job.advance(&g.model, params, vocabulary) {
                Some(sample) => {
                    g.views.sample = Some(std::sync::Arc::new(sample));
                    g.sample = None;
                    true
                }
                None => false,
            },
            None => true,
        }
    }

    fn finish(&mut self, data: &Dataset) -> Snapshot {
        let e = &self.experiment;
        let mut snap = Snapshot {
            step: self.step,
            classes: if e.loss == Loss::CrossEntropy { e.outputs() } else { 0 },
            links: std::mem::take(&mut self.links),
            train: self.train.result(),
            test: self.test.result(),
            ..Snapshot::default()
        };
        snap.images = self.image_views(data);
        snap.gpt = self.gpt.take().map(|mut g| {
            g.views.preview = super::gpt::TextPreview::of(data, g.model.shape.context);
            g.views
        });
        if let Some(grid) = self.grid.take() {
            snap.extent = grid.extent;
            snap.grid = grid.side;
            snap.boundary = Some(grid.boundary);
            snap.neurons = grid
                .neurons
                .into_iter()
                .map(|layer| {
                    layer
                        .into_iter()
                        .map(|column| {
                            let scale = column.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
                            column.iter().map(|v| v / scale).collect()
                        })
                        .collect()
                })
                .collect();
            snap.points = plot_points(e, data);
        }
        snap
    }

    /// The image views, from the test set's class metrics and the first
    /// layer's weights (image data only).
    fn image_views(&self, data: &Dataset) -> Option<ImageViews> {
        let metrics = self.classes.as_ref()?.result()?;
        let side = super::image_side(&self.experiment)?;
        let pixels = side * side;
        let table = &data.test;
        let misclassified = metrics
            .misclassified
            .iter()
            .take(SHOWN_MISCLASSIFIED)
            .map(|m| Misclassified {
                row: m.row,
                pixels: table.inputs[m.row * table.input_width..][..pixels].to_vec(),
                truth: m.truth,
                predicted: m.predicted,
            })
            .collect();
        let first = self.layout.layers.first()?;
        let weights = &self.params[first.weight_offset..first.bias_offset];
        let first_layer = match first.op {
            LayerOp::Dense => filters(weights, first.units, side),
            _ => Vec::new(),
        };
        Some(ImageViews {
            side,
            classes: metrics.classes,
            confusion: metrics.confusion.clone(),
            misclassified,
            wrong: metrics.wrong(),
            first_layer,
            conv: super::conv_views(
                &self.experiment,
                &self.layout,
                &self.params,
                self.grads.as_deref(),
                table,
                self.maps_row.min(table.rows().saturating_sub(1)),
            ),
        })
    }
}
