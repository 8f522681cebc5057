//! What a run holds at its peak (`RunBytes`), and what an engine's
//! training buffers take (`MemoryBytes::estimate`), from the experiment and
//! its data alone: the figures `Limits` holds to its budget, from the same
//! formulas as the engines' buffers.

use super::mib;
use crate::data::{Dataset, DIGITS_ROWS, MNIST_ROWS};
use crate::engine::{MemoryBytes, EVAL_CHUNK_ROWS};
use crate::experiment::{DataSource, Experiment, MAX_BATCH};
use crate::model::Layout;

/// What a run holds at its peak, in bytes. The parameters, the optimizer's
/// state and the data tables are held throughout; the rest in one of two
/// phases that never overlap: reading the data (`loading`), or training
/// (gradients, activations, backward's buffers, the engine's other
/// buffers and one evaluation chunk's activations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunBytes {
    pub training: MemoryBytes,
    /// The engine's buffers besides `training`: the last update (4·P), a
    /// micro-batch's rows (and the transformer's token ids), the shuffle's
    /// permutation (two while a new epoch's is drawn), a sharded run's
    /// shard gradients (4·P·S).
    pub engine: u64,
    /// The train and test tables (and a built-in's points).
    pub data: u64,
    /// Held only while the data is read: the file's bytes (and a CSV's
    /// line numbers), then the split's copy of the test rows and its row
    /// order.
    pub loading: u64,
    pub evaluation: u64,
    /// Writing a checkpoint (`save_checkpoint`): a copy of the state read
    /// from the engine, each tensor's bytes, then the file's bytes, three
    /// copies of the parameters and the optimizer's state at most.
    pub checkpoint: u64,
}

impl RunBytes {
    /// The run's bytes, the file's unknown (0): `rows` is (train rows, test
    /// rows) where the data is known; built-in data is sized from the
    /// experiment.
    pub fn of(e: &Experiment, rows: Option<(usize, usize)>) -> RunBytes {
        RunBytes::with_file(e, rows, 0)
    }

    /// The run's bytes on `data` as read, its file included.
    pub fn of_data(e: &Experiment, data: &Dataset) -> RunBytes {
        RunBytes::with_file(e, Some((data.train.rows(), data.test.rows())), data.file_bytes)
    }

    fn with_file(e: &Experiment, rows: Option<(usize, usize)>, file_bytes: u64) -> RunBytes {
        let source = e.data.source;
        let (train, test) = rows.unwrap_or_else(|| match source {
            DataSource::Csv | DataSource::Text => (0, 0),
            DataSource::Shakespeare => (crate::data::SHAKESPEARE_BYTES / e.gpt().map_or(1, |g| g.context.max(1)), 0),
            DataSource::Digits => (DIGITS_ROWS, 0),
            DataSource::Mnist => (MNIST_ROWS, 0),
            _ => (e.data.samples(), 0),
        });
        let (train, test, n) = (train as u64, test as u64, (train + test) as u64);
        let training = MemoryBytes::estimate(e, false);
        let batch = e.batch_size.min(MAX_BATCH) as u64;
        // A sharded run's S shard gradients (its ranks' activations, R ×
        // B/S rows with R ≤ S, stay within the batch's counted above).
        let shard_grads = if e.shards > 1 {
            // …and the other ranks' buffers for a shard's rows, at most
            // shards − 1 of them.
            let own = training.activations + training.attention + training.backward_scratch;
            training.params.saturating_mul(e.shards as u64) + own.saturating_mul(e.shards as u64 - 1)
        } else {
            0
        };
        // Two permutations of u32 while a new epoch's is drawn.
        let permutation = if e.data.shuffle { 2 * 4 * train } else { 0 };
        // `split_rows`: a permutation of u32 collected into indices.
        let order = if e.data.train_fraction.is_some() { 12 * n } else { 0 };
        if let Some(gpt) = e.gpt() {
            // Rows are windows: T ids in, T out, as f32. Evaluation runs
            // forward over a batch of windows at a time, keeping one
            // block's activations and each block's output (`Evaluator`).
            let t = gpt.context as u64;
            let row = 2 * 4 * t;
            let windows = crate::engine::gpt_eval_windows(gpt.context) as u64;
            let (acts, att, _) = crate::model::gpt::memory_floats(&gpt.shape(), windows as usize, true);
            return RunBytes {
                training,
                // The rows as f32 and as token ids (u32).
                engine: training.params + 2 * batch * row + permutation + shard_grads,
                data: n * row,
                loading: file_bytes.max(test * row + order),
                evaluation: 4 * (acts as u64 + att as u64) + windows * row,
                checkpoint: 3 * (training.params + training.optimizer),
            };
        }
        let row = 4 * (e.model.inputs + e.outputs()) as u64;
        // Every layer's outputs, a conv or pool layer's C·H·W.
        let units: u64 = e.widths()[1..].iter().map(|&w| w as u64).sum();
        let chunk = train.max(test).min(EVAL_CHUNK_ROWS as u64);
        let (data, loading) = match source {
            // The file and its line numbers, then the test rows' copy.
            DataSource::Csv => (n * row, (file_bytes + 8 * n).max(test * row + order)),
            // The whole table, then each part copied from it.
            DataSource::Digits | DataSource::Mnist => (n * row, n * row + order),
            // Each point (three f64) is kept beside its row, for plots.
            _ => (n * (row + 24), 24 * n + order),
        };
        RunBytes {
            training,
            engine: training.params + batch * row + permutation + shard_grads,
            data,
            loading,
            evaluation: 2 * 4 * chunk * units,
            checkpoint: 3 * (training.params + training.optimizer),
        }
    }

    /// The peak: what is held throughout, and the larger of the two phases
    /// (in training, an evaluation and a checkpoint come one at a time).
    pub fn total(&self) -> u64 {
        let t = &self.training;
        let step = t.grads + t.activations + t.attention + t.backward_scratch + self.engine;
        let training = step + self.evaluation.max(self.checkpoint);
        t.params + t.optimizer + self.data + self.loading.max(training)
    }

    /// The parts, for messages.
    pub fn describe(&self) -> String {
        let t = &self.training;
        format!(
            "parameters {}, gradients {}, optimizer state {}, activations {}{}, backward {}, engine {}, data {}, reading the data {}, evaluation {}, checkpoint {}",
            mib(t.params),
            mib(t.grads),
            mib(t.optimizer),
            mib(t.activations),
            if t.attention > 0 { format!(", attention probabilities {}", mib(t.attention)) } else { String::new() },
            mib(t.backward_scratch),
            mib(self.engine),
            mib(self.data),
            mib(self.loading),
            mib(self.evaluation),
            mib(self.checkpoint)
        )
    }
}

impl MemoryBytes {
    /// The bytes an engine's training buffers take for `e`, from the
    /// experiment alone (what `CpuEngine::memory` reports once built).
    ///
    /// A sharded run's engine keeps one shard's rows (B/shards) in its
    /// activations and backward buffers: each rank computes a shard at a
    /// time (`RunBytes` adds the other ranks' own).
    pub fn estimate(e: &Experiment, checkpointing: bool) -> MemoryBytes {
        let p = Layout::new(e).parameter_count as u64;
        let rows = e.batch_size.min(MAX_BATCH) / e.shards.max(1);
        if let Some(gpt) = e.gpt() {
            let (acts, att, scratch) = crate::model::gpt::memory_floats(&gpt.shape(), rows, checkpointing);
            return MemoryBytes {
                params: 4 * p,
                grads: 4 * p,
                optimizer: 4 * p * e.optimizer.state_copies() as u64,
                activations: 4 * acts as u64,
                attention: 4 * att as u64,
                backward_scratch: 4 * scratch as u64,
            };
        }
        let batch = rows as u64;
        let layout = Layout::new(e);
        let units: u64 = layout.layers.iter().map(|l| l.units as u64).sum();
        let widest = layout.layers.iter().map(|l| l.units as u64).max().unwrap_or(0);
        // Max pooling keeps its choice per output; the conv layers share
        // one patch-matrix scratch.
        let choices: u64 = layout
            .layers
            .iter()
            .filter(|l| matches!(l.op, crate::model::LayerOp::MaxPool(_)))
            .map(|l| l.units as u64)
            .sum();
        let conv_scratch = crate::engine::conv_scratch_floats(&layout) as u64;
        MemoryBytes {
            params: 4 * p,
            grads: 4 * p,
            optimizer: 4 * p * e.optimizer.state_copies() as u64,
            activations: 4 * batch * choices
                + match checkpointing {
                    false => 2 * 4 * batch * units,
                    true => 4 * batch * (units + widest),
                },
            backward_scratch: 4 * batch * units + 4 * conv_scratch,
            attention: 0,
        }
    }
}
