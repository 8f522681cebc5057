//! Files in and out. Output files appear whole or not at all: each is
//! written to a new file with a random name in the target's directory
//! (created exclusively, so a planted link or file there is never
//! followed), flushed to disk, renamed over the target, and the directory
//! flushed. The metrics log is the exception: it is written line by line
//! as the run goes, so `tail -f` follows it.

use std::fs;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use stepscope_core::input::{check_checkpoint_start, check_size, BoundedRead};
use stepscope_core::Error;

use crate::signal::stopped;
use crate::Failure;

/// Reads `path` (named `what` `path` in messages), at most `limit` bytes
/// whatever it is (`BoundedRead`: a device or a pipe that never ends is
/// refused at the limit), in parts with Ctrl-C looked at between them.
pub fn read(path: &str, what: &str, limit: u64) -> Result<Vec<u8>, Failure> {
    read_checked(path, what, limit, |_| Ok(()))
}

pub fn read_text(path: &str, what: &str, limit: u64) -> Result<String, Failure> {
    String::from_utf8(read(path, what, limit)?)
        .map_err(|_| Failure::usage(format!("{what} `{path}` is not UTF-8 text")))
}

/// A checkpoint or weights file: as `read`, and refused from its first
/// part when that cannot start a safetensors file.
pub fn read_checkpoint(path: &str, what: &str, limit: u64) -> Result<Vec<u8>, Failure> {
    read_checked(path, what, limit, check_checkpoint_start)
}

fn read_checked(
    path: &str,
    what: &str,
    limit: u64,
    check_start: impl Fn(&[u8]) -> Result<(), Error>,
) -> Result<Vec<u8>, Failure> {
    let name = format!("{what} `{path}`");
    let fail = |e: Error| match e {
        Error::Io(m) | Error::Other(m) => Failure::usage(m),
        other => Failure::usage(format!("{name}: {other}")),
    };
    let file = fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read {name}: {e}")))?;
    // A regular file's size refuses it early; devices and pipes say 0, and
    // the read itself holds every file to the limit.
    if let Ok(meta) = file.metadata().map(|m| (m.is_file(), m.len())) {
        if meta.0 {
            check_size(meta.1, limit, &name).map_err(fail)?;
        }
    }
    let mut reading = BoundedRead::new(file, limit, name.clone());
    let mut first = true;
    loop {
        let done = reading.advance().map_err(fail)?;
        if first {
            check_start(reading.bytes()).map_err(fail)?;
            first = false;
        }
        if done {
            return Ok(reading.finish());
        }
        if stopped() {
            return Err(Failure {
                message: format!("interrupted while reading `{path}`; nothing was written"),
                status: 130,
            });
        }
    }
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

/// Checks, before a run starts, that files can be made in the directory
/// `dir`: it is one and takes a new file, or the nearest folder above it
/// that exists does (the rest is created when the run starts). Nothing is
/// left behind.
pub fn check_directory(dir: &str, what: &str) -> Result<(), Failure> {
    let mut existing = Path::new(dir);
    loop {
        match fs::metadata(existing) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(Failure::usage(format!("{what} `{dir}`: `{}` is not a directory", existing.display())))
            }
            Err(_) => match existing.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => existing = parent,
                _ => {
                    existing = Path::new(".");
                    break;
                }
            },
        }
    }
    tempfile::Builder::new()
        .prefix(".stepscope-check.")
        .tempfile_in(existing)
        .map(drop)
        .map_err(|e| Failure::usage(format!("{what} `{dir}`: cannot write into `{}`: {e}", existing.display())))
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
/// the longest part of it that exists, canonical (links followed), then
/// the rest as written (it need not exist).
fn resolved(path: &str) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut head = absolute.as_path();
    let mut out = loop {
        if let Ok(canonical) = fs::canonicalize(head) {
            break canonical;
        }
        rest.push(head.file_name()?);
        head = head.parent()?;
    };
    for part in rest.iter().rev() {
        match Path::new(part).components().next() {
            Some(Component::CurDir) => {}
            Some(Component::ParentDir) => {
                out.pop();
            }
            _ => out.push(part),
        }
    }
    Some(out)
}

/// Whether `a` and `b` name one file: the same resolved path, or (where
/// both exist) the same file under two names (a hard link).
fn same_file(a: &str, b: &str) -> bool {
    #[cfg(unix)]
    if let (Ok(x), Ok(y)) = (fs::metadata(a), fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt;
        if (x.dev(), x.ino()) == (y.dev(), y.ino()) {
            return true;
        }
    }
    resolved(a).is_some_and(|r| resolved(b) == Some(r))
}

/// Fails when an output names the same file as another output or an input,
/// which writing it would destroy: `outputs` and `inputs` are (flag, path);
/// `allowed` are (output flag, input flag) pairs that may (`--out` over
/// `--init` resumes a checkpoint in place).
pub fn distinct(outputs: &[(&str, &str)], inputs: &[(&str, &str)], allowed: &[(&str, &str)]) -> Result<(), Failure> {
    for (i, (flag, path)) in outputs.iter().enumerate() {
        for (other_flag, other) in outputs[..i].iter().chain(inputs) {
            if allowed.contains(&(*flag, *other_flag)) || !same_file(path, other) {
                continue;
            }
            return Err(Failure::usage(format!(
                "{flag} `{path}` is the same file as {other_flag} `{other}`: writing it would destroy that"
            )));
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

    /// A log in a file that must not exist yet: nothing already there is
    /// ever truncated (a file named by another flag, say).
    pub fn create_new(path: &str) -> Result<LogFile, Failure> {
        let file = fs::File::create_new(path).map_err(|e| Failure::usage(format!("cannot write `{path}`: {e}")))?;
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
