//! Bytes from outside, bounded as they are read. Every file a user names
//! (an experiment, a CSV, a text, a checkpoint, a run's logs and traces,
//! an upload on the page) is read through `BoundedRead`: at most its
//! limit plus one byte is ever taken from the reader, so a device
//! (`/dev/zero`), a pipe that never ends or a file that grows while it is
//! read is refused at its limit instead of filling memory. A file's size
//! from its metadata is never trusted for that (it is 0 for devices and
//! pipes); it may only refuse a file earlier.
//!
//! The limits themselves, one per kind of input, live here or beside
//! their readers (`MAX_TEXT_BYTES` in `data::text`, `MAX_RUN_FILE_BYTES`
//! and `RunLimits` in `runs`); docs/limits.md lists them all.

use std::io::Read;

use crate::checkpoint::MAX_HEADER_BYTES;
use crate::error::{Error, Result};

pub use crate::data::MAX_TEXT_BYTES;

/// Largest experiment file: a real one is under 2 KiB (its longest field
/// is a schedule), so this only stops a file that is not one.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Largest CSV read (training rows, `predict --inputs`): five times an
/// MNIST-sized file (60,000 rows of 785 columns, 105 MB), or the most rows
/// a CSV may have (`MAX_CSV_ROWS`, a million) of about 50 numbers. The
/// run's memory budget then checks the table it makes.
pub const MAX_CSV_BYTES: u64 = 512 << 20;
/// Tensors a checkpoint holds per parameter at most: the parameter and
/// Adam's two moments (SGD with momentum keeps one).
const CHECKPOINT_TENSORS: u64 = 3;
/// Largest checkpoint any valid experiment can write: the largest model
/// (`MAX_GPT_PARAMETERS`) with Adam's moments, in f32, and the largest
/// header. Where a memory budget applies, `checkpoint_limit` is smaller.
pub const MAX_CHECKPOINT_BYTES: u64 =
    8 + MAX_HEADER_BYTES + CHECKPOINT_TENSORS * 4 * crate::validate::MAX_GPT_PARAMETERS;

/// Bytes read between looks at whoever reads (Ctrl-C, progress): a part
/// takes a few ms from a disk's cache.
pub const READ_PART_BYTES: u64 = 4 << 20;

/// The largest checkpoint a run within `memory_bytes` can have: its
/// tensors are parameters and optimizer state, which the run holds, so
/// they fit in its budget; the header comes on top.
pub fn checkpoint_limit(memory_bytes: u64) -> u64 {
    MAX_CHECKPOINT_BYTES.min(memory_bytes.saturating_add(8 + MAX_HEADER_BYTES))
}

/// `bytes` as people write sizes: "256 MiB", "1 GiB", else the bytes
/// (and MiB, to one place, from 1 MiB up).
pub fn size_words(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 20 => format!("{b} bytes ({:.1} MiB)", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// One file read in parts, never more than its limit plus one byte.
pub struct BoundedRead<R: Read> {
    reader: std::io::Take<R>,
    limit: u64,
    name: String,
    /// What a refusal says after the name; by default the limit.
    refusal: String,
    bytes: Vec<u8>,
    done: bool,
}

impl<R: Read> BoundedRead<R> {
    /// Reads `reader` (named `name` in messages) up to `limit` bytes.
    pub fn new(reader: R, limit: u64, name: impl Into<String>) -> BoundedRead<R> {
        BoundedRead {
            reader: reader.take(limit.saturating_add(1)),
            limit,
            name: name.into(),
            refusal: format!("larger than {}, the most read: refused", size_words(limit)),
            bytes: Vec::new(),
            done: false,
        }
    }

    /// What a refusal says instead of the limit (a limit shared by several
    /// files, say).
    pub fn refused_as(mut self, why: impl Into<String>) -> BoundedRead<R> {
        self.refusal = why.into();
        self
    }

    /// Reads the next part (`READ_PART_BYTES`); true when the whole file is
    /// read. Past the limit, an error naming the file and the limit.
    pub fn advance(&mut self) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let name = &self.name;
        let read = (&mut self.reader)
            .take(READ_PART_BYTES)
            .read_to_end(&mut self.bytes)
            .map_err(|e| Error::Io(format!("cannot read {name}: {e}")))?;
        if self.bytes.len() as u64 > self.limit {
            self.bytes = Vec::new();
            return Err(Error::Other(format!("{name} is {}", self.refusal)));
        }
        // A short part is the end (a full one may be followed by nothing).
        self.done = (read as u64) < READ_PART_BYTES;
        Ok(self.done)
    }

    /// The bytes read so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The whole file (call once `advance` said true).
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}

/// Reads all of `reader`, at most `limit` bytes: larger is refused with
/// one line naming `name` and the limit.
pub fn read_bounded<R: Read>(reader: R, limit: u64, name: &str) -> Result<Vec<u8>> {
    let mut read = BoundedRead::new(reader, limit, name);
    while !read.advance()? {}
    Ok(read.finish())
}

/// Fails when a file said to be `size` bytes (a Blob's size on the page,
/// a regular file's metadata) is past `limit`, before it is read; the bytes
/// read are held to the limit all the same.
pub fn check_size(size: u64, limit: u64, name: &str) -> Result<()> {
    if size > limit {
        return Err(Error::Other(format!(
            "{name} is {size} bytes, larger than {}, the most read: refused",
            size_words(limit)
        )));
    }
    Ok(())
}

/// Fails early on bytes that cannot start a checkpoint (a safetensors
/// file): an 8-byte header length past `MAX_HEADER_BYTES`, or a header that
/// is not a JSON object. Fewer than 9 bytes pass (the loader names them),
/// so that reading `/dev/zero` as a checkpoint stops at its first part.
pub fn check_checkpoint_start(bytes: &[u8]) -> Result<()> {
    let Some(length) = bytes.get(..8) else { return Ok(()) };
    let header_len = u64::from_le_bytes(length.try_into().expect("8 bytes"));
    if header_len > MAX_HEADER_BYTES {
        return Err(Error::Checkpoint(format!(
            "header claims {header_len} bytes, more than the {MAX_HEADER_BYTES}-byte limit (not a checkpoint, or corrupt)"
        )));
    }
    match bytes.get(8) {
        Some(b'{') | None => Ok(()),
        Some(_) => Err(Error::Checkpoint("not a safetensors file: the header is not a JSON object".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that never ends, as `/dev/zero` or a pipe written forever.
    fn endless() -> impl Read {
        std::io::repeat(b'a')
    }

    #[test]
    fn an_endless_reader_is_refused_at_its_limit_plus_one_byte() {
        let err = read_bounded(endless(), 1000, "`zeros`").unwrap_err().to_string();
        assert!(err.contains("`zeros` is larger than 1000 bytes, the most read"), "{err}");
        // Only limit + 1 bytes are taken, whatever the part size.
        let mut read = BoundedRead::new(endless(), 10, "x");
        assert!(read.advance().is_err());
        let mut counted = std::io::repeat(0).take(100);
        let _ = read_bounded(&mut counted, 10, "y");
        assert_eq!(counted.limit(), 100 - 11);
    }

    #[test]
    fn a_file_at_its_limit_is_read_whole_in_parts() {
        let data = vec![7u8; 2 * READ_PART_BYTES as usize + 5];
        let mut read = BoundedRead::new(&data[..], data.len() as u64, "f");
        let mut parts = 0;
        while !read.advance().unwrap() {
            parts += 1;
        }
        assert_eq!(parts, 2);
        assert_eq!(read.finish(), data);
        assert_eq!(read_bounded(&b""[..], 0, "empty").unwrap(), b"");
        assert!(read_bounded(&b"x"[..], 0, "one byte").is_err());
    }

    #[test]
    fn a_refusal_can_name_another_limit() {
        let read = BoundedRead::new(endless(), 4, "`b`").refused_as("past what is left of the total");
        let err = read_bounded_with(read).unwrap_err().to_string();
        assert_eq!(err, "`b` is past what is left of the total");
    }

    fn read_bounded_with<R: Read>(mut read: BoundedRead<R>) -> Result<Vec<u8>> {
        while !read.advance()? {}
        Ok(read.finish())
    }

    #[test]
    fn sizes_are_checked_before_reading() {
        assert!(check_size(MAX_CSV_BYTES, MAX_CSV_BYTES, "a.csv").is_ok());
        let err = check_size(MAX_CSV_BYTES + 1, MAX_CSV_BYTES, "`a.csv`").unwrap_err().to_string();
        assert!(err.contains("`a.csv` is 536870913 bytes, larger than 512 MiB"), "{err}");
    }

    #[test]
    fn what_cannot_start_a_checkpoint_is_refused_from_its_first_bytes() {
        assert!(check_checkpoint_start(&[0; 9]).unwrap_err().to_string().contains("not a JSON object"));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.push(b'{');
        assert!(check_checkpoint_start(&huge).unwrap_err().to_string().contains("more than the"));
        let mut good = 2u64.to_le_bytes().to_vec();
        good.extend_from_slice(b"{}");
        assert!(check_checkpoint_start(&good).is_ok());
        assert!(check_checkpoint_start(&[0; 8]).is_ok(), "too short to tell: the loader names it");
    }

    #[test]
    fn a_budget_bounds_the_checkpoints_it_reads() {
        assert_eq!(checkpoint_limit(1 << 20), (1 << 20) + 8 + MAX_HEADER_BYTES);
        assert_eq!(checkpoint_limit(u64::MAX), MAX_CHECKPOINT_BYTES);
        assert_eq!(size_words(256 << 20), "256 MiB");
        assert_eq!(size_words(1 << 30), "1 GiB");
        assert_eq!(size_words(1000), "1000 bytes");
        assert_eq!(size_words(checkpoint_limit(2048 << 20)), "2164260872 bytes (2064.0 MiB)");
    }
}
