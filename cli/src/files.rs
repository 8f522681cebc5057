//! Output files appear whole or not at all: each is written to a
//! temporary file beside its target and renamed into place.

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

fn temp_path(path: &str) -> PathBuf {
    let p = Path::new(path);
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    p.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `bytes` to `path` atomically.
pub fn write_atomic(path: &str, bytes: &[u8]) -> Result<(), Failure> {
    let temp = temp_path(path);
    let result = fs::write(&temp, bytes).and_then(|()| fs::rename(&temp, path));
    result.map_err(|e| {
        let _ = fs::remove_file(&temp);
        Failure::usage(format!("cannot write `{path}`: {e}"))
    })
}

/// A file written line by line into a temporary file; `commit` renames it
/// into place, dropping it without `commit` removes it.
pub struct PendingFile {
    target: String,
    temp: PathBuf,
    file: Option<std::io::BufWriter<fs::File>>,
}

impl PendingFile {
    pub fn create(path: &str) -> Result<PendingFile, Failure> {
        let temp = temp_path(path);
        let file = fs::File::create(&temp).map_err(|e| Failure::usage(format!("cannot write `{path}`: {e}")))?;
        Ok(PendingFile { target: path.to_string(), temp, file: Some(std::io::BufWriter::new(file)) })
    }

    pub fn write_line(&mut self, line: &str) -> Result<(), Failure> {
        let file = self.file.as_mut().expect("not committed yet");
        writeln!(file, "{line}").map_err(|e| Failure::usage(format!("cannot write `{}`: {e}", self.target)))
    }

    pub fn commit(mut self) -> Result<(), Failure> {
        let file = self.file.take().expect("committed once");
        let target = self.target.clone();
        file.into_inner()
            .map_err(|e| e.into_error())
            .and_then(|f| f.sync_all())
            .and_then(|()| fs::rename(&self.temp, &target))
            .map_err(|e| Failure::usage(format!("cannot write `{target}`: {e}")))
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}
