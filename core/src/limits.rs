//! Limits per run, not only per field: how large a network a place accepts
//! (the page's are tighter than the engines'), and one memory budget for
//! everything a run holds at its peak, computed from the same formulas as
//! the engines' buffers (`MemoryBytes`). The page passes every experiment
//! it meets (a link, a control, an upload, a restored checkpoint) through
//! `Limits::check` with its limits, the CLI with its own, so a link can
//! never build what the controls would refuse.

mod bytes;

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::experiment::{Experiment, MAX_BLOCKS, MAX_CONTEXT, MAX_EMBED, MAX_LAYERS, MAX_UNITS};

pub use crate::engine::EVAL_CHUNK_ROWS;
pub use bytes::RunBytes;

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

    /// `check` with the data as read (`RunBytes::of_data`: its rows and
    /// the file's bytes held while they were parsed).
    pub fn check_data(&self, e: &Experiment, data: &Dataset) -> Result<RunBytes> {
        self.check(e, None)?;
        self.within_budget(RunBytes::of_data(e, data))
    }

    /// The run's peak bytes against the memory budget.
    fn check_memory(&self, e: &Experiment, rows: Option<(usize, usize)>) -> Result<RunBytes> {
        self.within_budget(RunBytes::of(e, rows))
    }

    fn within_budget(&self, bytes: RunBytes) -> Result<RunBytes> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{CpuEngine, MemoryBytes};

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

    /// What a CSV or text run holds besides the engine's training buffers,
    /// counted from the buffers themselves: the tables' and the engine's
    /// vectors (their capacities), the file's bytes and the split's copy.
    #[test]
    fn the_run_bytes_are_what_the_data_and_the_engine_hold() {
        let table_bytes = |t: &crate::data::Table| 4 * (t.inputs.capacity() + t.targets.capacity()) as u64;
        // A CSV of 1,000 rows, three columns, a quarter held out.
        let mut csv = String::from("x1,x2,y\n");
        for i in 0..1000 {
            csv.push_str(&format!("{}.25,-{}.5,{}\n", i % 7, i % 3, i % 2));
        }
        let e = Experiment::from_json(
            r#"{"seed": 3, "model": {"inputs": 2, "layers": [{"units": 5, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
                "loss": "bce_with_logits", "optimizer": {"kind": "adamw"}, "batch_size": 16,
                "data": {"source": "csv", "train_fraction": 0.75}}"#,
        )
        .unwrap();
        let table = crate::data::read_csv(&csv).unwrap();
        assert_eq!(table.file_bytes, csv.len() as u64);
        let data = Dataset::from_csv(&e, table).unwrap();
        let bytes = RunBytes::of_data(&e, &data);
        assert_eq!((data.train.rows(), data.test.rows()), (750, 250));
        assert_eq!(bytes.data, table_bytes(&data.train) + table_bytes(&data.test));
        // The file and one line number a row, or the test rows' copy and
        // the split's order (12 bytes a row).
        assert_eq!(bytes.loading, (csv.len() as u64 + 8 * 1000).max(table_bytes(&data.test) + 12 * 1000));
        let engine = CpuEngine::new(&e, data).unwrap();
        // The engine holds one permutation; a new epoch's is drawn beside it.
        assert_eq!(bytes.engine, engine.other_bytes() + 4 * 750);
        assert_eq!(bytes.training, engine.memory());

        // A text of 20,000 characters in windows of 16, 10 % held out.
        let text: String = (0..20_000).map(|i| (b'a' + (i * 7 % 13) as u8) as char).collect();
        let e = Experiment::from_json(
            r#"{"seed": 3, "model": {"kind": "gpt", "vocab_size": 13, "context": 16, "embed": 8, "heads": 2, "blocks": 1},
                "loss": "cross_entropy", "optimizer": {"kind": "adamw"}, "batch_size": 4,
                "data": {"source": "text", "train_fraction": 0.9}}"#,
        )
        .unwrap();
        let data = Dataset::from_text(&e, std::borrow::Cow::Owned(text.clone().into_bytes())).unwrap();
        let bytes = RunBytes::of_data(&e, &data);
        let windows = (20_000 - 1) / 16;
        assert_eq!(data.train.rows() + data.test.rows(), windows);
        assert_eq!(bytes.data, table_bytes(&data.train) + table_bytes(&data.test));
        assert_eq!(bytes.loading, 20_000u64.max(table_bytes(&data.test) + 12 * windows as u64));
        let mut engine = CpuEngine::new(&e, data).unwrap();
        assert_eq!(bytes.engine, engine.other_bytes() + 4 * engine.data().train.rows() as u64);
        // The transformer's buffers are allocated before its first step
        // and do not grow in it.
        assert_eq!(bytes.training, engine.memory());
        engine.step().unwrap();
        assert_eq!(bytes.training, engine.memory());
        assert_eq!(bytes.engine, engine.other_bytes() + 4 * engine.data().train.rows() as u64);
    }

    #[test]
    fn limits_refuse_with_the_figures() {
        let hidden = |n: usize, units: usize| {
            let layer = format!(r#"{{"units": {units}, "activation": "tanh"}}, "#);
            format!(r#"{}{{"units": 1, "activation": "linear"}}"#, layer.repeat(n))
        };
        let page = Limits::PAGE;
        // The largest network the page builds, with AdamW: 15.7 M
        // parameters, 240 MiB with gradients and moments, 300 with the last
        // update, and a checkpoint's three copies of the parameters and
        // moments (540 MiB) while one is written: within the page's 1 GiB.
        let largest = page.check(&experiment(&hidden(16, 1024), 32, r#"{"kind": "adamw"}"#), None).unwrap();
        assert!((800 << 20..page.memory_bytes).contains(&largest.total()), "{}", largest.describe());
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
        // Data rows count once known: each row's inputs and target, and
        // its point (three f64) for the plots.
        let e = experiment(&hidden(1, 8), 32, r#"{"kind": "adamw"}"#);
        let small = Limits::native(1).check(&e, None).unwrap();
        let big = Limits::native(4096).check(&e, Some((1_000_000, 0))).unwrap();
        assert_eq!(big.data - small.data, (1_000_000 - 100) * (4 * 3 + 24));
        assert!(big.total() > small.total() + big.data - small.data);
    }
}
