//! The order in which training rows are served.
//!
//! Rows are numbered by a global counter k that runs across epochs, so a
//! micro-batch may straddle an epoch boundary. Without shuffling, row k is
//! `k mod N` in file order. With shuffling, epoch e = k / N uses its own
//! permutation, drawn from the shuffle RNG at the start of that epoch.
//! A checkpoint stores the counter, the epoch and the RNG state at the
//! start of that epoch: enough to redraw the same permutation on restore.

use serde::{Deserialize, Serialize};

use super::{Augmenter, Table};
use crate::experiment::Experiment;
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
    /// Changes each training image as it is served (`data.augment`).
    augmenter: Option<Box<Augmenter>>,
}

impl Batcher {
    pub fn new(rows: usize, shuffle: bool, position: DataPosition) -> Batcher {
        let mut rng = Rng::from_state(position.epoch_rng);
        let permutation = if shuffle { rng.permutation(rows) } else { Vec::new() };
        Batcher { rows, shuffle, position, rng, permutation, augmenter: None }
    }

    /// The batcher of a run of `e` over `rows` training rows from
    /// `position`, augmenting as its data says.
    pub fn for_run(e: &Experiment, rows: usize, position: DataPosition) -> Batcher {
        let mut b = Batcher::new(rows, e.data.shuffle, position);
        b.augmenter = match (e.data.active_augment(), e.image_shape()) {
            (Some(a), Some(shape)) => Augmenter::new(a, e.seed, shape).map(Box::new),
            _ => None,
        };
        b
    }

    /// Whether it changes the images it serves.
    pub fn augments(&self) -> bool {
        self.augmenter.is_some()
    }

    pub fn position(&self) -> &DataPosition {
        &self.position
    }

    /// Bytes of the epoch's permutation (u32 a row, when shuffling).
    pub fn bytes(&self) -> u64 {
        4 * self.permutation.capacity() as u64 + self.augmenter.as_ref().map_or(0, |a| a.bytes())
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

    /// Moves on to serve row counter `k` next (a loader worker skipping the
    /// batches other workers make; the loop taking a batch made for it):
    /// the epochs passed are drawn as serving their rows would. None (and
    /// no move) where `k` is behind.
    pub fn skip_to(&mut self, k: u64) -> Option<()> {
        if k < self.position.rows_consumed {
            return None;
        }
        // As serving rows up to k − 1 would leave it (an epoch moves on at
        // the first row past its end).
        let n = self.rows as u64;
        if self.shuffle && k > self.position.rows_consumed {
            while (k - 1) / n > self.position.epoch {
                self.position.epoch += 1;
                self.position.epoch_rng = self.rng.state();
                self.permutation = self.rng.permutation(self.rows);
            }
        }
        self.position.rows_consumed = k;
        Some(())
    }

    /// Fills `inputs` (B, I) and `targets` (B, T) with the next `batch` rows.
    pub fn next_batch(&mut self, inputs: &mut Vec<f32>, targets: &mut Vec<f32>, table: &Table, batch: usize) {
        inputs.clear();
        targets.clear();
        let width = table.input_width;
        for _ in 0..batch {
            let k = self.position.rows_consumed;
            let row = self.next_row();
            table.copy_row(row, inputs, targets);
            if let Some(a) = self.augmenter.as_mut() {
                let at = inputs.len() - width;
                a.apply(&mut inputs[at..], k);
            }
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

    #[test]
    fn skipping_rows_leaves_the_position_serving_them_would() {
        for shuffle in [false, true] {
            for cut in [0u64, 3, 7, 8, 13, 14, 15, 29] {
                let mut served = Batcher::new(7, shuffle, DataPosition::start(5));
                for _ in 0..cut {
                    served.next_row();
                }
                let mut skipped = Batcher::new(7, shuffle, DataPosition::start(5));
                skipped.skip_to(cut).unwrap();
                assert_eq!(skipped.position(), served.position(), "cut {cut}");
                let (a, b): (Vec<usize>, Vec<usize>) = (0..10).map(|_| (served.next_row(), skipped.next_row())).unzip();
                assert_eq!(a, b, "cut {cut}");
                assert!(skipped.skip_to(cut).is_none(), "behind");
            }
        }
    }
}
