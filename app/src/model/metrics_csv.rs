//! The metrics download (`download-metrics`): a CSV of the run's recorded
//! steps, from the engine's own numbers.
//!
//! A row is one optimizer step, numbered as the page's step counter
//! numbers it (the steps taken once it is done, from 1). Its batch loss,
//! gradient norm, learning rate and phase times are that step's own
//! (`StepMetrics`); the whole-set losses and accuracies are those of the
//! views' evaluation after that step, which runs a few times a second, so
//! most rows leave them empty. An evaluation at a step whose own numbers
//! were not kept (step 0, before any training, or a step thinned out) is
//! a row of its own with the step's columns empty. Nothing is filled in:
//! an empty cell was not measured.
//!
//! The log is bounded: every step is kept until it holds `MAX_ROWS` rows,
//! then only every 2nd step, then every 4th, … (the kept stride is in the
//! file's header), and every evaluated step.

use stepscope_core::engine::{Evaluation, Timing};
use stepscope_core::gpu::{PassKind, StepPass};
use stepscope_core::stats::TensorStats;
use stepscope_core::StepMetrics;

/// The most rows kept (about 140 bytes each).
pub const MAX_ROWS: usize = 10_000;
/// Timed GPU passes kept per step (a phased step has a handful).
const MAX_PASSES_PER_STEP: usize = 16;

/// The columns, in order.
pub const COLUMNS: [&str; 19] = [
    "step",
    "batch_loss",
    "train_loss",
    "test_loss",
    "train_accuracy",
    "test_accuracy",
    "grad_norm",
    "lr",
    "clipped",
    "data_ms",
    "forward_ms",
    "backward_ms",
    "optimizer_ms",
    "communication_ms",
    "checkpoint_ms",
    "logging_ms",
    "gpu_ms",
    "wall_ms",
    "timing",
];

/// What the page's frame adds to its steps: its wall time, checkpoint and
/// logging time, each shared evenly by the frame's steps (as the timeline
/// shares them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FrameShare {
    pub wall_ms: f64,
    pub checkpoint_ms: f64,
    pub logging_ms: f64,
}

/// One recorded step.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Steps taken once this one is done (the step counter's number).
    pub step: u64,
    pub metrics: Option<StepMetrics>,
    pub frame: Option<FrameShare>,
    pub train: Option<Evaluation>,
    pub test: Option<Evaluation>,
    /// The GPU's timed passes of the step, in ms on its submit's clock.
    pub gpu: Vec<(PassKind, f64, f64)>,
}

impl Row {
    fn evaluated(&self) -> bool {
        self.train.is_some() || self.test.is_some()
    }
}

/// The run's recorded steps, in increasing order.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsLog {
    rows: Vec<Row>,
    /// Steps kept: those whose number is a multiple of it.
    stride: u64,
    /// Whether every other evaluation was let go to stay within the bound.
    evaluations_thinned: bool,
}

impl Default for MetricsLog {
    fn default() -> Self {
        MetricsLog { rows: Vec::new(), stride: 1, evaluations_thinned: false }
    }
}

/// One kept sample of per-layer statistics (after `taken` steps: those of
/// step `taken − 1`) as TensorBoard histograms.
fn layer_histograms(wall: f64, taken: u64, layers: &[[TensorStats; 4]]) -> Vec<u8> {
    use stepscope_core::export::tensorboard::{histogram_proto_record, Histogram};
    let mut out = Vec::new();
    for (l, stats) in layers.iter().enumerate() {
        for (kind, s) in ["activations", "gradients", "weights", "updates"].iter().zip(stats) {
            out.extend(histogram_proto_record(
                wall,
                taken.saturating_sub(1),
                &format!("{kind}/layer{l}"),
                &Histogram::of_stats(s),
            ));
        }
    }
    out
}

impl MetricsLog {
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Records a frame's steps. A step at or before one already recorded
    /// means the run went back (a restore or a rollback): what came after
    /// it is forgotten first, so the steps always increase. An evaluation
    /// may already be there (the views of a frame's last step arrive with
    /// its steps): the step joins its row.
    pub fn record_steps(&mut self, metrics: &[StepMetrics], frame: Option<FrameShare>) {
        for m in metrics {
            let step = m.step + 1;
            if self.rows.iter().rev().find(|r| r.metrics.is_some()).is_some_and(|r| r.step >= step) {
                self.forget_from(step);
            }
            match self.rows.binary_search_by_key(&step, |r| r.step) {
                Ok(at) => {
                    let row = &mut self.rows[at];
                    (row.metrics, row.frame) = (Some(m.clone()), frame);
                    row.gpu.clear();
                }
                Err(at) if step % self.stride == 0 => self.rows.insert(
                    at,
                    Row { step, metrics: Some(m.clone()), frame, train: None, test: None, gpu: Vec::new() },
                ),
                Err(_) => {}
            }
        }
        self.thin();
    }

    /// Records the GPU's timed passes under the steps they ran (a step
    /// the log let go keeps none).
    pub fn record_gpu_passes(&mut self, passes: &[StepPass]) {
        for p in passes {
            if let Ok(at) = self.rows.binary_search_by_key(&(p.step + 1), |r| r.step) {
                let row = &mut self.rows[at];
                if row.metrics.is_some() && row.gpu.len() < MAX_PASSES_PER_STEP {
                    row.gpu.push((p.kind, p.start_ms, p.end_ms));
                }
            }
        }
    }

    /// Records the whole-set evaluation after `step` steps.
    pub fn record_evaluation(&mut self, step: u64, train: Option<Evaluation>, test: Option<Evaluation>) {
        if train.is_none() && test.is_none() {
            return;
        }
        match self.rows.binary_search_by_key(&step, |r| r.step) {
            Ok(at) => {
                self.rows[at].train = train;
                self.rows[at].test = test;
            }
            Err(at) => self.rows.insert(at, Row { step, metrics: None, frame: None, train, test, gpu: Vec::new() }),
        }
        self.thin();
    }

    /// Forgets the steps from `step` on (a rollback to `step - 1`).
    pub fn forget_from(&mut self, step: u64) {
        self.rows.retain(|r| r.step < step);
    }

    pub fn clear(&mut self) {
        *self = MetricsLog::default();
    }

    /// Keeps the log within `MAX_ROWS`: doubles the stride, keeping the
    /// evaluated steps; where evaluations alone would fill half the log,
    /// lets every other evaluation go instead.
    fn thin(&mut self) {
        while self.rows.len() > MAX_ROWS {
            if self.rows.iter().filter(|r| r.evaluated()).count() > MAX_ROWS / 2 {
                self.evaluations_thinned = true;
                for (i, row) in self.rows.iter_mut().filter(|r| r.evaluated()).enumerate() {
                    if i % 2 == 1 {
                        (row.train, row.test) = (None, None);
                    }
                }
            } else {
                self.stride *= 2;
            }
            let stride = self.stride;
            self.rows.retain(|r| (r.metrics.is_some() && r.step % stride == 0) || r.evaluated());
        }
    }

    /// When each row's step ended, in seconds, going back from `end_s`: a
    /// row's steps since the row before it (more than one where the log
    /// was thinned) each took its frame's wall time. Also the time the
    /// first row's steps began.
    fn row_ends(&self, end_s: f64) -> (Vec<f64>, f64) {
        let mut ends = vec![end_s; self.rows.len()];
        let mut t = end_s;
        for (i, row) in self.rows.iter().enumerate().rev() {
            ends[i] = t;
            let before = if i > 0 { self.rows[i - 1].step } else { 0 };
            t -= row.frame.map_or(0.0, |f| f.wall_ms) * row.step.saturating_sub(before) as f64 / 1e3;
        }
        (ends, t)
    }

    /// The log as a TensorBoard event file (`download-tensorboard`), with
    /// the tags `stepscope train --tensorboard` writes and its step numbers
    /// (0-based: a step's own figures at its index, an evaluation after
    /// `n` steps at `n - 1`, the evaluation before any step at 0). Each
    /// record's wall time is `end_s` less the wall time of the steps after
    /// it, as the frames measured them. `layers`: the per-layer
    /// statistics the page kept (steps taken, then per layer [activations,
    /// gradients, weights, updates]) as histograms `activations/layer<l>`,
    /// `gradients/layer<l>`, `weights/layer<l>` (weights and bias
    /// together), `updates/layer<l>` at the step they describe; steps never
    /// go backwards in the file (TensorBoard's reader drops what comes after
    /// a step that does).
    pub fn to_tensorboard(&self, end_s: f64, layers: &[(u64, &[[TensorStats; 4]])]) -> Vec<u8> {
        use stepscope_core::export::tensorboard::{file_version_record, scalars_record, step_scalars};
        // Going back from the end: a row's steps since the row before it
        // (more than one where the log was thinned) each took its wall time.
        let (walls, _) = self.row_ends(end_s);
        let mut out = file_version_record(walls.first().copied().unwrap_or(end_s));
        let mut samples = layers.iter().peekable();
        for (row, &wall) in self.rows.iter().zip(&walls) {
            if let Some(m) = &row.metrics {
                let mut values = step_scalars(m);
                if let Some(f) = row.frame {
                    values.extend([
                        ("phase/checkpoint_ms", f.checkpoint_ms as f32),
                        ("phase/logging_ms", f.logging_ms as f32),
                        ("phase/wall_ms", f.wall_ms as f32),
                    ]);
                }
                out.extend(scalars_record(wall, m.step, &values));
            }
            let step = row.step.saturating_sub(1);
            // The whole test set as the CLI's `loss/test`; the whole
            // training set apart from the step's mini-batch loss.
            for (tags, ev) in
                [(("loss/train_set", "accuracy/train_set"), row.train), (("loss/test", "accuracy/test"), row.test)]
            {
                let Some(ev) = ev else { continue };
                let mut values = vec![(tags.0, ev.loss)];
                if let Some(a) = ev.accuracy {
                    values.push((tags.1, a));
                }
                out.extend(scalars_record(wall, step, &values));
            }
            while let Some((taken, stats)) = samples.next_if(|(taken, _)| *taken <= row.step) {
                out.extend(layer_histograms(wall, *taken, stats));
            }
        }
        for (taken, stats) in samples {
            out.extend(layer_histograms(end_s, *taken, stats));
        }
        out
    }

    /// The log as a trace (`download-trace`), in the Trace Event JSON that
    /// `stepscope train --trace` writes (`export::trace`): a
    /// `ProfilerStep#N` per recorded step, ending `end_s` less the wall
    /// time of the steps after it (as `to_tensorboard` places them, and
    /// never before the step before it ends), whose length is the step's
    /// share of its frame or its measured phases where those are longer; inside it the phases with
    /// their measured lengths, in the order a step runs them (data,
    /// forward, backward, optimizer, then the frame's checkpoint and
    /// logging shares; a step's micro-batches are not kept apart), and
    /// `page` for the rest of the frame's share (drawing, messaging, the
    /// engine's bookkeeping). Where the GPU's passes were timed, they are
    /// kernels on the GPU's track, as far apart as the GPU's clock put
    /// them, the last ending with its step (a step's place is the page's
    /// reckoning back from the download, not a clock), never overlapping
    /// the passes before them. A step on several ranks has its all-reduce
    /// (`communication`) after its backward, and each rank a trace of its
    /// own (`export::trace::rank_traces`): (rank, JSON), rank 0 first.
    pub fn to_traces(&self, end_s: f64, device: Option<String>) -> Vec<(u32, String)> {
        use stepscope_core::export::trace::{rank_traces, tile, Span, TraceInfo, TraceStep, DATA_EVENT};
        let (ends_s, origin_s) = self.row_ends(end_s);
        let ends: Vec<f64> = ends_s.iter().map(|e| e * 1e6).collect();
        let origin = origin_s * 1e6;
        let mut steps = Vec::new();
        // A step whose measured phases outlast its share of the frame (one
        // that wrote a checkpoint, say) starts where the step before it
        // ended, so steps never overlap on the track.
        let mut prev_end = f64::NEG_INFINITY;
        let mut gpu_free = f64::NEG_INFINITY;
        let mut ranks = Vec::new();
        for (row, &end) in self.rows.iter().zip(&ends) {
            let (Some(m), Some(frame)) = (&row.metrics, row.frame) else { continue };
            let p = &m.phases;
            let phases: Vec<(&'static str, f64)> = vec![
                (DATA_EVENT, p.data_ms),
                ("forward", p.forward_ms),
                ("backward", p.backward_ms),
                ("communication", p.communication_ms),
                ("optimizer", p.optimizer_ms),
                ("checkpoint", frame.checkpoint_ms),
                ("logging", frame.logging_ms),
            ];
            let measured: f64 = phases.iter().map(|(_, ms)| ms).sum();
            let wall = frame.wall_ms.max(measured);
            let start = (end - wall * 1e3 - origin).max(prev_end);
            prev_end = start + wall * 1e3;
            let mut phases = phases;
            phases.push(("page", wall - measured));
            let first = row.gpu.iter().map(|g| g.1).fold(f64::INFINITY, f64::min);
            let last = row.gpu.iter().map(|g| g.2).fold(f64::NEG_INFINITY, f64::max);
            let offset = (start + wall * 1e3 - (last - first) * 1e3).max(start).max(gpu_free);
            let gpu: Vec<Span> = row
                .gpu
                .iter()
                .map(|&(kind, s, e)| Span {
                    name: kind.name().to_string(),
                    start_us: offset + (s - first) * 1e3,
                    end_us: offset + (e - first) * 1e3,
                })
                .collect();
            gpu_free = gpu.iter().map(|g| g.end_us).fold(gpu_free, f64::max);
            ranks.push(m.ranks.clone());
            steps.push(TraceStep {
                step: m.step,
                start_us: start,
                end_us: start + wall * 1e3,
                phases: tile(&[(start, start + wall * 1e3, phases)]),
                submit_us: (!gpu.is_empty()).then_some(start + p.data_ms * 1e3),
                gpu,
                loss: m.loss,
                grad_norm: m.grad_norm,
                lr: m.lr,
            });
        }
        rank_traces(&TraceInfo { pid: 1, rank: 0, world_size: 1, device }, &steps, &ranks)
    }

    /// The CSV: `#` comment lines saying what a row is (after `about`, the
    /// run's experiment on one line), the header, one line per row. Numbers are
    /// written in full precision (Rust's shortest form that reads back to
    /// the same bits), no exponents.
    pub fn to_csv(&self, about: &str) -> String {
        let stride = match self.stride {
            1 => "every step".to_string(),
            n => format!("every {n}th step (the log keeps {MAX_ROWS} rows; steps were thinned)"),
        };
        let evaluated = if self.evaluations_thinned {
            "the steps after which the whole train and test sets were evaluated (every other such step was let go to stay within the bound)"
        } else {
            "every step after which the whole train and test sets were evaluated"
        };
        let mut out = format!(
            "# Stepscope metrics of the experiment {about}\n\
             # One row per recorded optimizer step; step = steps taken once it is done. Kept: {stride}, and {evaluated}.\n\
             # batch_loss (the step's mini-batch loss, before its update), grad_norm (before clipping), lr, clipped and the *_ms columns are that step's own. train_loss, test_loss, train_accuracy and test_accuracy are the whole sets evaluated after that step (a few times a second), empty at the other steps; accuracies only for classification. An empty cell was not measured.\n\
             # timing names where the phase times come from: cpu (each phase by the clock), gpu_timestamps (GPU timestamp queries), gpu_coarse, gpu_total, gpu_fused (the GPU's work is not split by phase: forward, backward and optimizer are empty and gpu_ms holds the step's GPU time, for gpu_coarse the submit's wall time per step). checkpoint_ms, logging_ms and wall_ms are the frame's, shared evenly by its steps.\n\
             {}\n",
            COLUMNS.join(","),
            about = about.replace(['\n', '\r'], " "),
        );
        for row in &self.rows {
            out.push_str(&line(row));
            out.push('\n');
        }
        out
    }
}

fn num<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

fn timing_name(t: Timing) -> &'static str {
    match t {
        Timing::Cpu => "cpu",
        Timing::GpuTimestamps => "gpu_timestamps",
        Timing::GpuCoarse => "gpu_coarse",
        Timing::GpuTotal => "gpu_total",
        Timing::GpuFused => "gpu_fused",
    }
}

fn line(row: &Row) -> String {
    let m = row.metrics.as_ref();
    let split = m.is_some_and(|m| matches!(m.timing, Timing::Cpu | Timing::GpuTimestamps));
    let phase = |f: fn(&StepMetrics) -> f64| num(m.filter(|_| split).map(f));
    let gpu_ms = m.and_then(|m| match m.timing {
        Timing::GpuCoarse => Some(m.phases.forward_ms),
        _ => m.gpu_ms,
    });
    let cells = [
        row.step.to_string(),
        num(m.map(|m| m.loss)),
        num(row.train.map(|e| e.loss)),
        num(row.test.map(|e| e.loss)),
        num(row.train.and_then(|e| e.accuracy)),
        num(row.test.and_then(|e| e.accuracy)),
        num(m.map(|m| m.grad_norm)),
        num(m.map(|m| m.lr)),
        num(m.map(|m| u8::from(m.clipped))),
        num(m.map(|m| m.phases.data_ms)),
        phase(|m| m.phases.forward_ms),
        phase(|m| m.phases.backward_ms),
        phase(|m| m.phases.optimizer_ms),
        phase(|m| m.phases.communication_ms),
        num(row.frame.map(|f| f.checkpoint_ms)),
        num(row.frame.map(|f| f.logging_ms)),
        num(gpu_ms),
        num(row.frame.map(|f| f.wall_ms)),
        m.map_or(String::new(), |m| timing_name(m.timing).to_string()),
    ];
    cells.join(",")
}

#[cfg(test)]
mod tests;
