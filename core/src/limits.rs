//! Limits per run, not only per field: how large a network a place accepts
//! (the page's are tighter than the engines'), and one memory budget for
//! everything a run holds at its peak, computed from the same formulas as
//! the engines' buffers (`MemoryBytes`). The page passes every experiment
//! it meets (a link, a control, an upload, a restored checkpoint) through
//! `Limits::check` with its limits, the CLI with its own, so a link can
//! never build what the controls would refuse.

use crate::data::DIGITS_ROWS;
use crate::engine::MemoryBytes;
use crate::error::{Error, Result};
use crate::experiment::{DataSource, Experiment, MAX_BATCH, MAX_BLOCKS, MAX_CONTEXT, MAX_EMBED, MAX_LAYERS, MAX_UNITS};
use crate::model::Layout;

/// Rows evaluated at once: evaluation and prediction work in chunks of
/// this many rows, so their memory does not grow with the table.
pub const EVAL_CHUNK_ROWS: usize = 4096;

const MIB: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Hidden layers (all but the output layer).
    pub hidden_layers: usize,
    /// Units of each hidden layer.
    pub hidden_units: usize,
    /// Bytes a run may hold at its peak (`RunBytes::total`).
    pub memory_bytes: u64,
    /// The transformer's blocks, width and context, at most.
    pub gpt_blocks: usize,
    pub gpt_embed: usize,
    pub gpt_context: usize,
}

impl Limits {
    /// The page's: what its controls offer (16 hidden layers of 1,024
    /// units), and 1 GiB. The engine runs in a worker and steps in parts,
    /// so a large network trains slowly but never freezes the page.
    /// A transformer of at most 12 blocks of width 512 over 512 tokens
    /// (nanoGPT's 10.65 M "shakespeare-char" model, 6 blocks of 384 over
    /// 256, fits): it trains slowly on the CPU engine, but in the worker
    /// and in parts, never freezing the page.
    pub const PAGE: Limits = Limits {
        hidden_layers: 16,
        hidden_units: 1024,
        memory_bytes: 1 << 30,
        gpt_blocks: 12,
        gpt_embed: 512,
        gpt_context: 512,
    };

    /// The engines' own field limits, with a memory budget in MiB.
    pub fn native(budget_mib: u64) -> Limits {
        Limits {
            hidden_layers: MAX_LAYERS - 1,
            hidden_units: MAX_UNITS,
            memory_bytes: budget_mib.saturating_mul(MIB),
            gpt_blocks: MAX_BLOCKS,
            gpt_embed: MAX_EMBED,
            gpt_context: MAX_CONTEXT,
        }
    }

    /// Checks `e` (already valid field by field) against these limits:
    /// `rows` is (train rows, test rows) where the data is known; built-in
    /// data is sized from the experiment. Returns the run's bytes.
    pub fn check(&self, e: &Experiment, rows: Option<(usize, usize)>) -> Result<RunBytes> {
        if let Some(gpt) = e.gpt() {
            let here = if *self == Limits::PAGE { "on this page" } else { "here" };
            for (field, value, most) in [
                ("model.blocks", gpt.blocks, self.gpt_blocks),
                ("model.embed", gpt.embed, self.gpt_embed),
                ("model.context", gpt.context, self.gpt_context),
            ] {
                if value > most {
                    return refuse(format!("{field} is {value}, more than the {most} allowed {here}"));
                }
            }
            return self.check_memory(e, rows);
        }
        let hidden = &e.model.layers[..e.model.layers.len().saturating_sub(1)];
        if hidden.len() > self.hidden_layers {
            return refuse(format!(
                "{} hidden layers, more than the {} allowed here",
                hidden.len(),
                self.hidden_layers
            ));
        }
        if let Some((i, layer)) = hidden.iter().enumerate().find(|(_, l)| l.units > self.hidden_units) {
            return refuse(format!(
                "hidden layer {} has {} units, more than the {} allowed here",
                i + 1,
                layer.units,
                self.hidden_units
            ));
        }
        self.check_memory(e, rows)
    }

    /// The run's peak bytes against the memory budget.
    fn check_memory(&self, e: &Experiment, rows: Option<(usize, usize)>) -> Result<RunBytes> {
        let bytes = RunBytes::of(e, rows);
        if bytes.total() > self.memory_bytes {
            return refuse(format!(
                "the run needs {} at its peak ({}), more than the {} budget{}",
                mib(bytes.total()),
                bytes.describe(),
                mib(self.memory_bytes),
                if *self == Limits::PAGE { " of this page" } else { " (--memory-budget)" }
            ));
        }
        Ok(bytes)
    }
}

fn refuse<T>(why: String) -> Result<T> {
    Err(Error::Experiment(why))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// What a run holds at its peak: the training buffers during backward, the
/// data tables, and one evaluation chunk's activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunBytes {
    pub training: MemoryBytes,
    pub data: u64,
    pub evaluation: u64,
}

impl RunBytes {
    pub fn of(e: &Experiment, rows: Option<(usize, usize)>) -> RunBytes {
        let (train, test) = rows.unwrap_or_else(|| match e.data.source {
            DataSource::Csv | DataSource::Text => (0, 0),
            DataSource::Shakespeare => (crate::data::SHAKESPEARE.len() / e.gpt().map_or(1, |g| g.context.max(1)), 0),
            DataSource::Digits => (DIGITS_ROWS, 0),
            _ => (e.data.samples(), 0),
        });
        if let Some(gpt) = e.gpt() {
            // Rows are windows: T ids in, T out. Evaluation runs forward
            // over a batch of windows at a time, keeping one block's
            // activations and each block's output (`Evaluator`).
            let windows = crate::engine::gpt_eval_windows(gpt.context);
            let (acts, att, _) = crate::model::gpt::memory_floats(&gpt.shape(), windows, true);
            return RunBytes {
                training: MemoryBytes::estimate(e, false),
                data: (train + test) as u64 * 2 * 4 * gpt.context as u64,
                evaluation: 4 * (acts as u64 + att as u64),
            };
        }
        let row_bytes = 4 * (e.model.inputs + e.outputs()) as u64;
        let units: u64 = e.model.layers.iter().map(|l| l.units as u64).sum();
        let chunk = train.max(test).min(EVAL_CHUNK_ROWS) as u64;
        RunBytes {
            training: MemoryBytes::estimate(e, false),
            data: (train + test) as u64 * row_bytes,
            evaluation: 2 * 4 * chunk * units,
        }
    }

    pub fn total(&self) -> u64 {
        self.training.peak_backward() + self.data + self.evaluation
    }

    /// The parts, for messages.
    pub fn describe(&self) -> String {
        let t = &self.training;
        format!(
            "parameters {}, gradients {}, optimizer state {}, activations {}{}, backward {}, data {}, evaluation {}",
            mib(t.params),
            mib(t.grads),
            mib(t.optimizer),
            mib(t.activations),
            if t.attention > 0 { format!(", attention probabilities {}", mib(t.attention)) } else { String::new() },
            mib(t.backward_scratch),
            mib(self.data),
            mib(self.evaluation)
        )
    }
}

impl MemoryBytes {
    /// The bytes an engine's training buffers take for `e`, from the
    /// experiment alone (what `CpuEngine::memory` reports once built).
    pub fn estimate(e: &Experiment, checkpointing: bool) -> MemoryBytes {
        let p = Layout::new(e).parameter_count as u64;
        if let Some(gpt) = e.gpt() {
            let (acts, att, scratch) =
                crate::model::gpt::memory_floats(&gpt.shape(), e.batch_size.min(MAX_BATCH), checkpointing);
            return MemoryBytes {
                params: 4 * p,
                grads: 4 * p,
                optimizer: 4 * p * e.optimizer.state_copies() as u64,
                activations: 4 * acts as u64,
                attention: 4 * att as u64,
                backward_scratch: 4 * scratch as u64,
            };
        }
        let batch = e.batch_size.min(MAX_BATCH) as u64;
        let units: u64 = e.model.layers.iter().map(|l| l.units as u64).sum();
        let widest = e.model.layers.iter().map(|l| l.units as u64).max().unwrap_or(0);
        MemoryBytes {
            params: 4 * p,
            grads: 4 * p,
            optimizer: 4 * p * e.optimizer.state_copies() as u64,
            activations: match checkpointing {
                false => 2 * 4 * batch * units,
                true => 4 * batch * (units + widest),
            },
            backward_scratch: 4 * batch * units,
            attention: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;
    use crate::engine::CpuEngine;

    fn experiment(layers: &str, batch: usize, optimizer: &str) -> Experiment {
        Experiment::from_json(&format!(
            r#"{{"seed": 1, "model": {{"inputs": 2, "layers": [{layers}]}}, "loss": "bce_with_logits",
                "optimizer": {optimizer}, "batch_size": {batch}, "data": {{"source": "spiral", "samples": 100}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_estimate_is_what_the_engine_holds() {
        for (layers, batch, optimizer) in [
            (
                r#"{"units": 16, "activation": "tanh"}, {"units": 1, "activation": "linear"}"#,
                32,
                r#"{"kind": "adamw"}"#,
            ),
            (
                r#"{"units": 7, "activation": "relu"}, {"units": 33, "activation": "tanh"}, {"units": 1, "activation": "linear"}"#,
                5,
                r#"{"kind": "sgd", "lr": 0.1, "momentum": 0.9}"#,
            ),
            (r#"{"units": 1, "activation": "linear"}"#, 64, r#"{"kind": "sgd", "lr": 0.1}"#),
        ] {
            let e = experiment(layers, batch, optimizer);
            let mut engine = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
            assert_eq!(MemoryBytes::estimate(&e, false), engine.memory(), "{layers}");
            engine.set_activation_checkpointing(true).unwrap();
            assert_eq!(MemoryBytes::estimate(&e, true), engine.memory(), "{layers} checkpointing");
        }
    }

    #[test]
    fn limits_refuse_with_the_figures() {
        let hidden = |n: usize, units: usize| {
            let layer = format!(r#"{{"units": {units}, "activation": "tanh"}}, "#);
            format!(r#"{}{{"units": 1, "activation": "linear"}}"#, layer.repeat(n))
        };
        let page = Limits::PAGE;
        // The largest network the page builds, with AdamW: 15.7 M
        // parameters, 240 MiB with gradients and moments.
        let largest = page.check(&experiment(&hidden(16, 1024), 32, r#"{"kind": "adamw"}"#), None).unwrap();
        assert!(largest.total() < 300 << 20, "{}", largest.describe());
        let mut deeper = experiment(&hidden(16, 8), 32, r#"{"kind": "adamw"}"#);
        deeper.model.layers.insert(0, deeper.model.layers[0].clone());
        let msg = page.check(&deeper, None).unwrap_err().to_string();
        assert!(msg.contains("17 hidden layers, more than the 16 allowed here"), "{msg}");
        let msg = page.check(&experiment(&hidden(2, 1025), 32, r#"{"kind": "adamw"}"#), None).unwrap_err().to_string();
        assert!(msg.contains("hidden layer 1 has 1025 units, more than the 1024 allowed here"), "{msg}");
        // Within the field limits but past the page's memory budget: the
        // largest network at a batch of 65,536 needs 16 GiB of activations.
        let msg =
            page.check(&experiment(&hidden(16, 1024), 65_536, r#"{"kind": "adamw"}"#), None).unwrap_err().to_string();
        assert!(msg.contains("more than the 1024.0 MiB budget of this page"), "{msg}");
        // Memory: 15 hidden layers of 4096 units with Adam hold 3.5 GiB of
        // parameters, gradients and moments, and at batch 65,536 another
        // 46 GiB of activations and backward buffers.
        let huge = experiment(&hidden(15, 4096), 65_536, r#"{"kind": "adam"}"#);
        let msg = Limits::native(4096).check(&huge, None).unwrap_err().to_string();
        assert!(
            msg.contains("the run needs") && msg.contains("more than the 4096.0 MiB budget (--memory-budget)"),
            "{msg}"
        );
        assert!(
            msg.contains(
                "parameters 896.3 MiB, gradients 896.3 MiB, optimizer state 1792.6 MiB, activations 30720.5 MiB"
            ),
            "{msg}"
        );
        assert!(Limits::native(1 << 30).check(&huge, None).is_ok());
        // Data rows count once known.
        let e = experiment(&hidden(1, 8), 32, r#"{"kind": "adamw"}"#);
        let small = Limits::native(1).check(&e, None).unwrap().total();
        let big = Limits::native(4096).check(&e, Some((1_000_000, 0))).unwrap().total();
        assert_eq!(big - small, (1_000_000 - 100) * 4 * 3 + 2 * 4 * (4096 - 100) * 9);
    }
}
