//! Long work on the command line: a progress line at least every
//! `PROGRESS_EVERY`, and Ctrl-C looked at between the parts of reading a
//! CSV, of a step and of an evaluation.

use std::time::Duration;

use web_time::Instant;

use stepscope_core::data::{CsvReader, CsvTable, Dataset, Table};
use stepscope_core::engine::{Evaluation, Evaluator};
use stepscope_core::input::MAX_CSV_BYTES;
use stepscope_core::limits::EVAL_CHUNK_ROWS;
use stepscope_core::trainer::block_on;
use stepscope_core::{Error, Trainer};

use crate::files;
use crate::signal::stopped;
use crate::{say, Failure};

/// Rows read between looks at the clock and at Ctrl-C.
const READ_PART_ROWS: usize = 2048;

/// Reads a CSV file (`CsvReader`), with a progress line every
/// `PROGRESS_EVERY` and Ctrl-C looked at between parts.
pub(crate) fn read_csv_file(path: &str, what: &str) -> Result<CsvTable, Failure> {
    let text = files::read_text(path, what, MAX_CSV_BYTES)?;
    let bad = |e: Error| Failure::usage(format!("{what} `{path}`: {e}"));
    let started = Instant::now();
    let mut beat = Heartbeat::new();
    let mut reader = CsvReader::new(text.as_bytes()).map_err(bad)?;
    while !reader.advance(READ_PART_ROWS).map_err(bad)? {
        if stopped() {
            return Err(Failure {
                message: format!("interrupted while reading `{path}`; nothing was written"),
                status: 130,
            });
        }
        if beat.due() {
            let p = reader.progress();
            say!(
                "reading {path}: {:.0}%  ({} rows, {:.1} of {:.1} MB, {:.1} s)",
                100.0 * p.fraction(),
                p.rows,
                p.bytes as f64 / 1e6,
                p.total_bytes as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
        }
    }
    let rows = reader.progress().rows;
    let table = reader.finish().map_err(bad)?;
    if started.elapsed() >= PROGRESS_EVERY {
        say!("read {path}: {rows} rows in {:.1} s", started.elapsed().as_secs_f64());
    }
    Ok(table)
}

/// Long work says how it goes at least this often (the promise is
/// every 2 s; the clock is looked at between parts of the work).
pub(crate) const PROGRESS_EVERY: Duration = Duration::from_millis(1500);

/// When the next progress line is due.
pub(crate) struct Heartbeat {
    last: Instant,
}

impl Heartbeat {
    pub(crate) fn new() -> Heartbeat {
        Heartbeat { last: Instant::now() }
    }

    /// Whether a line is due (and, if so, the clock starts again).
    pub(crate) fn due(&mut self) -> bool {
        let due = self.is_due();
        if due {
            self.reset();
        }
        due
    }

    /// Whether a line is due, the clock left as it is.
    pub(crate) fn is_due(&self) -> bool {
        self.last.elapsed() >= PROGRESS_EVERY
    }

    pub(crate) fn reset(&mut self) {
        self.last = Instant::now();
    }
}

/// Which of the run's tables an evaluation reads (`evaluate`).
pub(crate) type Rows = fn(&Dataset) -> &Table;

pub(crate) fn train_rows(data: &Dataset) -> &Table {
    &data.train
}

pub(crate) fn test_rows(data: &Dataset) -> &Table {
    &data.test
}

/// Loss and accuracy over the run's `rows` (the CPU reference forward
/// pass, in chunks, on the trainer's own table: no copy), with a progress
/// line when it runs long; None when Ctrl-C stopped it, or for an empty
/// table.
pub(crate) fn evaluate(
    engine: &mut Trainer,
    rows: Rows,
    what: &str,
    beat: &mut Heartbeat,
) -> Result<Option<Evaluation>, Failure> {
    let (e, layout) = (engine.experiment().clone(), engine.layout().clone());
    let done = block_on(engine.with_tensors_and_data(|[params, _, _], data| -> stepscope_core::error::Result<_> {
        let table = rows(data);
        let mut evaluator = Evaluator::try_new(&layout, table.rows(), EVAL_CHUNK_ROWS)?;
        let mut evaluated = 0;
        while !evaluator.advance(params, &layout, &e, table, EVAL_CHUNK_ROWS) {
            evaluated += EVAL_CHUNK_ROWS;
            if stopped() {
                return Ok(None);
            }
            if beat.due() {
                say!("evaluating the {what} rows: {evaluated} of {}", table.rows());
            }
        }
        Ok(evaluator.result())
    }))?;
    Ok(done?)
}
