//! 5,000 of MNIST's handwritten digits (source, licence and checksum in
//! core/data/README.md), the `mnist` source of the experiment format: 28 × 28
//! grey images, 500 of each class.
//!
//! `core/data/mnist_5k.csv.gz` is the file a registry package ships, byte for
//! byte: no header, a row per image, its 784 pixels 0..=255 in row-major
//! order and then its label 0..=9. Natively the core embeds it (the CLI
//! trains on it with no download); in WebAssembly it is not linked in: the
//! page serves it as a static file, and the training worker fetches it on
//! first use and gives it here (`set_mnist`), checked against its digest.
//! The rows are read from the compressed bytes as they inflate, so the
//! 9 MB of text is never held whole.

use std::io::{BufRead, BufReader};

use sha2::{Digest, Sha256};

use super::Table;
use crate::error::{room, Error, Result};
pub use crate::experiment::{MNIST_CLASSES, MNIST_PIXELS, MNIST_SIDE};

/// Images in the file.
pub const MNIST_ROWS: usize = 5000;
/// The file's name beside the page, and its size and digest.
pub const MNIST_FILE: &str = "mnist_5k.csv.gz";
pub const MNIST_GZ_BYTES: usize = 1_106_785;
pub const MNIST_SHA256: &str = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d";

#[cfg(not(target_arch = "wasm32"))]
static EMBEDDED: &[u8] = include_bytes!("../../data/mnist_5k.csv.gz");

#[cfg(target_arch = "wasm32")]
static GIVEN: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();

/// The compressed file, where this module has it: natively always; in
/// WebAssembly once `set_mnist` gave it.
pub fn mnist_file() -> Option<&'static [u8]> {
    #[cfg(not(target_arch = "wasm32"))]
    return Some(EMBEDDED);
    #[cfg(target_arch = "wasm32")]
    return GIVEN.get().copied();
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Gives this module the file fetched from elsewhere, after checking that
/// it is the one documented (its size and SHA-256). Ok where it already
/// had it.
pub fn set_mnist(bytes: &'static [u8]) -> Result<()> {
    if bytes.len() != MNIST_GZ_BYTES || sha256_hex(bytes) != MNIST_SHA256 {
        return Err(Error::Csv(format!(
            "{MNIST_FILE}: {} bytes that are not the MNIST file this page serves ({MNIST_GZ_BYTES} bytes, SHA-256 {MNIST_SHA256})",
            bytes.len()
        )));
    }
    #[cfg(target_arch = "wasm32")]
    let _ = GIVEN.set(bytes);
    Ok(())
}

/// Every image in file order: inputs are the pixels scaled to [0, 1]
/// (value / 255, as torchvision's `ToTensor`), the target the class index.
pub fn mnist_table() -> Result<Table> {
    let file = mnist_file().ok_or_else(|| {
        Error::Experiment(format!(
            "MNIST is not here yet: the page fetches {MNIST_FILE} from beside it on first use, and it has not arrived"
        ))
    })?;
    read_mnist(file)
}

/// Reads the rows of the compressed CSV, each checked: 785 whole numbers,
/// pixels 0..=255 and a label 0..=9, and exactly `MNIST_ROWS` of them.
fn read_mnist(gz: &[u8]) -> Result<Table> {
    let bad = |line: usize, why: String| Error::Csv(format!("{MNIST_FILE}: line {line}: {why}"));
    let mut table = Table {
        inputs: room(MNIST_ROWS * MNIST_PIXELS, "the MNIST images")?,
        targets: room(MNIST_ROWS, "the MNIST labels")?,
        input_width: MNIST_PIXELS,
        target_width: 1,
    };
    let mut reader = BufReader::new(flate2::bufread::GzDecoder::new(gz));
    let mut line = String::with_capacity(4 * (MNIST_PIXELS + 1));
    let mut n = 0;
    loop {
        line.clear();
        // A row is at most 785 fields of 3 digits and their commas.
        let read = std::io::Read::take(&mut reader, 4 * (MNIST_PIXELS as u64 + 1) + 2)
            .read_line(&mut line)
            .map_err(|e| bad(n + 1, format!("cannot inflate: {e}")))?;
        if read == 0 {
            break;
        }
        n += 1;
        if n > MNIST_ROWS {
            return Err(bad(n, format!("more than the {MNIST_ROWS} rows expected")));
        }
        let mut fields = line.trim_end().split(',');
        for k in 0..=MNIST_PIXELS {
            let value = fields
                .next()
                .and_then(|f| f.parse::<u8>().ok())
                .ok_or_else(|| bad(n, format!("field {} is not a whole number 0..=255", k + 1)))?;
            if k < MNIST_PIXELS {
                table.inputs.push(f32::from(value) / 255.0);
            } else if usize::from(value) < MNIST_CLASSES {
                table.targets.push(f32::from(value));
            } else {
                return Err(bad(n, format!("the label is {value}, not a digit 0..=9")));
            }
        }
        if fields.next().is_some() {
            return Err(bad(n, format!("more than {} fields", MNIST_PIXELS + 1)));
        }
    }
    if n != MNIST_ROWS {
        return Err(bad(n, format!("{n} rows, not the {MNIST_ROWS} expected")));
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_the_one_documented() {
        let file = mnist_file().unwrap();
        assert_eq!((file.len(), sha256_hex(file).as_str()), (MNIST_GZ_BYTES, MNIST_SHA256));
        assert!(set_mnist(file).is_ok());
        let other: &'static [u8] = Box::leak(file[..1000].to_vec().into_boxed_slice());
        let err = set_mnist(other).unwrap_err().to_string();
        assert!(err.contains("1000 bytes that are not the MNIST file"), "{err}");
    }

    #[test]
    fn rows_classes_and_pixels_are_as_documented() {
        let table = mnist_table().unwrap();
        assert_eq!((table.rows(), table.input_width, table.target_width), (MNIST_ROWS, 784, 1));
        let mut counts = [0usize; MNIST_CLASSES];
        for &t in &table.targets {
            counts[t as usize] += 1;
        }
        assert_eq!(counts, [500; 10]);
        assert!(table.inputs.iter().all(|v| (0.0..=1.0).contains(v)));
        // The file is in class order; its first image's first ink is at
        // pixel 127 (row 4, column 15).
        assert_eq!(table.targets[0], 0.0);
        assert_eq!(table.targets[MNIST_ROWS - 1], 9.0);
        assert_eq!(table.inputs[..784].iter().position(|&v| v > 0.0), Some(127));
    }

    #[test]
    fn a_damaged_file_is_refused_naming_the_line() {
        use std::io::Write;
        let gz = |text: &str| {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(text.as_bytes()).unwrap();
            e.finish().unwrap()
        };
        let row = |label: &str| format!("{}{label}\n", "0,".repeat(784));
        let err = read_mnist(&gz(&(row("3") + &row("12")))).unwrap_err().to_string();
        assert!(err.contains("line 2: the label is 12"), "{err}");
        let err = read_mnist(&gz(&row("x"))).unwrap_err().to_string();
        assert!(err.contains("line 1: field 785 is not a whole number"), "{err}");
        let err = read_mnist(&gz(&row("1"))).unwrap_err().to_string();
        assert!(err.contains("1 rows, not the 5000 expected"), "{err}");
        let err = read_mnist(&gz(&format!("{}1\n", "0,".repeat(5000)))).unwrap_err().to_string();
        assert!(err.contains("line 1: more than 786 fields") || err.contains("line 1:"), "{err}");
        assert!(read_mnist(b"not gzip").is_err());
    }
}
