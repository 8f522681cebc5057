//! What a loader worker makes (a Web Worker on the page, a thread
//! natively): the micro-batches of a run from any point on, each the rows
//! the training loop would serve itself, changed the same way
//! (`augment`). The loop takes a made batch only where it is the one it
//! would make next (`MadeBatch::start`), so how many loaders there are, and
//! which made what, never changes the run's bits.

use super::{Batcher, DataPosition, Table};
use crate::experiment::Experiment;

/// One micro-batch: the batcher's row counter at its first row, and its
/// rows' inputs (B × I) and targets (B × T).
#[derive(Clone, Debug, PartialEq)]
pub struct MadeBatch {
    pub start: u64,
    pub inputs: Vec<f32>,
    pub targets: Vec<f32>,
}

/// A loader's batcher: makes the batch that starts at any counter ahead
/// of the last it made.
#[derive(Clone, Debug)]
pub struct BatchMaker {
    batcher: Batcher,
    batch: usize,
}

impl BatchMaker {
    /// The maker of `e`'s micro-batches over `rows` training rows, from
    /// `position` (the run's, when the loader started).
    pub fn new(e: &Experiment, rows: usize, position: DataPosition) -> BatchMaker {
        BatchMaker { batcher: Batcher::for_run(e, rows, position), batch: e.batch_size }
    }

    /// The micro-batch whose first row is counter `start`; None where
    /// `start` is behind the last made (the maker only moves on).
    pub fn make(&mut self, start: u64, table: &Table) -> Option<MadeBatch> {
        self.batcher.skip_to(start)?;
        let (mut inputs, mut targets) = (Vec::new(), Vec::new());
        self.batcher.next_batch(&mut inputs, &mut targets, table, self.batch);
        Some(MadeBatch { start, inputs, targets })
    }
}
