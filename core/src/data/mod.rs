//! Training data: the built-in 2-D datasets, CSV files, and the order in
//! which rows are served to the engine.
//!
//! Shapes: N rows, I inputs, T target columns. A target is a float for
//! `mse` and `bce_with_logits`, and a class index stored as f32 for
//! `cross_entropy` (T = 1).

mod batcher;
mod builtin;
mod csv;

pub use batcher::{Batcher, DataPosition};
pub use builtin::generate_points;
pub use csv::{csv_header, csv_rows, parse_csv};

use crate::error::Result;
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
}

/// A point of a built-in dataset on the input plane, with its label
/// (class 0/1, or the regression value in [-1, 1]).
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
}

impl Dataset {
    /// Builds the data of `experiment`: generated from the seed for built-in
    /// sources, parsed from `csv_text` for `"source": "csv"`.
    pub fn load(experiment: &Experiment, csv_text: Option<&str>) -> Result<Dataset> {
        let spec = &experiment.data;
        if spec.source == DataSource::Csv {
            let text = csv_text
                .ok_or_else(|| crate::Error::Experiment("data.source is \"csv\" but no CSV file was given".into()))?;
            let train = parse_csv(text, experiment)?;
            return Ok(Dataset { train, ..Dataset::default() });
        }
        let mut rng = Rng::new(experiment.seed, stream::DATA);
        let mut points = generate_points(spec.source, spec.samples(), spec.noise(), &mut rng);
        // Shuffle, then split, as TensorFlow Playground does.
        let order = Rng::new(experiment.seed, stream::SPLIT).permutation(points.len());
        points = order.iter().map(|&i| points[i as usize]).collect();
        let split = ((points.len() as f64 * spec.train_fraction()).floor() as usize).max(1);
        let test_points = points.split_off(split);
        Ok(Dataset {
            train: points_table(&points, experiment),
            test: points_table(&test_points, experiment),
            train_points: points,
            test_points,
        })
    }
}

/// Turns labelled points into feature rows and targets. Classes are 0/1;
/// `mse` on a classification dataset uses ±1 targets, as TensorFlow
/// Playground does.
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
