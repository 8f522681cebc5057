//! The micro-batches a step serves: made here by the batcher, or taken
//! from those loader workers made ahead (`data::loader`) where they are
//! exactly the rows the batcher would serve next.

use std::collections::VecDeque;

use super::CpuEngine;
use crate::data::{Batcher, DataPosition, MadeBatch, Table};

/// Made batches held at most (a loader far ahead waits for room).
pub const MAX_FED_BATCHES: usize = 256;

/// The next micro-batch of `batch` rows into `inputs` and `targets`: the
/// one a loader made for these rows where it came (its rows and their
/// changes are the ones made here), else made here.
pub(super) fn serve_batch(
    fed: &mut VecDeque<MadeBatch>,
    batcher: &mut Batcher,
    table: &Table,
    inputs: &mut Vec<f32>,
    targets: &mut Vec<f32>,
    batch: usize,
) {
    let k = batcher.position().rows_consumed;
    while fed.front().is_some_and(|f| f.start < k) {
        fed.pop_front();
    }
    let (width, target_width) = (table.input_width, table.target_width);
    let fits =
        |f: &MadeBatch| f.start == k && f.inputs.len() == batch * width && f.targets.len() == batch * target_width;
    match fed.front().filter(|f| fits(f)) {
        Some(_) => {
            let made = fed.pop_front().expect("checked");
            inputs.clear();
            inputs.extend_from_slice(&made.inputs);
            targets.clear();
            targets.extend_from_slice(&made.targets);
            batcher.skip_to(k + batch as u64);
        }
        None => batcher.next_batch(inputs, targets, table, batch),
    }
}

impl CpuEngine {
    /// A micro-batch a loader made ahead, kept until the step that serves
    /// its rows (`serve_batch`).
    pub fn feed(&mut self, made: MadeBatch) {
        if self.fed.len() >= MAX_FED_BATCHES {
            self.fed.pop_front();
        }
        self.fed.push_back(made);
    }

    /// Where the data stands: the next micro-batch starts there.
    pub fn data_position(&self) -> &DataPosition {
        self.batcher.position()
    }

    /// The batcher's row counter: the next micro-batch starts there.
    pub fn rows_consumed(&self) -> u64 {
        self.batcher.position().rows_consumed
    }

    /// Whether a made batch for the next micro-batch is here.
    pub fn has_fed_batch(&self) -> bool {
        let k = self.rows_consumed();
        self.fed.iter().any(|f| f.start == k)
    }

    /// The next micro-batch of `batch` rows into `inputs` and `targets`
    /// (`serve_batch`).
    pub(super) fn serve_batch(&mut self, batch: usize) {
        let (inputs, targets) = (&mut self.inputs, &mut self.targets);
        serve_batch(&mut self.fed, &mut self.batcher, &self.data.train, inputs, targets, batch);
    }
}
