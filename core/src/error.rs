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

/// `n` zeros, or an error naming `what` when the memory is not there
/// (`try_reserve`, where `vec![0.0; n]` would abort the process).
pub fn zeros(n: usize, what: &str) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| {
        Error::OutOfMemory(format!("cannot allocate {} MiB for {what}", (n as u64 * 4).div_ceil(1 << 20)))
    })?;
    v.resize(n, 0.0);
    Ok(v)
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
}
