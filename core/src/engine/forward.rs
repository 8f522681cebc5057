//! The forward pass over the whole network, shared by training and
//! evaluation.

use super::Evaluation;
use crate::data::Table;
use crate::experiment::{DataSource, Experiment, Loss};
use crate::model::conv::{avg_pool2d_forward, conv2d_forward, max_pool2d_forward};
use crate::model::gpt::{Gpt, GptActivations};
use crate::model::{activation_forward, all_finite, dense_forward, loss_forward, LayerOp, Layout};

/// Rows evaluated at once: evaluation and prediction work in chunks of
/// this many rows, so their memory does not grow with the table.
pub const EVAL_CHUNK_ROWS: usize = 4096;

/// What the forward pass stores for backward, per layer l: `a[l]` outputs,
/// (B, O_l), and `z[l]` pre-activations, (B, O_l).
///
/// With activation checkpointing, `z` is one shared scratch of (B, max O)
/// instead: every layer writes its z there and backward recomputes
/// z[l] = a[l−1]·Wᵀ + b before it needs it (`CpuEngine`'s backward).
/// Backward still needs every `a[l]` (dense backward's input, and tanh's
/// and sigmoid's derivative), so only the z's are given up.
#[derive(Clone, Debug, Default)]
pub struct Activations {
    pub z: Vec<Vec<f32>>, // (B, O_l) per layer, or one (B, max O) when checkpointing
    pub a: Vec<Vec<f32>>, // (B, O_l) per layer
    pub rows: usize,
    /// z is one shared scratch, not kept per layer.
    pub checkpointing: bool,
    /// Each max-pool layer's choice per output (the input's index), for
    /// backward; empty for other layers.
    pub argmax: Vec<Vec<u32>>,
    /// The conv layers' patch matrices, one image at a time
    /// (`Conv2d::scratch_floats` of the largest).
    pub conv_scratch: Vec<f32>,
}

impl Activations {
    /// Every layer's z and a kept (training without checkpointing, and
    /// evaluation).
    /// Where memory runs out this panics, as `vec!` would abort: callers
    /// that can report it use `try_new`.
    pub fn new(layout: &Layout, rows: usize) -> Activations {
        Activations::try_new(layout, rows).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `new`, or an error when the memory is not there.
    pub fn try_new(layout: &Layout, rows: usize) -> crate::error::Result<Activations> {
        let sizes = || layout.layers.iter().map(|l| crate::error::zeros(rows * l.units, "the activations"));
        Ok(Activations {
            z: sizes().collect::<Result<_, _>>()?,
            a: sizes().collect::<Result<_, _>>()?,
            rows,
            checkpointing: false,
            argmax: argmax(layout, rows)?,
            conv_scratch: crate::error::zeros(conv_scratch_floats(layout), "the conv layers' patch matrices")?,
        })
    }

    /// Every layer's a kept; z in one (B, max O) scratch.
    pub fn checkpointed(layout: &Layout, rows: usize) -> Activations {
        Activations::try_checkpointed(layout, rows).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `checkpointed`, or an error when the memory is not there.
    pub fn try_checkpointed(layout: &Layout, rows: usize) -> crate::error::Result<Activations> {
        let max_units = layout.layers.iter().map(|l| l.units).max().unwrap_or(0);
        let a = layout.layers.iter().map(|l| crate::error::zeros(rows * l.units, "the activations"));
        Ok(Activations {
            z: vec![crate::error::zeros(rows * max_units, "the activations")?],
            a: a.collect::<Result<_, _>>()?,
            rows,
            checkpointing: true,
            argmax: argmax(layout, rows)?,
            conv_scratch: crate::error::zeros(conv_scratch_floats(layout), "the conv layers' patch matrices")?,
        })
    }

    /// Resizes for `rows` rows, reusing the allocations.
    pub fn resize(&mut self, layout: &Layout, rows: usize) {
        if self.rows != rows || self.a.len() != layout.layers.len() {
            // The old buffers go first: never both sizes at once.
            (self.z, self.a) = (Vec::new(), Vec::new());
            *self = if self.checkpointing {
                Activations::checkpointed(layout, rows)
            } else {
                Activations::new(layout, rows)
            };
        }
    }

    /// Every layer's z, when they are kept (not when checkpointing).
    pub fn stored_z(&self) -> Option<&[Vec<f32>]> {
        (!self.checkpointing).then_some(self.z.as_slice())
    }

    pub fn output(&self) -> &[f32] {
        self.a.last().map_or(&[], |a| a.as_slice())
    }

    /// Bytes held: with checkpointing 4·B·(Σ_l O_l + max O), else 2·4·B·Σ_l O_l.
    /// Bytes of z, a and the max-pool choices (the conv scratch is
    /// backward scratch: `scratch_bytes`).
    pub fn bytes(&self) -> usize {
        4 * (self.z.iter().chain(&self.a).map(Vec::len).sum::<usize>()
            + self.argmax.iter().map(Vec::len).sum::<usize>())
    }

    /// Bytes of the conv layers' patch matrices.
    pub fn scratch_bytes(&self) -> usize {
        4 * self.conv_scratch.len()
    }
}

/// The max-pool layers' choices for `rows` rows (empty for other layers).
fn argmax(layout: &Layout, rows: usize) -> crate::error::Result<Vec<Vec<u32>>> {
    layout
        .layers
        .iter()
        .map(|l| {
            let n = if matches!(l.op, LayerOp::MaxPool(_)) { rows * l.units } else { 0 };
            let mut v = crate::error::room(n, "the max-pool choices")?;
            v.resize(n, 0);
            Ok(v)
        })
        .collect()
}

/// Floats of the largest conv layer's scratch (0 without conv layers).
pub fn conv_scratch_floats(layout: &Layout) -> usize {
    layout.layers.iter().map(|l| if let LayerOp::Conv(c) = l.op { c.scratch_floats() } else { 0 }).max().unwrap_or(0)
}

/// Runs every layer on `inputs` (rows, I). Returns the index of the first
/// layer whose pre-activation or output holds a NaN or Inf, if any.
/// Only the pre-activations are checked: every activation maps a finite z
/// to a finite a (tested over every activation), and an output cannot be
/// trusted to show a bad z (tanh(∞) = 1, and relu's max(NaN, 0) = 0).
pub fn forward_pass(
    acts: &mut Activations,
    params: &[f32],
    inputs: &[f32],
    layout: &Layout,
    experiment: &Experiment,
) -> Option<usize> {
    let mut first_non_finite = None;
    for l in 0..layout.layers.len() {
        if !forward_layer(acts, params, inputs, layout, experiment, l) && first_non_finite.is_none() {
            first_non_finite = Some(l);
        }
    }
    first_non_finite
}

/// Layer `l` of `forward_pass` (its inputs are layer l−1's outputs, or
/// `inputs`): false when its pre-activation (so its output) holds a NaN
/// or Inf.
/// Running the layers one by one gives the same bits as `forward_pass`.
/// Never inlined: the profiled step's bursts time this very code.
#[inline(never)]
pub fn forward_layer(
    acts: &mut Activations,
    params: &[f32],
    inputs: &[f32],
    layout: &Layout,
    experiment: &Experiment,
    l: usize,
) -> bool {
    let rows = acts.rows;
    let shape = layout.layers[l];
    let slot = if acts.checkpointing { 0 } else { l };
    let z = &mut acts.z[slot][..rows * shape.units];
    let (before, after) = acts.a.split_at_mut(l);
    let x = if l == 0 { inputs } else { &before[l - 1] };
    let weight = &params[shape.weight_offset..shape.bias_offset];
    let bias = &params[shape.bias_offset..shape.end()];
    layer_forward(z, &mut acts.argmax[l], &mut acts.conv_scratch, x, weight, bias, rows, &shape);
    activation_forward(&mut after[0], z, experiment.model.layers[l].activation);
    all_finite(z)
}

/// z = the layer's op on x (before its activation): dense, conv or pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layer_forward(
    z: &mut [f32],
    argmax: &mut [u32],
    scratch: &mut Vec<f32>,
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    rows: usize,
    shape: &crate::model::LayerShape,
) {
    match shape.op {
        LayerOp::Dense => dense_forward(z, x, weight, bias, rows, shape.inputs, shape.units),
        LayerOp::Conv(c) => conv2d_forward(z, x, weight, bias, rows, &c, scratch),
        LayerOp::MaxPool(p) => max_pool2d_forward(z, argmax, x, rows, &p),
        LayerOp::AvgPool(p) => avg_pool2d_forward(z, x, rows, &p),
    }
}

/// Mean loss (and accuracy for classification) of `params` over `table`.
pub fn evaluate(params: &[f32], layout: &Layout, experiment: &Experiment, table: &Table) -> Option<Evaluation> {
    let mut evaluator = Evaluator::new(layout, table.rows(), EVAL_CHUNK_ROWS);
    evaluator.advance(params, layout, experiment, table, usize::MAX);
    evaluator.result()
}

/// An evaluation taken some rows at a time (`advance`), so that a caller
/// can yield between parts of a long one (the page's views of a large
/// network). Rows go through the network in chunks, so memory does not
/// grow with the table. A table of one chunk, evaluated in one `advance`,
/// gives exactly the unchunked figures; more chunks combine their means
/// weighted by rows, in f64.
pub struct Evaluator {
    rows: usize,
    done: usize,
    chunk: usize,
    acts: Activations,
    loss_sum: f64,
    correct: f64,
    classified: bool,
    whole: Option<Evaluation>,
    /// The transformer's forward and its activations (`model.kind` "gpt"):
    /// rows are windows, `chunk` windows at a time.
    gpt: Option<Box<(Gpt, GptActivations)>>,
}

/// Windows of a transformer evaluated at once: about `EVAL_CHUNK_ROWS`
/// positions (at least one window).
pub fn gpt_eval_windows(context: usize) -> usize {
    (EVAL_CHUNK_ROWS / context.max(1)).max(1)
}

impl Evaluator {
    /// For a table of `rows` rows, at most `chunk` rows at once.
    /// Where memory runs out this panics: callers that can report it use
    /// `try_new`.
    pub fn new(layout: &Layout, rows: usize, chunk: usize) -> Evaluator {
        Evaluator::try_new(layout, rows, chunk).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `new`, its buffers allocated now and fallibly: a machine without
    /// the memory gets an error naming them, not an abort mid-evaluation.
    pub fn try_new(layout: &Layout, rows: usize, chunk: usize) -> crate::error::Result<Evaluator> {
        let chunk = match &layout.gpt {
            Some(shape) => gpt_eval_windows(shape.context),
            None => chunk,
        };
        let chunk = chunk.clamp(1, EVAL_CHUNK_ROWS).min(rows.max(1));
        // Evaluation keeps no activations for a backward: one block's at a
        // time and each block's output (the checkpointing layout), the same
        // bits as keeping them all, a fraction of the memory.
        let (acts, gpt) = match layout.gpt {
            Some(shape) => (
                Activations::try_new(layout, 0)?,
                Some(Box::new((Gpt::new(shape), GptActivations::allocate(&shape, chunk, true)?))),
            ),
            None => (Activations::try_new(layout, chunk)?, None),
        };
        Ok(Evaluator { rows, done: 0, chunk, acts, loss_sum: 0.0, correct: 0.0, classified: false, whole: None, gpt })
    }

    /// Evaluates up to `max_rows` more rows (at least one chunk's worth
    /// where rows are left); true when the table is done.
    pub fn advance(
        &mut self,
        params: &[f32],
        layout: &Layout,
        experiment: &Experiment,
        table: &Table,
        max_rows: usize,
    ) -> bool {
        self.advance_with(params, layout, experiment, table, max_rows, |_, _| {})
    }

    /// `advance`, giving each chunk's outputs to `also` with the chunk's
    /// first row (in row order, every row once), so that another measure
    /// of the same rows (`metrics::ClassEvaluator::observe`) needs no
    /// forward pass of its own. A transformer's chunks are not given.
    pub fn advance_with(
        &mut self,
        params: &[f32],
        layout: &Layout,
        experiment: &Experiment,
        table: &Table,
        max_rows: usize,
        mut also: impl FnMut(usize, &[f32]),
    ) -> bool {
        let (i, t, outputs) = (table.input_width, table.target_width, experiment.outputs());
        let end = self.done.saturating_add(max_rows.max(1)).min(self.rows);
        while self.done < end {
            let (start, n) = (self.done, self.chunk.min(end - self.done));
            if let Some(gpt) = &mut self.gpt {
                let (model, acts) = &mut **gpt;
                let (loss, accuracy) = gpt_chunk(model, acts, params, table, start, n);
                if n == self.rows {
                    self.whole = Some(Evaluation { loss, accuracy: Some(accuracy) });
                }
                self.loss_sum += f64::from(loss) * n as f64;
                self.correct += f64::from(accuracy) * n as f64;
                self.classified = true;
                self.done += n;
                continue;
            }
            self.acts.resize(layout, n);
            forward_pass(&mut self.acts, params, &table.inputs[start * i..(start + n) * i], layout, experiment);
            let (y, targets) = (self.acts.output(), &table.targets[start * t..(start + n) * t]);
            also(start, y);
            let loss = loss_forward(y, targets, experiment.loss, n, outputs);
            let accuracy = accuracy(y, targets, experiment, n);
            if n == self.rows {
                self.whole = Some(Evaluation { loss, accuracy });
            }
            self.loss_sum += f64::from(loss) * n as f64;
            if let Some(a) = accuracy {
                self.correct += f64::from(a) * n as f64;
                self.classified = true;
            }
            self.done += n;
        }
        self.done == self.rows
    }

    /// The figures over the whole table (None for an empty table, or
    /// before the table is done).
    pub fn result(&self) -> Option<Evaluation> {
        if self.rows == 0 || self.done < self.rows {
            return None;
        }
        if self.whole.is_some() {
            return self.whole;
        }
        let rows = self.rows as f64;
        let accuracy = self.classified.then(|| (self.correct / rows) as f32);
        Some(Evaluation { loss: (self.loss_sum / rows) as f32, accuracy })
    }
}

/// The transformer over windows `start..start + n` of `table`: the mean
/// cross-entropy over their positions and the share of next tokens whose
/// logit is the largest. Every window has T positions, so means over
/// chunks combine by windows.
fn gpt_chunk(
    model: &Gpt,
    acts: &mut GptActivations,
    params: &[f32],
    table: &Table,
    start: usize,
    n: usize,
) -> (f32, f32) {
    let (t, v) = (model.shape.context, model.shape.vocab_size);
    let ids = |cells: &[f32]| cells.iter().map(|&x| x as u32).collect::<Vec<u32>>();
    let (inp, next) = (ids(&table.inputs[start * t..(start + n) * t]), ids(&table.targets[start * t..(start + n) * t]));
    let (loss, _) = model.forward(acts, params, &inp, &next);
    let correct = acts
        .logits
        .chunks_exact(v)
        .zip(&next)
        .filter(|(row, &target)| {
            let best = row.iter().enumerate().fold(0, |b, (i, &x)| if x > row[b] { i } else { b });
            best == target as usize
        })
        .count();
    (loss, correct as f32 / (n * t) as f32)
}

/// The network's outputs for `inputs` (rows, I): (rows, O), computed in
/// chunks of `EVAL_CHUNK_ROWS` rows. `Err(layer)` names the first layer with
/// a non-finite value.
pub fn predict(params: &[f32], layout: &Layout, experiment: &Experiment, inputs: &[f32]) -> Result<Vec<f32>, usize> {
    let width = experiment.model.inputs.max(1);
    let rows = inputs.len() / width;
    let chunk = rows.clamp(1, EVAL_CHUNK_ROWS);
    let mut acts = Activations::new(layout, chunk);
    let mut out = Vec::with_capacity(rows * experiment.outputs());
    for start in (0..rows).step_by(chunk) {
        let n = chunk.min(rows - start);
        acts.resize(layout, n);
        if let Some(layer) =
            forward_pass(&mut acts, params, &inputs[start * width..(start + n) * width], layout, experiment)
        {
            return Err(layer);
        }
        out.extend_from_slice(acts.output());
    }
    Ok(out)
}

/// Fraction of rows classified right: argmax for cross_entropy, logit > 0
/// for bce, sign for mse on ±1 classes. None for regression.
fn accuracy(y: &[f32], targets: &[f32], e: &Experiment, rows: usize) -> Option<f32> {
    let regression = e.data.source.is_regression() || (e.data.source == DataSource::Csv && e.loss == Loss::Mse);
    if regression {
        return None;
    }
    let outputs = e.outputs();
    let width = targets.len() / rows;
    let correct = (0..rows)
        .filter(|&b| {
            let row = &y[b * outputs..(b + 1) * outputs];
            let t = &targets[b * width..(b + 1) * width];
            match e.loss {
                Loss::CrossEntropy => {
                    let best = row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
                    best == t[0] as usize
                }
                Loss::BceWithLogits => row.iter().zip(t).all(|(&v, &t)| (v > 0.0) == (t > 0.5)),
                Loss::Mse => (row[0] > 0.0) == (t[0] > 0.0),
            }
        })
        .count();
    Some(correct as f32 / rows as f32)
}
