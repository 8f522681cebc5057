//! The one error type of the core. Every message names what is wrong, so a
//! user can fix a config, CSV or checkpoint without reading the code.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Error {
    /// The experiment JSON could not be parsed, or a field has a bad value.
    #[error("experiment: {0}")]
    Experiment(String),
    /// A CSV file is malformed; the message names the line and column.
    #[error("csv: {0}")]
    Csv(String),
    /// A text for the GPT is not usable (not UTF-8, too short, too many
    /// distinct characters); the message says which.
    #[error("text: {0}")]
    Text(String),
    /// A checkpoint or weights file was refused; nothing was loaded.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    /// Training produced a NaN or Inf.
    #[error("non-finite value: {0}")]
    NonFinite(String),
    /// A GPU (wgpu) error: validation, out of memory, device loss.
    #[error("gpu: {0}")]
    Gpu(String),
    /// A buffer could not be allocated (the memory budget is checked
    /// first; this is what is left when the machine has less).
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// An I/O error while reading or writing a file.
    #[error("io: {0}")]
    Io(String),
    /// Something around the engines failed (the page's training worker,
    /// the browser's storage); the message says what.
    #[error("{0}")]
    Other(String),
    /// An error with what was being done said first ("The checkpoint was
    /// not loaded: …"); `cause` keeps its kind.
    #[error("{context}: {cause}")]
    Context { context: String, cause: Box<Error> },
}

impl Error {
    /// This error, with what was being done said first.
    pub fn context(self, context: impl Into<String>) -> Error {
        Error::Context { context: context.into(), cause: Box::new(self) }
    }

    /// The error under any context.
    pub fn cause(&self) -> &Error {
        match self {
            Error::Context { cause, .. } => cause.cause(),
            other => other,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Self {
        Error::Io(err.to_string())
    }
}

/// `n` zeros, or an error naming `what` when the memory is not there,
/// where `vec![0.0; n]` would abort the process. Allocated zeroed, as
/// `vec!` does (`calloc`): pages the system hands out already zero are not
/// written, so a buffer costs nothing until it is used, and a buffer the
/// system refuses (past its overcommit or address space) is an error
/// before anything else of the run is touched.
pub fn zeros(n: usize, what: &str) -> Result<Vec<f32>> {
    let layout = std::alloc::Layout::array::<f32>(n).map_err(|_| refused::<f32>(n, what))?;
    if layout.size() == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: `layout` has a non-zero size; the pointer, when not null,
    // holds `n` f32s of all-zero bits (0.0), allocated by the global
    // allocator with the layout of a `Vec<f32>` of capacity `n`, which
    // is what `from_raw_parts` requires.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut f32;
    if ptr.is_null() {
        return Err(refused::<f32>(n, what));
    }
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// An empty vector with room for `n` items, or an error naming `what`
/// (`try_reserve_exact`: nothing is written, so nothing is touched yet).
pub fn room<T>(n: usize, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| refused::<T>(n, what))?;
    Ok(v)
}

fn refused<T>(n: usize, what: &str) -> Error {
    let bytes = (n as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    Error::OutOfMemory(format!("cannot allocate {} for {what}", human_bytes(bytes)))
}

/// Bytes as a person reads them: "512.0 MiB", "93.1 GiB", "256.0 TiB".
pub fn human_bytes(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        _ if bytes >= 1 << 40 => format!("{:.1} TiB", b / (1u64 << 40) as f64),
        _ if bytes >= 1 << 30 => format!("{:.1} GiB", b / (1u64 << 30) as f64),
        _ => format!("{:.1} MiB", b / (1u64 << 20) as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_said_first_and_keeps_the_kind() {
        let err = Error::Checkpoint("truncated".into()).context("The checkpoint was not loaded");
        assert_eq!(err.to_string(), "The checkpoint was not loaded: checkpoint: truncated");
        assert_eq!(err.cause(), &Error::Checkpoint("truncated".into()));
    }

    #[test]
    fn zeros_are_zero_or_an_error_naming_the_buffer() {
        assert_eq!(zeros(3, "x").unwrap(), [0.0; 3]);
        assert_eq!(zeros(0, "x").unwrap().capacity(), 0);
        // Past any address space: refused at once, nothing touched.
        let msg = zeros(1 << 60, "the activations").unwrap_err().to_string();
        assert_eq!(msg, "out of memory: cannot allocate 4194304.0 TiB for the activations");
        assert_eq!(human_bytes(100 * (1 << 30) + (1 << 29)), "100.5 GiB");
    }
}
