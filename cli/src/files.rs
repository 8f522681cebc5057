//! Files in and out. Output files appear whole or not at all: each is
//! written to a new file with a random name in the target's directory
//! (created exclusively, so a planted link or file there is never
//! followed), flushed to disk, renamed over the target, and the directory
//! flushed. The metrics log is the exception: it is written line by line
//! as the run goes, so `tail -f` follows it.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Failure;

pub fn read(path: &str, what: &str) -> Result<Vec<u8>, Failure> {
    fs::read(path).map_err(|e| Failure::usage(format!("cannot read {what} `{path}`: {e}")))
}

pub fn read_text(path: &str, what: &str) -> Result<String, Failure> {
    String::from_utf8(read(path, what)?).map_err(|_| Failure::usage(format!("{what} `{path}` is not UTF-8 text")))
}

/// The directory a file `path` goes into (`.` for a bare name).
fn directory(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn new_temp(path: &str) -> Result<tempfile::NamedTempFile, Failure> {
    let target = Path::new(path);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let prefix = format!(".{name}.");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(".tmp");
    // As a plain create would make it (the umask applies), not 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder.tempfile_in(directory(target)).map_err(|e| Failure::usage(format!("cannot write `{path}`: {e}")))
}

/// Checks, before a run starts, that `path` can be written: its directory
/// exists and takes a new file. Nothing is left behind.
pub fn check_writable(path: &str, what: &str) -> Result<(), Failure> {
    if Path::new(path).is_dir() {
        return Err(Failure::usage(format!("{what} `{path}` is a directory")));
    }
    new_temp(path).map(drop).map_err(|f| Failure::usage(format!("{what}: {}", f.message)))
}

/// Writes `bytes` to `path` atomically and durably.
pub fn write_atomic(path: &str, bytes: &[u8]) -> Result<(), Failure> {
    let fail = |e: std::io::Error| Failure::usage(format!("cannot write `{path}`: {e}"));
    let mut temp = new_temp(path)?;
    temp.write_all(bytes).map_err(fail)?;
    temp.as_file().sync_all().map_err(fail)?;
    temp.persist(path).map_err(|e| fail(e.error))?;
    sync_directory(directory(Path::new(path)));
    Ok(())
}

/// Flushes a directory's entries (the rename) to disk, where the platform
/// can open a directory.
fn sync_directory(dir: &Path) {
    if let Ok(d) = fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// The path a file would have, for comparing an output with the inputs:
/// the canonical directory and the name (the file need not exist).
fn resolved(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    let dir = fs::canonicalize(directory(p)).ok()?;
    let resolved = dir.join(p.file_name()?);
    Some(fs::canonicalize(&resolved).unwrap_or(resolved))
}

/// Fails when an output names the same file as another output or an input,
/// which writing it would destroy: `outputs` and `inputs` are (flag, path).
pub fn distinct(outputs: &[(&str, &str)], inputs: &[(&str, &str)]) -> Result<(), Failure> {
    for (i, (flag, path)) in outputs.iter().enumerate() {
        let Some(out) = resolved(path) else { continue };
        for (other_flag, other) in outputs[..i].iter().chain(inputs) {
            if resolved(other).as_ref() == Some(&out) {
                return Err(Failure::usage(format!(
                    "{flag} `{path}` is the same file as {other_flag} `{other}`: writing it would destroy that"
                )));
            }
        }
    }
    Ok(())
}

/// A log written line by line into its final place, each line flushed.
pub struct LogFile {
    target: String,
    file: std::io::BufWriter<fs::File>,
}

impl LogFile {
    pub fn create(path: &str) -> Result<LogFile, Failure> {
        let file = fs::File::create(path).map_err(|e| Failure::usage(format!("cannot write `{path}`: {e}")))?;
        Ok(LogFile { target: path.to_string(), file: std::io::BufWriter::new(file) })
    }

    pub fn write_line(&mut self, line: &str) -> Result<(), Failure> {
        writeln!(self.file, "{line}")
            .and_then(|()| self.file.flush())
            .map_err(|e| Failure::usage(format!("cannot write `{}`: {e}", self.target)))
    }

    /// Appends `bytes` and flushes them, so a reader following the file
    /// sees whole records.
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        self.file
            .write_all(bytes)
            .and_then(|()| self.file.flush())
            .map_err(|e| Failure::usage(format!("cannot write `{}`: {e}", self.target)))
    }

    /// Flushes the log to disk; it is complete.
    pub fn finish(mut self) -> Result<(), Failure> {
        let target = self.target.clone();
        self.file
            .flush()
            .and_then(|()| self.file.get_ref().sync_all())
            .map_err(|e| Failure::usage(format!("cannot write `{target}`: {e}")))
    }
}
