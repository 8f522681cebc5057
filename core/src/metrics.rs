//! Classification metrics of a model on a table: the confusion matrix
//! (counts [true][predicted]), per-class accuracy, and the misclassified
//! rows. Rows go through the network in chunks, as `engine::Evaluator`
//! takes them, and a row's class is read as `Evaluation::accuracy` reads
//! it, so `ClassMetrics::accuracy` is the evaluation's accuracy.
//!
//! What is a class, per loss (the run's `classes`):
//! - `cross_entropy`: one output unit per class; predicted = the first
//!   largest logit, true = the target index;
//! - `bce_with_logits` with one output: class 1 where the logit is > 0,
//!   true class 1 where the target is > 0.5;
//! - `mse` on two-class built-in data (±1 targets): class 1 where the
//!   output is > 0, true class 1 where the target is > 0.
//!
//! Regression (and a CSV's several bce or mse targets) has no classes.

use crate::data::Table;
use crate::engine::EVAL_CHUNK_ROWS;
use crate::engine::{forward_pass, Activations};
use crate::experiment::{DataSource, Experiment, Loss};
use crate::model::Layout;

/// Most misclassified rows listed (the first ones, in table order); the
/// confusion matrix counts them all. The page draws at most a grid of them.
pub const MAX_MISCLASSIFIED: usize = 1000;

/// The classes of `e`'s run, or None when it is not a classification.
pub fn classes(e: &Experiment) -> Option<usize> {
    let regression = e.data.source.is_regression() || (e.data.source == DataSource::Csv && e.loss == Loss::Mse);
    match e.loss {
        _ if regression => None,
        Loss::CrossEntropy => Some(e.outputs()),
        Loss::BceWithLogits | Loss::Mse if e.outputs() == 1 => Some(2),
        Loss::BceWithLogits | Loss::Mse => None,
    }
}

/// The class a row of outputs predicts (`classes` says how).
pub fn predicted_class(outputs: &[f32], loss: Loss) -> usize {
    match loss {
        Loss::CrossEntropy => {
            outputs.iter().enumerate().fold(0, |best, (i, &v)| if v > outputs[best] { i } else { best })
        }
        Loss::BceWithLogits | Loss::Mse => usize::from(outputs[0] > 0.0),
    }
}

/// The class a row of targets holds.
pub fn true_class(targets: &[f32], loss: Loss) -> usize {
    match loss {
        Loss::CrossEntropy => targets[0] as usize,
        Loss::BceWithLogits => usize::from(targets[0] > 0.5),
        Loss::Mse => usize::from(targets[0] > 0.0),
    }
}

/// A row classified wrongly: its index in the table, its class and the
/// class predicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Misclassified {
    pub row: usize,
    pub truth: usize,
    pub predicted: usize,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassMetrics {
    pub classes: usize,
    /// (C, C) row-major: `confusion[truth * classes + predicted]` rows.
    pub confusion: Vec<u64>,
    /// The first `MAX_MISCLASSIFIED` misclassified rows, in table order.
    pub misclassified: Vec<Misclassified>,
}

impl ClassMetrics {
    pub fn new(classes: usize) -> ClassMetrics {
        ClassMetrics { classes, confusion: vec![0; classes * classes], misclassified: Vec::new() }
    }

    /// The metrics of `outputs` (N, O) against `targets` (N, T) for `e`'s
    /// run; None when the run is not a classification.
    pub fn from_outputs(outputs: &[f32], targets: &[f32], e: &Experiment) -> Option<ClassMetrics> {
        let mut metrics = ClassMetrics::new(classes(e)?);
        metrics.add(outputs, targets, 0, e);
        Some(metrics)
    }

    /// Counts rows `first_row..` of a table: their outputs (n, O) and
    /// targets (n, T). A target outside the classes (which validated data
    /// never holds) is counted as nothing.
    pub fn add(&mut self, outputs: &[f32], targets: &[f32], first_row: usize, e: &Experiment) {
        let (width, c) = (e.outputs().max(1), self.classes);
        let rows = outputs.len() / width;
        let target_width = targets.len().checked_div(rows).unwrap_or(1).max(1);
        for (i, (y, t)) in outputs.chunks_exact(width).zip(targets.chunks_exact(target_width)).enumerate() {
            let (truth, predicted) = (true_class(t, e.loss), predicted_class(y, e.loss));
            if truth >= c || predicted >= c {
                continue;
            }
            self.confusion[truth * c + predicted] += 1;
            if truth != predicted && self.misclassified.len() < MAX_MISCLASSIFIED {
                self.misclassified.push(Misclassified { row: first_row + i, truth, predicted });
            }
        }
    }

    /// Rows of class `truth` predicted as `predicted`.
    pub fn count(&self, truth: usize, predicted: usize) -> u64 {
        self.confusion[truth * self.classes + predicted]
    }

    /// Rows counted.
    pub fn rows(&self) -> u64 {
        self.confusion.iter().sum()
    }

    /// Rows counted of class `truth`.
    pub fn class_rows(&self, truth: usize) -> u64 {
        self.confusion[truth * self.classes..(truth + 1) * self.classes].iter().sum()
    }

    /// Rows classified wrongly (all of them, not only those listed).
    pub fn wrong(&self) -> u64 {
        self.rows() - (0..self.classes).map(|k| self.count(k, k)).sum::<u64>()
    }

    /// Share of rows classified right; None with no rows.
    pub fn accuracy(&self) -> Option<f64> {
        let rows = self.rows();
        (rows > 0).then(|| (rows - self.wrong()) as f64 / rows as f64)
    }

    /// Per class, the share of its rows classified right (recall); None
    /// for a class with no rows.
    pub fn per_class_accuracy(&self) -> Vec<Option<f64>> {
        (0..self.classes)
            .map(|k| {
                let rows = self.class_rows(k);
                (rows > 0).then(|| self.count(k, k) as f64 / rows as f64)
            })
            .collect()
    }
}

/// Classification metrics taken some rows at a time (`advance`), as
/// `engine::Evaluator` takes loss and accuracy, so the page can yield
/// between chunks.
pub struct ClassEvaluator {
    rows: usize,
    done: usize,
    chunk: usize,
    acts: Activations,
    metrics: ClassMetrics,
}

impl ClassEvaluator {
    /// For a table of `rows` rows, at most `chunk` rows at once; None when
    /// `e`'s run is not a classification.
    pub fn new(layout: &Layout, e: &Experiment, rows: usize, chunk: usize) -> Option<ClassEvaluator> {
        ClassEvaluator::try_new(layout, e, rows, chunk).expect("a machine with room for one chunk's activations")
    }

    /// `new`, or an error when the memory for a chunk's activations is
    /// not there.
    pub fn try_new(
        layout: &Layout,
        e: &Experiment,
        rows: usize,
        chunk: usize,
    ) -> crate::error::Result<Option<ClassEvaluator>> {
        let Some(classes) = classes(e) else { return Ok(None) };
        let chunk = chunk.clamp(1, EVAL_CHUNK_ROWS).min(rows.max(1));
        let acts = Activations::try_new(layout, chunk)?;
        Ok(Some(ClassEvaluator { rows, done: 0, chunk, acts, metrics: ClassMetrics::new(classes) }))
    }

    /// For metrics fed by `observe` alone: no activations of its own.
    pub fn observing(layout: &Layout, e: &Experiment, rows: usize) -> crate::error::Result<Option<ClassEvaluator>> {
        let Some(classes) = classes(e) else { return Ok(None) };
        let acts = Activations::try_new(layout, 0)?;
        Ok(Some(ClassEvaluator { rows, done: 0, chunk: 1, acts, metrics: ClassMetrics::new(classes) }))
    }

    /// Classifies up to `max_rows` more rows (at least one chunk's worth
    /// where rows are left); true when the table is done.
    pub fn advance(&mut self, params: &[f32], layout: &Layout, e: &Experiment, table: &Table, max_rows: usize) -> bool {
        let (i, t) = (table.input_width, table.target_width);
        let end = self.done.saturating_add(max_rows.max(1)).min(self.rows);
        while self.done < end {
            let (start, n) = (self.done, self.chunk.min(end - self.done));
            self.acts.resize(layout, n);
            forward_pass(&mut self.acts, params, &table.inputs[start * i..(start + n) * i], layout, e);
            self.metrics.add(self.acts.output(), &table.targets[start * t..(start + n) * t], start, e);
            self.done += n;
        }
        self.done == self.rows
    }

    /// Takes the outputs of rows `start..` of `table` computed elsewhere
    /// (`Evaluator::advance_with`), in row order: the same metrics as
    /// `advance` without a forward pass of its own. Rows out of order are
    /// refused (false), the metrics unchanged.
    pub fn observe(&mut self, outputs: &[f32], table: &Table, start: usize, e: &Experiment) -> bool {
        let n = outputs.len().checked_div(e.outputs()).unwrap_or(0);
        if start != self.done || start + n > self.rows {
            return false;
        }
        let t = table.target_width;
        self.metrics.add(outputs, &table.targets[start * t..(start + n) * t], start, e);
        self.done += n;
        true
    }

    /// The metrics over the whole table, once it is done.
    pub fn result(&self) -> Option<&ClassMetrics> {
        (self.done == self.rows).then_some(&self.metrics)
    }
}

/// The classification metrics of `params` over `table` at once; None when
/// `e`'s run is not a classification.
pub fn class_metrics(params: &[f32], layout: &Layout, e: &Experiment, table: &Table) -> Option<ClassMetrics> {
    let mut evaluator = ClassEvaluator::new(layout, e, table.rows(), EVAL_CHUNK_ROWS)?;
    evaluator.advance(params, layout, e, table, usize::MAX);
    evaluator.result().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(source: &str, loss: &str, outputs: usize) -> Experiment {
        Experiment::from_json(&format!(
            r#"{{"model": {{"inputs": 2, "layers": [{{"units": {outputs}, "activation": "linear"}}]}},
                "loss": "{loss}", "optimizer": {{"kind": "sgd", "lr": 0.1}}, "batch_size": 4,
                "data": {{"source": "{source}"}}}}"#
        ))
        .unwrap()
    }

    /// Six rows of three classes, worked by hand:
    /// row 0 class 0, logits (2, 1, 0) → 0 right;
    /// row 1 class 0, (0, 3, 1) → 1 wrong;
    /// row 2 class 1, (1, 1, 0) → 0 wrong (a tie goes to the first);
    /// row 3 class 1, (0, 5, 1) → 1 right;
    /// row 4 class 2, (0, 0, 1) → 2 right;
    /// row 5 class 2, (0, 2, 1) → 1 wrong.
    #[test]
    fn a_hand_made_three_class_case() {
        let e = experiment("spiral3", "cross_entropy", 3);
        let outputs = [2.0, 1.0, 0.0, 0.0, 3.0, 1.0, 1.0, 1.0, 0.0, 0.0, 5.0, 1.0, 0.0, 0.0, 1.0, 0.0, 2.0, 1.0];
        let targets = [0.0, 0.0, 1.0, 1.0, 2.0, 2.0];
        let m = ClassMetrics::from_outputs(&outputs, &targets, &e).unwrap();
        assert_eq!(m.confusion, vec![1, 1, 0, 1, 1, 0, 0, 1, 1]);
        assert_eq!((m.rows(), m.wrong(), m.accuracy()), (6, 3, Some(0.5)));
        assert_eq!(m.per_class_accuracy(), vec![Some(0.5), Some(0.5), Some(0.5)]);
        let wrong = |row, truth, predicted| Misclassified { row, truth, predicted };
        assert_eq!(m.misclassified, vec![wrong(1, 0, 1), wrong(2, 1, 0), wrong(5, 2, 1)]);
        // A class with no rows has no accuracy; rows after the first keep
        // their table index.
        let mut m = ClassMetrics::new(3);
        m.add(&outputs[..6], &targets[..2], 10, &e);
        assert_eq!(m.per_class_accuracy(), vec![Some(0.5), None, None]);
        assert_eq!(m.misclassified, vec![wrong(11, 0, 1)]);
    }

    #[test]
    fn binary_losses_read_classes_as_accuracy_does() {
        // bce: logit > 0 is class 1; mse on ±1 targets: output > 0.
        let bce = experiment("xor", "bce_with_logits", 1);
        let m = ClassMetrics::from_outputs(&[0.3, -2.0, -0.1, 4.0], &[1.0, 1.0, 0.0, 0.0], &bce).unwrap();
        assert_eq!(m.confusion, vec![1, 1, 1, 1]);
        let mse = experiment("xor", "mse", 1);
        let m = ClassMetrics::from_outputs(&[0.3, -2.0, -0.1], &[1.0, 1.0, -1.0], &mse).unwrap();
        assert_eq!(m.confusion, vec![1, 0, 1, 1]);
        assert_eq!(m.per_class_accuracy(), vec![Some(1.0), Some(0.5)]);
        assert_eq!(classes(&experiment("reg_plane", "mse", 1)), None);
        assert_eq!(classes(&experiment("spiral", "cross_entropy", 2)), Some(2));
    }

    /// Through the network, in chunks: the same figures as at once, and the
    /// same accuracy as the evaluator's.
    #[test]
    fn chunked_metrics_equal_the_evaluation() {
        let e = experiment("spiral3", "cross_entropy", 3);
        let data = crate::data::Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = crate::TrainState::fresh(&e).params;
        let whole = class_metrics(&params, &layout, &e, &data.test).unwrap();
        let mut parts = ClassEvaluator::new(&layout, &e, data.test.rows(), 7).unwrap();
        while !parts.advance(&params, &layout, &e, &data.test, 7) {
            assert!(parts.result().is_none());
        }
        assert_eq!(parts.result(), Some(&whole));
        assert_eq!(whole.rows(), data.test.rows() as u64);
        let accuracy = crate::engine::evaluate(&params, &layout, &e, &data.test).unwrap().accuracy.unwrap();
        assert!((whole.accuracy().unwrap() - f64::from(accuracy)).abs() < 1e-6);
        assert!(whole.misclassified.iter().all(|m| m.truth != m.predicted && m.row < data.test.rows()));
        assert_eq!(whole.misclassified.len() as u64, whole.wrong());
    }

    /// Fed by the evaluator's own forward passes (`Evaluator::advance_with`,
    /// in chunks): the same metrics as by their own, and rows out of order
    /// are refused.
    #[test]
    fn metrics_observed_from_the_evaluation_equal_their_own() {
        let e = experiment("spiral3", "cross_entropy", 3);
        let data = crate::data::Dataset::load(&e, None).unwrap();
        let layout = Layout::new(&e);
        let params = crate::TrainState::fresh(&e).params;
        let whole = class_metrics(&params, &layout, &e, &data.test).unwrap();
        let rows = data.test.rows();
        let mut observed = ClassEvaluator::observing(&layout, &e, rows).unwrap().unwrap();
        let mut evaluator = crate::engine::Evaluator::new(&layout, rows, 7);
        let mut refused = 0;
        while !evaluator.advance_with(&params, &layout, &e, &data.test, 7, |start, outputs| {
            assert!(observed.observe(outputs, &data.test, start, &e));
            refused += usize::from(observed.observe(outputs, &data.test, start, &e));
        }) {}
        assert_eq!((observed.result(), refused), (Some(&whole), 0));
        let mut plain = crate::engine::Evaluator::new(&layout, rows, 7);
        while !plain.advance(&params, &layout, &e, &data.test, 7) {}
        assert_eq!(evaluator.result(), plain.result(), "the evaluation itself is unchanged");
    }
}
