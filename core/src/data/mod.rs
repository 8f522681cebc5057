//! Training data: the built-in 2-D datasets, the digits, CSV files, their
//! train/test split, and the order in which rows are served to the engine.
//!
//! Shapes: N rows, I inputs, T target columns. A target is a float for
//! `mse` and `bce_with_logits`, and a class index stored as f32 for
//! `cross_entropy` (T = 1).

mod augment;
mod batcher;
mod builtin;
mod csv;
mod digits;
mod loader;
mod mnist;
mod text;

pub use augment::{gaussian_kernel, row_rng, Augmenter};
pub use batcher::{Batcher, DataPosition};
pub use builtin::generate_points;
pub use csv::{
    csv_header, parse_csv, read_csv, CsvReader, CsvRows, CsvTable, LineTracker, ReadProgress, SharedText,
    MAX_CSV_CLASSES, MAX_CSV_ROWS,
};
pub use digits::{digits_table, DIGITS_CLASSES, DIGITS_MAX_PIXEL, DIGITS_PIXELS, DIGITS_ROWS, DIGITS_SIDE};
pub use loader::{BatchMaker, MadeBatch};
pub use mnist::{
    mnist_file, mnist_table, set_mnist, MNIST_CLASSES, MNIST_FILE, MNIST_GZ_BYTES, MNIST_PIXELS, MNIST_ROWS,
    MNIST_SHA256, MNIST_SIDE,
};
pub use text::{
    set_shakespeare, shakespeare, use_built_in_shakespeare, CheckedText, TokenText, Vocabulary, MAX_TEXT_BYTES,
    MAX_VOCABULARY, SHAKESPEARE_BYTES,
};

use crate::error::{room, Result};
use crate::experiment::{DataSource, Experiment, Loss};
use crate::rng::{stream, Rng};

/// Rows of inputs and targets, row-major.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub inputs: Vec<f32>,  // (N, I)
    pub targets: Vec<f32>, // (N, T)
    pub input_width: usize,
    pub target_width: usize,
}

impl Table {
    pub fn rows(&self) -> usize {
        self.inputs.len().checked_div(self.input_width).unwrap_or(0)
    }

    /// Appends row `row` of `self` to `inputs` and `targets`.
    pub fn copy_row(&self, row: usize, inputs: &mut Vec<f32>, targets: &mut Vec<f32>) {
        let (i, t) = (self.input_width, self.target_width);
        inputs.extend_from_slice(&self.inputs[row * i..(row + 1) * i]);
        targets.extend_from_slice(&self.targets[row * t..(row + 1) * t]);
    }

    /// Keeps the rows `rows` (ascending) and gives the others, in file
    /// order: the split made in place, so that the rows are never held
    /// twice (only the given-away rows are copied).
    fn split_off_rows(&mut self, keep: &[usize], give: &[usize]) -> Result<Table> {
        let (i, t) = (self.input_width, self.target_width);
        let mut other = Table {
            inputs: room(give.len() * i, "the test rows")?,
            targets: room(give.len() * t, "the test rows")?,
            input_width: i,
            target_width: t,
        };
        for &row in give {
            self.copy_row(row, &mut other.inputs, &mut other.targets);
        }
        // Row k of the kept ones comes from row keep[k] >= k: moving them
        // down in order never overwrites one not yet moved.
        for (k, &row) in keep.iter().enumerate() {
            self.inputs.copy_within(row * i..(row + 1) * i, k * i);
            self.targets.copy_within(row * t..(row + 1) * t, k * t);
        }
        for (v, width) in [(&mut self.inputs, i), (&mut self.targets, t)] {
            v.truncate(keep.len() * width);
            v.shrink_to_fit();
        }
        Ok(other)
    }

    /// The rows `rows` of `self`, in that order.
    pub fn select(&self, rows: &[usize]) -> Table {
        let mut table = Table { input_width: self.input_width, target_width: self.target_width, ..Table::default() };
        table.inputs.reserve(rows.len() * self.input_width);
        table.targets.reserve(rows.len() * self.target_width);
        for &row in rows {
            self.copy_row(row, &mut table.inputs, &mut table.targets);
        }
        table
    }
}

/// The train/test split of `n` rows: a permutation from the seed's split
/// stream, its first ⌊n·train_fraction⌋ rows (at least one) training and
/// the rest testing, as TensorFlow Playground splits its points.
pub fn split_rows(experiment: &Experiment, n: usize) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> =
        Rng::new(experiment.seed, stream::SPLIT).permutation(n).into_iter().map(|i| i as usize).collect();
    let split = ((n as f64 * experiment.data.train_fraction()).floor() as usize).clamp(1.min(n), n);
    let test = order.split_off(split);
    (order, test)
}

/// A point of a built-in dataset on the input plane, with its label
/// (the class index 0, 1, 2 …, or the regression value in [-1, 1]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub x1: f64,
    pub x2: f64,
    pub label: f64,
}

/// The data of an experiment, split into train and test.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Dataset {
    pub train: Table,
    pub test: Table,
    /// The raw 2-D points behind `train` and `test` (built-in data only),
    /// for plotting.
    pub train_points: Vec<Point>,
    pub test_points: Vec<Point>,
    /// A text's characters (the transformer's data): token i is the i-th.
    pub vocabulary: Option<Vocabulary>,
    /// Bytes of the file the rows were read from (a CSV or a text), held
    /// while they were parsed (`limits::RunBytes`); 0 for built-in data.
    pub file_bytes: u64,
}

impl Dataset {
    /// Builds the data of `experiment`: generated from the seed for the 2-D
    /// sources, the embedded images for `digits`, from the CSV file read
    /// once (`read_csv`) and held to the experiment here (`CsvTable::check`)
    /// for `"source": "csv"`; then split into train and test (`split_rows`).
    ///
    /// A built-in's rows keep the split's shuffled order. A CSV's keep the
    /// file's order within each part, so that `shuffle: false` still serves
    /// them as written and a CSV with every row training (no
    /// `train_fraction`, as before CSV runs could be split) gives the same
    /// run as it always did.
    pub fn load(experiment: &Experiment, csv: Option<&CsvTable>) -> Result<Dataset> {
        let spec = &experiment.data;
        match spec.source {
            DataSource::Shakespeare => {
                let text = shakespeare().ok_or_else(|| {
                    crate::Error::Experiment(
                        "Tiny Shakespeare is not here yet: the built-in text is fetched with the page (tinyshakespeare.txt), and it did not arrive".into(),
                    )
                })?;
                Dataset::from_text(experiment, std::borrow::Cow::Borrowed(text))
            }
            DataSource::Text => {
                Err(crate::Error::Experiment("data.source is \"text\" but no text file was given (--data FILE)".into()))
            }
            DataSource::Csv => {
                let csv = csv.ok_or_else(|| {
                    crate::Error::Experiment("data.source is \"csv\" but no CSV file was given".into())
                })?;
                Dataset::from_csv(experiment, csv.clone())
            }
            DataSource::Digits | DataSource::Mnist => {
                let table = match spec.source {
                    DataSource::Digits => digits_table(),
                    _ => mnist_table()?,
                };
                let (train, test) = split_rows(experiment, table.rows());
                Ok(Dataset { train: table.select(&train), test: table.select(&test), ..Dataset::default() })
            }
            source => {
                let mut rng = Rng::new(experiment.seed, stream::DATA);
                let points = generate_points(source, spec.samples(), spec.noise(), &mut rng);
                let (train, test) = split_rows(experiment, points.len());
                let train_points: Vec<Point> = train.iter().map(|&i| points[i]).collect();
                let test_points: Vec<Point> = test.iter().map(|&i| points[i]).collect();
                Ok(Dataset {
                    train: points_table(&train_points, experiment),
                    test: points_table(&test_points, experiment),
                    train_points,
                    test_points,
                    ..Dataset::default()
                })
            }
        }
    }
}

impl Dataset {
    /// A CSV file's rows held to `experiment` (`CsvTable::check`) and
    /// split, taking the table: its rows are moved, not copied (as
    /// `load` with the table does).
    pub fn from_csv(experiment: &Experiment, csv: CsvTable) -> Result<Dataset> {
        csv.check(experiment)?;
        let (table, file_bytes) = csv.into_table();
        let (train, test) = split_table(experiment, table)?;
        Ok(Dataset { train, test, file_bytes, ..Dataset::default() })
    }

    /// A text's windows for the transformer of `experiment`, as
    /// `load_text`, read straight from the bytes into rows: an owned text
    /// is dropped once its rows are made, before the split.
    pub fn from_text(experiment: &Experiment, bytes: std::borrow::Cow<'_, [u8]>) -> Result<Dataset> {
        let gpt = gpt_of_text(experiment)?;
        let text = CheckedText::read(&bytes, gpt.context, MAX_VOCABULARY)?;
        check_vocabulary(gpt, &text.vocabulary)?;
        let table = text.table(gpt.context)?;
        let vocabulary = Some(text.vocabulary);
        let file_bytes = match &bytes {
            std::borrow::Cow::Owned(b) => b.len() as u64,
            std::borrow::Cow::Borrowed(_) => 0,
        };
        drop(bytes);
        let (train, test) = split_table(experiment, table)?;
        Ok(Dataset { train, test, vocabulary, file_bytes, ..Dataset::default() })
    }

    /// The windows of `text` as rows for the transformer of `experiment`
    /// (`"source": "text"` or `"shakespeare"`): its `vocab_size` must be
    /// the text's vocabulary. Without `train_fraction` every window trains
    /// in file order; with it, the split is a CSV's (a permutation from
    /// the seed, each part kept in file order).
    pub fn load_text(experiment: &Experiment, text: &TokenText) -> Result<Dataset> {
        let gpt = gpt_of_text(experiment)?;
        check_vocabulary(gpt, &text.vocabulary)?;
        let (train, test) = split_table(experiment, text.table(gpt.context))?;
        Ok(Dataset { train, test, vocabulary: Some(text.vocabulary.clone()), ..Dataset::default() })
    }
}

fn gpt_of_text(experiment: &Experiment) -> Result<&crate::experiment::GptSpec> {
    experiment.gpt().ok_or_else(|| {
        crate::Error::Experiment(format!(
            "data.source {:?} is text: it needs \"model\": {{\"kind\": \"gpt\", …}}",
            experiment.data.source.name()
        ))
    })
}

fn check_vocabulary(gpt: &crate::experiment::GptSpec, vocabulary: &Vocabulary) -> Result<()> {
    if gpt.vocab_size != vocabulary.len() {
        return Err(crate::Error::Experiment(format!(
            "model.vocab_size is {} but the text has {} distinct characters",
            gpt.vocab_size,
            vocabulary.len()
        )));
    }
    Ok(())
}

/// A CSV's or a text's rows split (`split_rows`), each part in file
/// order; every row trains without `train_fraction`.
fn split_table(experiment: &Experiment, mut table: Table) -> Result<(Table, Table)> {
    if experiment.data.train_fraction.is_none() {
        let test = table.select(&[]);
        return Ok((table, test));
    }
    let (mut train, mut test) = split_rows(experiment, table.rows());
    train.sort_unstable();
    test.sort_unstable();
    let test = table.split_off_rows(&train, &test)?;
    Ok((table, test))
}

/// Turns labelled points into feature rows and targets. The target is the
/// class index (or the regression value), except that `mse` on a
/// two-class dataset uses ±1 targets, as TensorFlow Playground does
/// (validation allows `mse` on no other classification data).
fn points_table(points: &[Point], experiment: &Experiment) -> Table {
    let features = experiment.data.features();
    let regression = experiment.data.source.is_regression();
    let mut table = Table { input_width: features.len(), target_width: 1, ..Table::default() };
    for p in points {
        table.inputs.extend(features.iter().map(|f| f.eval(p.x1, p.x2) as f32));
        let target = match (regression, experiment.loss) {
            (false, Loss::Mse) => 2.0 * p.label - 1.0,
            _ => p.label,
        };
        table.targets.push(target as f32);
    }
    table
}
