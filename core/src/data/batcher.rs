//! The order in which training rows are served.
//!
//! Rows are numbered by a global counter k that runs across epochs, so a
//! micro-batch may straddle an epoch boundary. Without shuffling, row k is
//! `k mod N` in file order. With shuffling, epoch e = k / N uses its own
//! permutation, drawn from the shuffle RNG at the start of that epoch.
//! A checkpoint stores the counter, the epoch and the RNG state at the
//! start of that epoch: enough to redraw the same permutation on restore.

use serde::{Deserialize, Serialize};

use super::Table;
use crate::rng::{stream, Rng};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPosition {
    /// Rows served so far, over all epochs.
    pub rows_consumed: u64,
    /// The epoch whose permutation `epoch_rng` draws.
    pub epoch: u64,
    /// Shuffle RNG state at the start of `epoch`.
    pub epoch_rng: [u64; 4],
}

impl DataPosition {
    pub fn start(seed: u64) -> Self {
        DataPosition { rows_consumed: 0, epoch: 0, epoch_rng: Rng::new(seed, stream::SHUFFLE).state() }
    }
}

#[derive(Clone, Debug)]
pub struct Batcher {
    rows: usize,
    shuffle: bool,
    position: DataPosition,
    rng: Rng,
    permutation: Vec<u32>,
}

impl Batcher {
    pub fn new(rows: usize, shuffle: bool, position: DataPosition) -> Batcher {
        let mut rng = Rng::from_state(position.epoch_rng);
        let permutation = if shuffle { rng.permutation(rows) } else { Vec::new() };
        Batcher { rows, shuffle, position, rng, permutation }
    }

    pub fn position(&self) -> &DataPosition {
        &self.position
    }

    /// Bytes of the epoch's permutation (u32 a row, when shuffling).
    pub fn bytes(&self) -> u64 {
        4 * self.permutation.capacity() as u64
    }

    /// Index of the next row to serve, advancing the counter.
    pub fn next_row(&mut self) -> usize {
        let k = self.position.rows_consumed;
        self.position.rows_consumed += 1;
        let n = self.rows as u64;
        if !self.shuffle {
            return (k % n) as usize;
        }
        while k / n > self.position.epoch {
            self.position.epoch += 1;
            self.position.epoch_rng = self.rng.state();
            self.permutation = self.rng.permutation(self.rows);
        }
        self.permutation[(k % n) as usize] as usize
    }

    /// Fills `inputs` (B, I) and `targets` (B, T) with the next `batch` rows.
    pub fn next_batch(&mut self, inputs: &mut Vec<f32>, targets: &mut Vec<f32>, table: &Table, batch: usize) {
        inputs.clear();
        targets.clear();
        for _ in 0..batch {
            let row = self.next_row();
            table.copy_row(row, inputs, targets);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unshuffled_order_wraps_in_file_order() {
        let mut b = Batcher::new(5, false, DataPosition::start(1));
        let rows: Vec<usize> = (0..12).map(|_| b.next_row()).collect();
        assert_eq!(rows, vec![0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]);
    }

    #[test]
    fn shuffled_epochs_are_permutations_and_restore_mid_epoch() {
        let mut b = Batcher::new(7, true, DataPosition::start(3));
        let straight: Vec<usize> = (0..30).map(|_| b.next_row()).collect();
        for epoch in straight.chunks(7).filter(|c| c.len() == 7) {
            let mut e = epoch.to_vec();
            e.sort_unstable();
            assert_eq!(e, (0..7).collect::<Vec<_>>());
        }
        assert_ne!(straight[..7], straight[7..14]);
        // Restore after 7 rows (exactly at an epoch boundary) and after 10.
        for cut in [7, 10, 14] {
            let mut first = Batcher::new(7, true, DataPosition::start(3));
            for _ in 0..cut {
                first.next_row();
            }
            let mut resumed = Batcher::new(7, true, first.position().clone());
            let rest: Vec<usize> = (cut..30).map(|_| resumed.next_row()).collect();
            assert_eq!(rest, straight[cut..], "cut {cut}");
        }
    }
}
