//! The runs the page kept since it was opened: each run's experiment, its
//! curves (train loss, test loss, accuracy, gradient norm over steps) and
//! its final figures, and what differs between two experiments.
//!
//! Memory is bounded whatever the session's length: each curve is thinned
//! to at most `MAX_POINTS` points (evenly by index, the first and last kept)
//! and the list keeps the newest `MAX_RUNS` runs.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use stepscope_core::Experiment;

/// Points kept per curve of a kept run.
pub const MAX_POINTS: usize = 500;
/// Runs kept; the oldest goes first.
pub const MAX_RUNS: usize = 50;

/// What a run restored from an earlier visit has after its name.
pub const EARLIER: &str = " (earlier visit)";

/// A curve: (step, value) in step order.
pub type Curve = Vec<(u64, f32)>;

/// One run's curves over steps.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCurves {
    /// Full-set train and test loss, and test accuracy (train where there
    /// is no test set), from the views' evaluations.
    pub train_loss: Curve,
    pub test_loss: Curve,
    pub accuracy: Curve,
    /// The global gradient norm of each recorded step.
    pub grad_norm: Curve,
}

impl RunCurves {
    /// Each curve thinned to at most `max` points.
    pub fn downsampled(&self, max: usize) -> RunCurves {
        RunCurves {
            train_loss: downsample(&self.train_loss, max),
            test_loss: downsample(&self.test_loss, max),
            accuracy: downsample(&self.accuracy, max),
            grad_norm: downsample(&self.grad_norm, max),
        }
    }

    pub fn points(&self) -> usize {
        self.train_loss.len() + self.test_loss.len() + self.accuracy.len() + self.grad_norm.len()
    }
}

/// A kept run: what it trained and how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Unique within the page's session (the runs list numbers them).
    pub id: u64,
    /// "Run 3", or a race's lane ("race: lr 0.1").
    pub label: String,
    /// What it trained; None for a run opened from files
    /// (`model::opened`), which has only what its files logged.
    pub experiment: Option<Experiment>,
    pub curves: RunCurves,
    pub steps: u64,
    /// The last step's mini-batch loss, exactly as the engine computed it.
    pub last_step_loss: Option<f32>,
    pub train_loss: Option<f32>,
    pub test_loss: Option<f32>,
    pub accuracy: Option<f32>,
    /// "CPU (WebAssembly)" or "WebGPU".
    pub engine: String,
}

/// The kept runs, oldest first.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunsList {
    runs: VecDeque<RunRecord>,
    next_id: u64,
}

impl RunsList {
    /// A fresh id for a run about to be recorded.
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Keeps `run` (its curves thinned), dropping the oldest past `MAX_RUNS`.
    pub fn push(&mut self, mut run: RunRecord) {
        run.curves = run.curves.downsampled(MAX_POINTS);
        self.runs.push_back(run);
        while self.runs.len() > MAX_RUNS {
            self.runs.pop_front();
        }
    }

    /// Puts `earlier` (a past visit's runs, oldest first) before the runs
    /// kept in this visit, each under a fresh id (ids are this visit's) and
    /// named as from before; the newest `MAX_RUNS` of all stay.
    pub fn restore(&mut self, earlier: Vec<RunRecord>) {
        let now = std::mem::take(&mut self.runs);
        for mut run in earlier {
            run.id = self.next_id();
            if !run.label.ends_with(EARLIER) {
                run.label.push_str(EARLIER);
            }
            self.push(run);
        }
        for run in now {
            self.push(run);
        }
    }

    pub fn clear(&mut self) {
        self.runs.clear();
    }

    /// The runs, oldest first, to store.
    pub fn to_vec(&self) -> Vec<RunRecord> {
        self.runs.iter().cloned().collect()
    }

    pub fn runs(&self) -> impl DoubleEndedIterator<Item = &RunRecord> {
        self.runs.iter()
    }

    pub fn get(&self, id: u64) -> Option<&RunRecord> {
        self.runs.iter().find(|r| r.id == id)
    }

    pub fn len(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// At most `max` of `points`, evenly spaced by index, the first and the
/// last always kept (a run's start and its final value stay exact).
pub fn downsample<T: Clone>(points: &[T], max: usize) -> Vec<T> {
    if points.len() <= max {
        return points.to_vec();
    }
    if max < 2 {
        return points.last().cloned().into_iter().collect();
    }
    let last = points.len() - 1;
    // Index i of the kept points is round(i · last / (max − 1)): strictly
    // increasing since last ≥ max − 1.
    (0..max).map(|i| points[(i * last + (max - 1) / 2) / (max - 1)].clone()).collect()
}

/// What differs between experiments `a` and `b`, one line per field, e.g.
/// "optimizer: adamw → sgd", "lr: 0.02 → 0.1", "model.layers[0].units: 16 →
/// 8". Optimizer fields are named alone (they are what the controls call
/// them); a field only one side has shows "—" on the other.
pub fn experiment_diff(a: &Experiment, b: &Experiment) -> Vec<String> {
    let (mut left, mut right) = (Vec::new(), Vec::new());
    flatten("", &serde_json::to_value(a).unwrap_or(Value::Null), &mut left);
    flatten("", &serde_json::to_value(b).unwrap_or(Value::Null), &mut right);
    let mut keys: Vec<&String> = left.iter().chain(&right).map(|(k, _)| k).collect();
    // Each field once, in the order the JSON lists it.
    let mut seen = std::collections::HashSet::new();
    keys.retain(|k| seen.insert(*k));
    let find = |side: &[(String, String)], key: &str| side.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    keys.into_iter()
        .filter_map(|key| {
            let (from, to) = (find(&left, key), find(&right, key));
            (from != to).then(|| {
                let dash = || "—".to_string();
                format!("{}: {} → {}", field_name(key), from.unwrap_or_else(dash), to.unwrap_or_else(dash))
            })
        })
        .collect()
}

/// How the diff names a JSON path: the optimizer's kind is "optimizer",
/// its other fields go by their own name.
fn field_name(path: &str) -> &str {
    match path.strip_prefix("optimizer.") {
        Some("kind") => "optimizer",
        Some(field) => field,
        None => path,
    }
}

fn flatten(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
    let join = |key: &str| if path.is_empty() { key.to_string() } else { format!("{path}.{key}") };
    match value {
        Value::Object(fields) => fields.iter().for_each(|(k, v)| flatten(&join(k), v, out)),
        // A short list of numbers (betas, features) reads best whole.
        Value::Array(items) if items.iter().all(|v| !v.is_object() && !v.is_array()) => {
            let items: Vec<String> = items.iter().map(scalar).collect();
            out.push((path.to_string(), format!("[{}]", items.join(", "))));
        }
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| flatten(&format!("{path}[{i}]"), v, out)),
        other => out.push((path.to_string(), scalar(other))),
    }
}

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "none".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::{default_experiment, set_lr, set_optimizer};

    fn record(id: u64, steps: usize) -> RunRecord {
        let curve: Curve = (0..steps as u64).map(|s| (s, s as f32)).collect();
        RunRecord {
            id,
            label: format!("Run {id}"),
            experiment: Some(default_experiment()),
            curves: RunCurves {
                train_loss: curve.clone(),
                test_loss: curve.clone(),
                accuracy: curve.clone(),
                grad_norm: curve,
            },
            steps: steps as u64,
            last_step_loss: None,
            train_loss: None,
            test_loss: None,
            accuracy: None,
            engine: "CPU (WebAssembly)".into(),
        }
    }

    #[test]
    fn the_diff_names_the_optimizer_and_its_learning_rate() {
        let a = default_experiment();
        let mut b = a.clone();
        set_lr(&mut b, 0.1).unwrap();
        assert_eq!(experiment_diff(&a, &b), vec!["lr: 0.02 → 0.1".to_string()]);
        let mut c = a.clone();
        set_optimizer(&mut c, "sgd").unwrap();
        let diff = experiment_diff(&a, &c);
        assert!(diff.contains(&"optimizer: adamw → sgd".to_string()), "{diff:?}");
        assert!(diff.contains(&"momentum: — → 0.9".to_string()), "{diff:?}");
        assert!(diff.contains(&"betas: [0.9, 0.999] → —".to_string()), "{diff:?}");
        assert!(experiment_diff(&a, &a).is_empty());
    }

    #[test]
    fn the_diff_names_nested_fields_by_path() {
        let a = default_experiment();
        let mut b = a.clone();
        b.model.layers[1].units = 8;
        b.seed = 7;
        b.batch_size = 64;
        b.clip_grad_norm = Some(1.0);
        let mut diff = experiment_diff(&a, &b);
        diff.sort();
        assert_eq!(
            diff,
            vec![
                "batch_size: 32 → 64".to_string(),
                "clip_grad_norm: none → 1.0".to_string(),
                "model.layers[1].units: 16 → 8".to_string(),
                "seed: 1 → 7".to_string(),
            ]
        );
    }

    #[test]
    fn downsampling_keeps_the_ends_and_the_bound() {
        let points: Vec<u64> = (0..10_001).collect();
        let kept = downsample(&points, MAX_POINTS);
        assert_eq!(kept.len(), MAX_POINTS);
        assert_eq!((kept[0], *kept.last().unwrap()), (0, 10_000));
        assert!(kept.windows(2).all(|w| w[0] < w[1]), "in order, no repeats");
        // Evenly spaced: gaps differ by at most one.
        let gaps: Vec<u64> = kept.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().max().unwrap() - gaps.iter().min().unwrap() <= 1, "{gaps:?}");
        assert_eq!(downsample(&points[..7], MAX_POINTS), points[..7].to_vec());
        assert_eq!(downsample(&points[..7], 1), vec![6]);
        assert_eq!(downsample(&points[..7], 2), vec![0, 6]);
    }

    #[test]
    fn an_earlier_visits_runs_come_first_under_fresh_ids() {
        let mut list = RunsList::default();
        let live = list.next_id();
        let now = list.next_id();
        list.push(record(now, 10));
        let earlier: Vec<RunRecord> = (1..=MAX_RUNS as u64).map(|id| record(id, 3)).collect();
        list.restore(earlier);
        assert_eq!(list.len(), MAX_RUNS, "the oldest earlier run went");
        let last = list.runs().last().unwrap();
        assert_eq!((last.id, last.label.as_str()), (now, "Run 2"), "this visit's run stays the newest");
        let ids: Vec<u64> = list.runs().map(|r| r.id).collect();
        assert!(!ids.contains(&live), "no earlier run takes an id in use");
        assert_eq!(ids.iter().collect::<std::collections::HashSet<_>>().len(), ids.len());
        assert_eq!(list.runs().next().unwrap().label, "Run 2 (earlier visit)");
        let back: Vec<RunRecord> = rmp_serde::from_slice(&rmp_serde::to_vec_named(&list.to_vec()).unwrap()).unwrap();
        assert_eq!(back, list.to_vec(), "records survive the store's encoding");
        list.restore(back[..1].to_vec());
        assert!(list.runs().all(|r| !r.label.ends_with(" (earlier visit) (earlier visit)")));
        list.clear();
        assert!(list.is_empty());
    }

    #[test]
    fn the_list_keeps_the_newest_runs_thinned() {
        let mut list = RunsList::default();
        for _ in 0..MAX_RUNS + 7 {
            let id = list.next_id();
            list.push(record(id, 2_000));
        }
        assert_eq!(list.len(), MAX_RUNS);
        let ids: Vec<u64> = list.runs().map(|r| r.id).collect();
        assert_eq!(ids, (8..=(MAX_RUNS as u64 + 7)).collect::<Vec<_>>());
        assert!(list.runs().all(|r| r.curves.train_loss.len() == MAX_POINTS && r.curves.points() == 4 * MAX_POINTS));
        assert_eq!(list.get(8).map(|r| r.curves.grad_norm.last().copied()), Some(Some((1_999, 1_999.0))));
        assert!(list.get(7).is_none(), "the oldest went first");
    }
}
