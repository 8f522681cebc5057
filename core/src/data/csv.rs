//! CSV data: a header row, then one row per sample. Columns named `x…` are
//! inputs in the order they appear; `y` (or `y0`, `y1`, …) are targets.
//! For `cross_entropy`, the single `y` column holds a class index.
//! Every error names the line (1-based, header = line 1) and the column.
//!
//! Reading is linear in the file: the reader keeps the line count as it
//! goes (`LineTracker`), the header's names are checked with a hash map,
//! and a file is read once, into a `CsvTable` that does not depend on the
//! experiment; `CsvTable::check` then holds it to an experiment (its widths
//! and targets) without reading the text again. `CsvReader` reads a file a
//! number of rows at a time, so that a caller can report progress and
//! yield between parts (the page's worker, the CLI).

use std::collections::HashMap;
use std::io::Cursor;

use super::Table;
use crate::error::{Error, Result};
use crate::experiment::{Experiment, Loss};

/// Largest CSV accepted, in rows.
pub const MAX_CSV_ROWS: usize = 1_000_000;

/// Largest class index + 1 that a `y` column of whole numbers is taken to
/// be classes for (`CsvTable::classes`).
pub const MAX_CSV_CLASSES: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Column {
    Input,
    Target,
}

/// The line of each record, counted as records are read: every byte of the
/// file is looked at most twice in all (`scanned` counts them), where
/// counting from the start of the file for every record was quadratic.
#[derive(Clone, Debug, Default)]
pub struct LineTracker {
    /// Bytes before this offset are counted in `newlines`.
    counted_to: usize,
    newlines: usize,
    scanned: u64,
}

impl LineTracker {
    /// The 1-based line of a record whose reading began at `byte`: the
    /// reader's position is where it began looking for the record, before
    /// the line ends and blank lines it skipped. Offsets must not go back.
    pub fn line_at(&mut self, bytes: &[u8], byte: u64) -> usize {
        let mut start = (byte as usize).min(bytes.len()).max(self.counted_to);
        let skipped_from = start;
        while start < bytes.len() && matches!(bytes[start], b'\r' | b'\n') {
            start += 1;
        }
        let fresh = &bytes[self.counted_to..start];
        self.newlines += fresh.iter().filter(|&&b| b == b'\n').count();
        self.scanned += (fresh.len() + (start - skipped_from)) as u64;
        self.counted_to = start;
        1 + self.newlines
    }

    /// Bytes looked at so far (each file byte at most twice).
    pub fn scanned(&self) -> u64 {
        self.scanned
    }
}

/// The rows of a CSV file one at a time (the `csv` crate underneath): a
/// UTF-8 byte-order mark (what spreadsheet programs write), quoted fields
/// and CRLF line ends are accepted; fields are trimmed; blank rows are
/// skipped; rows may differ in length (checked by the callers, with their
/// own message). One record is reused for every row.
pub struct CsvRows<T: AsRef<[u8]>> {
    reader: ::csv::Reader<Cursor<T>>,
    lines: LineTracker,
    record: ::csv::StringRecord,
    total: u64,
}

impl<T: AsRef<[u8]>> CsvRows<T> {
    pub fn new(text: T) -> CsvRows<T> {
        let total = text.as_ref().len() as u64;
        let reader = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(::csv::Trim::All)
            .from_reader(Cursor::new(text));
        CsvRows { reader, lines: LineTracker::default(), record: ::csv::StringRecord::new(), total }
    }

    /// The next non-blank row with its 1-based line, None at the end.
    pub fn next_row(&mut self) -> Result<Option<(usize, &::csv::StringRecord)>> {
        loop {
            let read = self.reader.read_record(&mut self.record);
            let bytes = self.reader.get_ref().get_ref().as_ref();
            match read {
                Ok(false) => return Ok(None),
                Ok(true) if self.record.iter().all(str::is_empty) => continue,
                Ok(true) => {
                    let line = self.record.position().map_or(0, |p| self.lines.line_at(bytes, p.byte()));
                    return Ok(Some((line, &self.record)));
                }
                Err(e) => {
                    let line = e
                        .position()
                        .map_or(String::new(), |p| format!("line {}: ", self.lines.line_at(bytes, p.byte())));
                    return Err(Error::Csv(format!("{line}not readable as CSV ({e})")));
                }
            }
        }
    }

    /// Bytes of the file read so far, and in all.
    pub fn progress(&self) -> (u64, u64) {
        (self.reader.position().byte().min(self.total), self.total)
    }

    /// Bytes the line tracker has looked at (at most twice the file).
    pub fn bytes_scanned(&self) -> u64 {
        self.lines.scanned()
    }
}

/// The header's column names, each named once.
pub fn csv_header(text: &str) -> Result<Vec<String>> {
    header_of(&mut CsvRows::new(text.as_bytes()))
}

fn header_of<T: AsRef<[u8]>>(rows: &mut CsvRows<T>) -> Result<Vec<String>> {
    let Some((_, record)) = rows.next_row()? else {
        return Err(Error::Csv("the file is empty: expected a header row such as `x1,x2,y`".into()));
    };
    let names: Vec<String> = record.iter().map(|n| n.trim_start_matches('\u{feff}').to_string()).collect();
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(names.len());
    for (c, name) in names.iter().enumerate() {
        if let Some(first) = seen.insert(name, c) {
            return Err(Error::Csv(format!(
                "line 1, column {}: header `{name}` appears twice (first in column {})",
                c + 1,
                first + 1
            )));
        }
    }
    Ok(names)
}

/// A CSV file read whole, before any experiment is held to it: its names,
/// its `x…` columns as inputs and its `y…` columns as targets (each in file
/// order), and the line each row came from (for the messages of `check`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CsvTable {
    pub names: Vec<String>,
    pub table: Table,
    /// 0-based column of each target.
    target_columns: Vec<usize>,
    lines: Vec<usize>,
    /// Bytes of the file, held while it was read (`limits::RunBytes`).
    pub file_bytes: u64,
}

/// How far a `CsvReader` is: bytes read of the file, and rows so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReadProgress {
    pub bytes: u64,
    pub total_bytes: u64,
    pub rows: usize,
}

impl ReadProgress {
    pub fn fraction(&self) -> f64 {
        if self.total_bytes == 0 {
            1.0
        } else {
            self.bytes as f64 / self.total_bytes as f64
        }
    }
}

/// Reads a CSV file some rows at a time (`advance`): the header when made,
/// then rows until `finish`.
pub struct CsvReader<T: AsRef<[u8]>> {
    rows: CsvRows<T>,
    columns: Vec<Column>,
    out: CsvTable,
}

impl<T: AsRef<[u8]>> CsvReader<T> {
    /// Reads and checks the header.
    pub fn new(text: T) -> Result<CsvReader<T>> {
        let mut rows = CsvRows::new(text);
        let names = header_of(&mut rows)?;
        let mut columns = Vec::with_capacity(names.len());
        for (c, name) in names.iter().enumerate() {
            let column = if name.starts_with('x') && name.len() > 1 {
                Column::Input
            } else if name == "y" || (name.starts_with('y') && name[1..].parse::<u32>().is_ok()) {
                Column::Target
            } else {
                return Err(Error::Csv(format!(
                    "line 1, column {}: header `{name}` is neither an input (x…) nor a target (y, y0, y1, …)",
                    c + 1
                )));
            };
            columns.push(column);
        }
        let input_width = columns.iter().filter(|c| **c == Column::Input).count();
        let target_columns: Vec<usize> = (0..columns.len()).filter(|&c| columns[c] == Column::Target).collect();
        let table = Table { input_width, target_width: target_columns.len(), ..Table::default() };
        let file_bytes = rows.total;
        let out = CsvTable { names, table, target_columns, lines: Vec::new(), file_bytes };
        Ok(CsvReader { rows, columns, out })
    }

    /// Reads up to `max_rows` more rows (at least one); true at the end.
    pub fn advance(&mut self, max_rows: usize) -> Result<bool> {
        let err = |msg: String| Err(Error::Csv(msg));
        let width = self.columns.len();
        for _ in 0..max_rows.max(1) {
            let Some((line, fields)) = self.rows.next_row()? else { return Ok(true) };
            if self.out.lines.len() >= MAX_CSV_ROWS {
                return err(format!("line {line}: more than {MAX_CSV_ROWS} rows"));
            }
            if fields.len() != width {
                return err(format!("line {line}: {} fields, but the header has {width} columns", fields.len()));
            }
            for (c, (field, column)) in fields.iter().zip(&self.columns).enumerate() {
                let value: f32 = match field.parse() {
                    Ok(v) if f32::is_finite(v) => v,
                    _ => return err(format!("line {line}, column {}: `{field}` is not a finite number", c + 1)),
                };
                match column {
                    Column::Input => self.out.table.inputs.push(value),
                    Column::Target => self.out.table.targets.push(value),
                }
            }
            self.out.lines.push(line);
        }
        Ok(false)
    }

    pub fn progress(&self) -> ReadProgress {
        let (bytes, total_bytes) = self.rows.progress();
        ReadProgress { bytes, total_bytes, rows: self.out.lines.len() }
    }

    /// Bytes the line tracker has looked at (at most twice the file).
    pub fn bytes_scanned(&self) -> u64 {
        self.rows.bytes_scanned()
    }

    /// The table, once every row is read, holding no more than its rows
    /// (the room a growing vector keeps ahead is given back).
    pub fn finish(mut self) -> Result<CsvTable> {
        if self.out.lines.is_empty() {
            return Err(Error::Csv("the file has a header but no data rows".into()));
        }
        self.out.table.inputs.shrink_to_fit();
        self.out.table.targets.shrink_to_fit();
        self.out.lines.shrink_to_fit();
        Ok(self.out)
    }
}

/// Text shared with others (the page keeps its CSV for autosaves while a
/// `CsvReader` reads it), as the bytes a reader takes.
#[derive(Clone, Debug)]
pub struct SharedText(pub std::sync::Arc<String>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Reads a whole CSV file (`CsvReader`).
pub fn read_csv(text: &str) -> Result<CsvTable> {
    let mut reader = CsvReader::new(text.as_bytes())?;
    while !reader.advance(usize::MAX)? {}
    reader.finish()
}

impl CsvTable {
    /// The rows alone, and the file's bytes; the line numbers and names go.
    pub fn into_table(self) -> (Table, u64) {
        (self.table, self.file_bytes)
    }

    pub fn rows(&self) -> usize {
        self.lines.len()
    }

    /// Whether the experiment can train on this table: the header's input
    /// and target columns against the model, and every target against the
    /// loss (a class index in range, a probability for bce).
    pub fn check(&self, experiment: &Experiment) -> Result<()> {
        let err = |msg: String| Err(Error::Csv(msg));
        let (input_width, target_width) = (self.table.input_width, self.table.target_width);
        let outputs = experiment.outputs();
        if input_width != experiment.model.inputs {
            return err(format!(
                "line 1: the header has {input_width} input columns (x…) but model.inputs is {}",
                experiment.model.inputs
            ));
        }
        let wanted_targets = match experiment.loss {
            Loss::CrossEntropy => 1,
            _ => outputs,
        };
        if target_width != wanted_targets {
            return err(format!(
                "line 1: the header has {target_width} target columns (y…) but loss {:?} with {outputs} outputs needs {wanted_targets}",
                experiment.loss
            ));
        }
        if experiment.loss == Loss::Mse {
            return Ok(());
        }
        for (i, &value) in self.table.targets.iter().enumerate() {
            if let Err(why) = check_target(experiment.loss, outputs, value) {
                let (row, t) = (i / target_width, i % target_width);
                return err(format!("line {}, column {}: {why}", self.lines[row], self.target_columns[t] + 1));
            }
        }
        Ok(())
    }

    /// The classes of a single `y` column of whole numbers in
    /// 0..`MAX_CSV_CLASSES` (the largest + 1), else None (regression).
    pub fn classes(&self) -> Option<usize> {
        let [col] = self.target_columns[..] else { return None };
        if self.names[col] != "y" {
            return None;
        }
        let mut classes = 0;
        for &v in &self.table.targets {
            if !(v >= 0.0 && v.fract() == 0.0 && (v as usize) < MAX_CSV_CLASSES) {
                return None;
            }
            classes = classes.max(v as usize + 1);
        }
        Some(classes)
    }
}

/// Reads `text` and holds it to `experiment` (`read_csv`, `CsvTable::check`).
pub fn parse_csv(text: &str, experiment: &Experiment) -> Result<Table> {
    let csv = read_csv(text)?;
    csv.check(experiment)?;
    Ok(csv.table)
}

fn check_target(loss: Loss, outputs: usize, value: f32) -> std::result::Result<(), String> {
    match loss {
        Loss::Mse => Ok(()),
        Loss::BceWithLogits if (0.0..=1.0).contains(&value) => Ok(()),
        Loss::BceWithLogits => Err(format!("target {value} is outside [0, 1], as bce_with_logits needs")),
        Loss::CrossEntropy if value.fract() == 0.0 && value >= 0.0 && (value as usize) < outputs => Ok(()),
        Loss::CrossEntropy => {
            Err(format!("class `{value}` must be an integer in 0..{outputs} (the output layer's units)"))
        }
    }
}

#[cfg(test)]
mod tests;
