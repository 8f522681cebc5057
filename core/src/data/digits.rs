//! The 8×8 handwritten digits (UCI "Optical Recognition of Handwritten
//! Digits", as scikit-learn bundles it; source, licence and citation in
//! core/data/README.md), embedded in the binary so that the page needs no
//! fetch.
//!
//! `core/data/digits.u8` (written by scripts/fetch_digits.py): 1,797 rows
//! of 65 bytes, the 64 pixel values 0..=16 of one image in row-major order
//! (top row first, left to right), then its label 0..=9. One byte a value
//! is the smallest exact form: the file is 117 KB where the same numbers
//! as f32 would be 467 KB, and it needs no parser.

use super::Table;

/// Images in the set.
pub const DIGITS_ROWS: usize = 1797;
pub use crate::experiment::{DIGITS_CLASSES, DIGITS_PIXELS, DIGITS_SIDE};
/// The largest pixel value (a count of on pixels in a 4×4 block).
pub const DIGITS_MAX_PIXEL: u8 = 16;

const ROW_BYTES: usize = DIGITS_PIXELS + 1;

static DIGITS: &[u8] = include_bytes!("../../data/digits.u8");

/// Every image in file order: inputs are the pixels scaled to [0, 1]
/// (value / 16), the target the class index, as `cross_entropy` reads it.
pub fn digits_table() -> Table {
    let mut table = Table { input_width: DIGITS_PIXELS, target_width: 1, ..Table::default() };
    table.inputs.reserve(DIGITS_ROWS * DIGITS_PIXELS);
    table.targets.reserve(DIGITS_ROWS);
    for row in DIGITS.chunks_exact(ROW_BYTES) {
        let (pixels, label) = row.split_at(DIGITS_PIXELS);
        table.inputs.extend(pixels.iter().map(|&p| f32::from(p) / f32::from(DIGITS_MAX_PIXEL)));
        table.targets.push(f32::from(label[0]));
    }
    table
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    /// scripts/fetch_digits.py prints the same digest for the file it writes.
    const SHA256: &str = "68aea062d35a127749050fa0e52dca09d6569ac08092c925610e0954e172dde2";

    #[test]
    fn the_file_is_the_one_fetched() {
        assert_eq!(DIGITS.len(), DIGITS_ROWS * ROW_BYTES);
        let digest: String = Sha256::digest(DIGITS).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, SHA256);
    }

    #[test]
    fn rows_classes_and_pixels_are_as_documented() {
        let table = digits_table();
        assert_eq!(table.rows(), DIGITS_ROWS);
        // scikit-learn's load_digits: np.bincount(target).
        let mut counts = [0usize; DIGITS_CLASSES];
        for &t in &table.targets {
            counts[t as usize] += 1;
        }
        assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
        assert!(table.inputs.iter().all(|v| (0.0..=1.0).contains(v)));
        // The first image, a 0, as scikit-learn's digits.images[0].
        let first: Vec<u8> = table.inputs[..DIGITS_PIXELS].iter().map(|v| (v * 16.0) as u8).collect();
        assert_eq!(
            first[..16],
            [0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0],
            "the top two rows of the first image"
        );
        assert_eq!(table.targets[..10], [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
        assert_eq!(table.targets[DIGITS_ROWS - 1], 8.0);
    }
}
