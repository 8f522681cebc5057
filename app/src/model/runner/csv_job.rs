//! An uploaded CSV, read by the loop a part per frame: the page sends the
//! file's bytes as they are and never parses them; here they are checked as
//! UTF-8, read some rows at a time within the frame's budget (the progress
//! goes back in each frame's report), turned into the experiment they imply
//! (`experiment_for_csv`) and only then swapped in for the current run,
//! which stays as it was until the whole file is good.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::data::{
    read_csv, CsvReader, CsvTable, Dataset, ReadProgress, SharedText, TokenText, MAX_VOCABULARY,
};
use stepscope_core::experiment::DataSource;
use stepscope_core::input::{check_size, MAX_CSV_BYTES, MAX_TEXT_BYTES};
use stepscope_core::{Error, Experiment};
use web_time::Instant;

use super::{Outcome, Runner};
use crate::model::clock::ms_since;
use crate::model::edit::experiment_for_csv;

/// An uploaded file the run trains on: its text (kept for the autosave)
/// and what was read from it once (every reset, restore and rollback
/// reuses it): a CSV's table, or a text's tokens for a transformer.
#[derive(Clone, Debug)]
pub struct CsvData {
    pub text: Arc<String>,
    pub read: Read,
}

#[derive(Clone, Debug)]
pub enum Read {
    Csv(Arc<CsvTable>),
    Text(Arc<TokenText>),
}

impl CsvData {
    /// Reads `text` whole as `e` uses it (an autosaved run's file, when
    /// the loop starts): a text for `"source": "text"`, else a CSV.
    pub fn read(text: Arc<String>, e: &Experiment) -> Result<CsvData, Error> {
        let read = match e.data.source {
            DataSource::Text => {
                let context = e.gpt().map_or(1, |g| g.context);
                Read::Text(Arc::new(TokenText::read(text.as_bytes(), context, MAX_VOCABULARY)?))
            }
            _ => Read::Csv(Arc::new(read_csv(&text)?)),
        };
        Ok(CsvData { text, read })
    }

    pub fn table(&self) -> Option<&CsvTable> {
        match &self.read {
            Read::Csv(table) => Some(table),
            Read::Text(_) => None,
        }
    }
}

/// The data of `e`: built in, or from the uploaded file.
pub fn load_data(e: &Experiment, upload: Option<&CsvData>) -> Result<Dataset, Error> {
    match (e.data.source, upload.map(|u| &u.read)) {
        (DataSource::Text, Some(Read::Text(text))) => Dataset::load_text(e, text),
        _ => Dataset::load(e, upload.and_then(CsvData::table)),
    }
}

/// Where the reading of an uploaded file stands, for the page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CsvProgress {
    pub name: String,
    /// Still arriving from the page (`progress.bytes` received so far, no
    /// rows read yet), or being read.
    pub receiving: bool,
    pub progress: ReadProgress,
}

/// An upload's bytes as they arrive (`Command::CsvBytes`).
pub(super) struct Upload {
    name: String,
    total: u64,
    bytes: Vec<u8>,
}

/// An upload being read.
pub(super) struct CsvJob {
    name: String,
    base: Experiment,
    text: Arc<String>,
    reader: CsvReader<SharedText>,
}

/// Rows read between looks at the clock.
const ROWS_PER_LOOK: usize = 256;

/// The least time a frame gives to the reading (a frame's training budget
/// is spent on it while a file is read; training waits).
const MIN_READ_MS: f64 = 8.0;

impl Runner {
    /// Starts reading an upload; a file that is not UTF-8 text or whose
    /// header is wrong is refused now.
    pub(super) fn begin_csv(&mut self, name: String, last: Vec<u8>, base: Experiment) -> Result<(), Error> {
        let bytes = self.take_upload(&name, last);
        let not_loaded = |err: Error| err.context(format!("`{name}` was not loaded"));
        check_size(bytes.len() as u64, MAX_CSV_BYTES, "the file").map_err(not_loaded)?;
        let text = String::from_utf8(bytes).map_err(|e| {
            not_loaded(Error::Csv(format!("the file is not UTF-8 text (byte {} is not)", e.utf8_error().valid_up_to())))
        })?;
        let text = Arc::new(text);
        let reader = CsvReader::new(SharedText(text.clone())).map_err(not_loaded)?;
        self.csv_job = Some(CsvJob { name, base, text, reader });
        Ok(())
    }

    /// An uploaded text for the transformer (its name and its last bytes,
    /// after the parts sent for it): read whole at once (in linear time:
    /// the characters, the vocabulary, the windows), then the run restarts
    /// on `base` with the text's vocabulary. A bad text is refused with
    /// its reason and the run goes on as it was.
    pub(super) async fn read_text(
        &mut self,
        name: String,
        last: Vec<u8>,
        base: Experiment,
    ) -> Result<Option<Outcome>, Error> {
        let bytes = self.take_upload(&name, last);
        let not_loaded = |err: Error| err.context(format!("`{name}` was not loaded"));
        check_size(bytes.len() as u64, MAX_TEXT_BYTES as u64, "the file").map_err(not_loaded)?;
        let context = base.gpt().map(|g| g.context).ok_or_else(|| {
            not_loaded(Error::Experiment("a text trains a transformer: switch the model to gpt first".into()))
        })?;
        let tokens = TokenText::read(&bytes, context, MAX_VOCABULARY).map_err(not_loaded)?;
        let text =
            Arc::new(String::from_utf8(bytes).map_err(|_| not_loaded(Error::Text("the text is not UTF-8".into())))?);
        let mut e = base;
        e.data.source = DataSource::Text;
        if let Some(g) = e.model.gpt.as_mut() {
            g.vocab_size = tokens.vocabulary.len();
        }
        e.validate().map_err(not_loaded)?;
        let upload = CsvData { text, read: Read::Text(Arc::new(tokens)) };
        let data = load_data(&e, Some(&upload)).map_err(not_loaded)?;
        stepscope_core::limits::Limits::PAGE
            .check(&e, Some((data.train.rows(), data.test.rows())))
            .map_err(not_loaded)?;
        self.detector.clear();
        self.restart_with_race(&e, Some(upload)).await.map_err(not_loaded)?;
        Ok(Some(Outcome::CsvLoaded(name, Box::new(e))))
    }

    /// The whole upload `name`: the parts received for it, then `last`
    /// (the parts of another file are dropped).
    fn take_upload(&mut self, name: &str, last: Vec<u8>) -> Vec<u8> {
        match self.csv_upload.take() {
            Some(mut upload) if upload.name == name => {
                upload.bytes.extend_from_slice(&last);
                upload.bytes
            }
            _ => last,
        }
    }

    /// A part of an upload's bytes; a part of another file starts over
    /// (the page sends one upload at a time; a newer one replaces it). At
    /// most one byte past the largest upload is kept: its reading refuses
    /// it by the core's limit (`check_size`).
    pub(super) fn receive_csv(&mut self, name: String, total: u64, part: Vec<u8>) {
        let most = MAX_CSV_BYTES.max(MAX_TEXT_BYTES as u64) as usize + 1;
        match &mut self.csv_upload {
            Some(upload) if upload.name == name && upload.total == total => {
                let room = most.saturating_sub(upload.bytes.len());
                upload.bytes.extend_from_slice(&part[..part.len().min(room)]);
            }
            _ => {
                let mut bytes = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(256 << 20));
                bytes.extend_from_slice(&part);
                self.csv_upload = Some(Upload { name, total, bytes });
            }
        }
    }

    /// Whether an upload is arriving or being read.
    pub fn reading_csv(&self) -> Option<CsvProgress> {
        if let Some(j) = &self.csv_job {
            return Some(CsvProgress { name: j.name.clone(), receiving: false, progress: j.reader.progress() });
        }
        self.csv_upload.as_ref().map(|u| CsvProgress {
            name: u.name.clone(),
            receiving: true,
            progress: ReadProgress { bytes: u.bytes.len() as u64, total_bytes: u.total, rows: 0 },
        })
    }

    /// Reads the upload for about `budget_ms`; at its end, the run
    /// restarts on it (its outcome), or the error says what is wrong with
    /// it and the run goes on as it was.
    pub(super) async fn read_csv_part(&mut self, budget_ms: f64) -> Option<Result<Option<Outcome>, Error>> {
        let job = self.csv_job.as_mut()?;
        let started = Instant::now();
        let done = loop {
            match job.reader.advance(ROWS_PER_LOOK) {
                Ok(true) => break true,
                Ok(false) if ms_since(started) >= budget_ms.max(MIN_READ_MS) => break false,
                Ok(false) => {}
                Err(err) => {
                    let name = self.csv_job.take().map(|j| j.name).unwrap_or_default();
                    return Some(Err(err.context(format!("`{name}` was not loaded"))));
                }
            }
        };
        if !done {
            return None;
        }
        let job = self.csv_job.take()?;
        let name = job.name;
        let result = async {
            let table = Arc::new(job.reader.finish()?);
            let e = experiment_for_csv(&job.base, &table).map_err(Error::Other)?;
            self.detector.clear();
            self.restart_with_race(&e, Some(CsvData { text: job.text, read: Read::Csv(table) })).await?;
            Ok(Some(Outcome::CsvLoaded(name.clone(), Box::new(e))))
        }
        .await;
        Some(result.map_err(|err: Error| err.context(format!("`{name}` was not loaded"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::default_experiment;
    use crate::model::runner::{Command, FramePlan, FrameReport};
    use stepscope_core::experiment::{DataSource, Loss};
    use stepscope_core::trainer::block_on;

    fn frame(runner: &mut Runner, commands: Vec<Command>) -> FrameReport {
        let plan = FramePlan { commands, running: true, budget_ms: 1.0, ..FramePlan::default() };
        block_on(runner.frame(plan))
    }

    fn csv(rows: usize, classes: usize) -> Vec<u8> {
        let mut text = String::from("x1,x2,x3,y\n");
        for i in 0..rows {
            text += &format!("{},{},{},{}\n", i % 13, (i * 7) % 5, i % 2, i % classes);
        }
        text.into_bytes()
    }

    /// A reset whose data does not load (here a CSV experiment with no
    /// file; on the page, MNIST not fetched) is refused with the run's own
    /// experiment, which goes on training, for the page to show again.
    #[test]
    fn a_reset_whose_data_does_not_load_keeps_the_run_and_says_so() {
        let base = default_experiment();
        let mut runner = Runner::new(&base, None, None).unwrap();
        frame(&mut runner, vec![]);
        let mut other = base.clone();
        other.data.source = DataSource::Csv;
        let report = frame(&mut runner, vec![Command::Reset(other)]);
        match &report.outcomes[0] {
            Ok(Some(crate::model::runner::Outcome::Refused(why, kept))) => {
                assert!(why.contains("no CSV file was given") && why.ends_with("(the run goes on as it was)"), "{why}");
                assert_eq!(**kept, base);
            }
            other => panic!("{other:?}"),
        }
        assert!(report.trained.is_some(), "the kept run trains in the same frame");
        assert_eq!(runner.experiment(), &base);
    }

    /// An upload is read over several frames with its progress in each
    /// report, the run waiting as it was; then the run restarts on it. A
    /// bad file is refused whole with its line, and the run goes on.
    #[test]
    fn an_upload_is_read_in_parts_then_trained_on() {
        let base = default_experiment();
        let mut runner = Runner::new(&base, None, None).unwrap();
        frame(&mut runner, vec![]);
        let before = runner.step_count();
        assert!(before > 0);
        // Sent as the page sends it: parts a frame apart, then the last
        // with the experiment; the run waits as it was meanwhile.
        let file = csv(60_000, 3);
        let total = file.len() as u64;
        let parts: Vec<&[u8]> = file.chunks(file.len() / 3 + 1).collect();
        assert_eq!(parts.len(), 3);
        for (i, part) in parts[..2].iter().enumerate() {
            let report = frame(&mut runner, vec![Command::CsvBytes("big.csv".into(), total, part.to_vec())]);
            let arriving = report.csv_progress.expect("arriving");
            assert!(arriving.receiving && arriving.progress.total_bytes == total, "{arriving:?}");
            assert_eq!(arriving.progress.bytes, parts[..=i].iter().map(|p| p.len() as u64).sum::<u64>());
            assert!(report.trained.is_none(), "the run waits while the file arrives");
        }
        let report = frame(&mut runner, vec![Command::ReadCsv("big.csv".into(), parts[2].to_vec(), base.clone())]);
        let mut progress = vec![report.csv_progress.clone().expect("reading")];
        assert!(!progress[0].receiving);
        let loaded = loop {
            let report = frame(&mut runner, vec![]);
            if let Some(Ok(Some(Outcome::CsvLoaded(name, e)))) = report.outcomes.into_iter().next() {
                assert_eq!(name, "big.csv");
                break e;
            }
            assert!(report.trained.is_none(), "the run waits while the file is read");
            progress.push(report.csv_progress.expect("still reading"));
        };
        assert!(progress.len() >= 3, "read in parts: {progress:?}");
        assert!(progress.windows(2).all(|w| w[1].progress.rows > w[0].progress.rows));
        assert_eq!(runner.step_count(), 0, "a fresh run on the new data");
        assert_eq!((loaded.model.inputs, loaded.loss, loaded.outputs()), (3, Loss::CrossEntropy, 3));
        assert_eq!(loaded.data.source, DataSource::Csv);
        assert_eq!(runner.data().train.rows() + runner.data().test.rows(), 60_000);
        frame(&mut runner, vec![]);
        assert!(runner.step_count() > 0, "it trains on it");

        // A bad line: refused with its line; the run goes on untouched.
        let trained = runner.step_count();
        let mut bad = csv(5000, 2);
        bad.extend_from_slice(b"1,2,oops,0\n");
        frame(&mut runner, vec![Command::ReadCsv("bad.csv".into(), bad, base.clone())]);
        let error = loop {
            let report = frame(&mut runner, vec![]);
            if let Some(outcome) = report.outcomes.into_iter().next() {
                break outcome.unwrap_err().to_string();
            }
        };
        assert!(error.contains("`bad.csv` was not loaded") && error.contains("line 5002, column 3"), "{error}");
        assert_eq!(runner.experiment(), &*loaded);
        assert!(runner.step_count() >= trained);
        // Not text: refused at once.
        let report = frame(&mut runner, vec![Command::ReadCsv("bin.csv".into(), vec![0xff, 0xfe, 0], base)]);
        let error = report.outcomes[0].as_ref().unwrap_err().to_string();
        assert!(error.contains("not UTF-8"), "{error}");
        // An upload the page could not finish sending is dropped; the run
        // goes on.
        let report = frame(&mut runner, vec![Command::CsvBytes("cut.csv".into(), 1000, b"x1,y\n".to_vec())]);
        assert!(report.csv_progress.is_some_and(|p| p.receiving));
        let steps = runner.step_count();
        let report = frame(&mut runner, vec![Command::DropCsvBytes]);
        assert!(report.csv_progress.is_none());
        assert!(runner.step_count() > steps, "training goes on");
    }
}
