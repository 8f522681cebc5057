//! The data an experiment loads: the three-class spiral, the digits, and
//! the CSV's train/test split; and that a run on each trains, keeps its
//! data position across a checkpoint, and is the same run on the GPU.

mod common;

use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::{read_csv, split_rows, Dataset, DIGITS_PIXELS, DIGITS_ROWS};
use stepscope_core::metrics::class_metrics;
use stepscope_core::{CpuEngine, Experiment};

fn experiment(seed: u64, data: &str, loss: &str, inputs: usize, outputs: usize) -> Experiment {
    Experiment::from_json(&format!(
        r#"{{"seed": {seed}, "model": {{"inputs": {inputs}, "layers": [{{"units": 16, "activation": "tanh"}},
            {{"units": {outputs}, "activation": "linear"}}]}}, "loss": "{loss}",
            "optimizer": {{"kind": "adam", "lr": 0.02}}, "batch_size": 16, "data": {data}}}"#
    ))
    .unwrap()
}

fn class_counts(targets: &[f32], classes: usize) -> Vec<usize> {
    let mut counts = vec![0; classes];
    targets.iter().for_each(|&t| counts[t as usize] += 1);
    counts
}

#[test]
fn spiral3_is_seeded_balanced_and_split() {
    let data = r#"{"source": "spiral3", "samples": 301, "noise": 0.1, "train_fraction": 0.6}"#;
    let e = experiment(3, data, "cross_entropy", 2, 3);
    let a = Dataset::load(&e, None).unwrap();
    assert_eq!(a, Dataset::load(&e, None).unwrap());
    assert_ne!(a, Dataset::load(&experiment(4, data, "cross_entropy", 2, 3), None).unwrap());
    assert_eq!((a.train.rows(), a.test.rows()), (180, 121));
    assert_eq!((a.train_points.len(), a.test_points.len()), (180, 121));
    let all: Vec<f32> = a.train.targets.iter().chain(&a.test.targets).copied().collect();
    assert_eq!(class_counts(&all, 3), [101, 100, 100]);
    // The targets are the points' labels, the class index.
    for (p, t) in a.train_points.iter().zip(&a.train.targets) {
        assert_eq!(p.label as f32, *t);
    }
    // Both parts hold every class: the split is shuffled.
    assert!(class_counts(&a.test.targets, 3).iter().all(|&c| c > 20), "{:?}", class_counts(&a.test.targets, 3));
}

#[test]
fn digits_load_scaled_and_split_from_the_seed() {
    let e = experiment(1, r#"{"source": "digits", "train_fraction": 0.8}"#, "cross_entropy", 64, 10);
    let d = Dataset::load(&e, None).unwrap();
    assert_eq!((d.train.rows(), d.test.rows()), (1437, 360));
    assert_eq!((d.train.input_width, d.train.target_width), (DIGITS_PIXELS, 1));
    assert!(d.train_points.is_empty() && d.test_points.is_empty());
    assert!(d.train.inputs.iter().chain(&d.test.inputs).all(|v| (0.0..=1.0).contains(v) && (v * 16.0).fract() == 0.0));
    let all: Vec<f32> = d.train.targets.iter().chain(&d.test.targets).copied().collect();
    assert_eq!(class_counts(&all, 10), [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
    assert!(class_counts(&d.test.targets, 10).iter().all(|&c| c > 15));
    assert_eq!(d, Dataset::load(&e, None).unwrap());
    let other = experiment(2, r#"{"source": "digits", "train_fraction": 0.8}"#, "cross_entropy", 64, 10);
    assert_ne!(d.test, Dataset::load(&other, None).unwrap().test);
    // The split is a partition of the 1,797 images.
    let (train, test) = split_rows(&e, DIGITS_ROWS);
    let mut every: Vec<usize> = train.iter().chain(&test).copied().collect();
    every.sort_unstable();
    assert_eq!(every, (0..DIGITS_ROWS).collect::<Vec<_>>());
}

/// A CSV whose row i has x1 = i, so each row names itself.
fn numbered_csv(rows: usize) -> String {
    let mut csv = String::from("x1,x2,y\n");
    for i in 0..rows {
        csv += &format!("{i},{},{}\n", (i as f32 * 0.7).sin(), i % 2);
    }
    csv
}

fn row_ids(table: &stepscope_core::data::Table) -> Vec<usize> {
    table.inputs.chunks_exact(2).map(|r| r[0] as usize).collect()
}

#[test]
fn a_csv_splits_like_the_built_ins() {
    let csv = numbered_csv(50);
    let split = |seed, fraction: &str| {
        let data = format!(r#"{{"source": "csv"{fraction}}}"#);
        Dataset::load(&experiment(seed, &data, "bce_with_logits", 2, 1), Some(&read_csv(&csv).unwrap())).unwrap()
    };
    let d = split(5, r#", "train_fraction": 0.7"#);
    let (train, test) = (row_ids(&d.train), row_ids(&d.test));
    assert_eq!((train.len(), test.len()), (35, 15));
    // Disjoint, together every row, each part in file order.
    let mut every: Vec<usize> = train.iter().chain(&test).copied().collect();
    every.sort_unstable();
    assert_eq!(every, (0..50).collect::<Vec<_>>());
    assert!(train.windows(2).all(|w| w[0] < w[1]) && test.windows(2).all(|w| w[0] < w[1]));
    // Targets travel with their rows.
    assert!(d.test.targets.iter().zip(&test).all(|(&y, &i)| y == (i % 2) as f32));
    assert_eq!(split(5, r#", "train_fraction": 0.7"#), d, "same seed, same split");
    assert_ne!(row_ids(&split(6, r#", "train_fraction": 0.7"#).test), test, "another seed, another split");
    // No train_fraction: every row trains, in file order, as CSV runs
    // always did; 1.0 is the same.
    let whole = split(5, "");
    assert_eq!((row_ids(&whole.train), whole.test.rows()), ((0..50).collect(), 0));
    assert_eq!(split(5, r#", "train_fraction": 1.0"#), whole);
    // At least one row trains.
    assert_eq!(split(5, r#", "train_fraction": 0.001"#).train.rows(), 1);
}

/// A split CSV run resumes exactly from its checkpoint: the row counter
/// counts its training rows.
#[test]
fn a_split_csv_run_resumes_exactly() {
    let csv = numbered_csv(40);
    let e = experiment(9, r#"{"source": "csv", "train_fraction": 0.75}"#, "bce_with_logits", 2, 1);
    let data = || Dataset::load(&e, Some(&read_csv(&csv).unwrap())).unwrap();
    let mut straight = CpuEngine::new(&e, data()).unwrap();
    for _ in 0..7 {
        straight.step().unwrap();
    }
    let saved = save_checkpoint(&straight.state()).unwrap();
    let mut resumed = CpuEngine::from_state(load_checkpoint(&saved).unwrap(), data()).unwrap();
    for _ in 0..5 {
        assert_eq!(straight.step().unwrap().loss.to_bits(), resumed.step().unwrap().loss.to_bits());
    }
    assert_eq!(straight.state(), resumed.state());
    assert_eq!(straight.state().data_position.rows_consumed, 12 * 16);
}

#[test]
fn spiral3_trains_well_above_chance() {
    let data = r#"{"source": "spiral3", "samples": 300, "noise": 0.05, "train_fraction": 0.8}"#;
    let e = experiment(2, data, "cross_entropy", 2, 3);
    let mut engine = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
    for _ in 0..600 {
        engine.step().unwrap();
    }
    let test = engine.data().test.clone();
    let metrics = class_metrics(&engine.state().params, engine.layout(), &e, &test).unwrap();
    assert_eq!(metrics.rows(), 60);
    assert!(metrics.accuracy().unwrap() > 0.7, "{:?}", metrics.per_class_accuracy());
}

/// The GPU engine trains the new sources as the CPU engine does (within
/// the twin tolerances, `stepscope_core::trainer::conformance`).
#[test]
fn digits_and_spiral3_train_alike_on_both_engines() {
    let digits = experiment(5, r#"{"source": "digits", "train_fraction": 0.8}"#, "cross_entropy", 64, 10);
    let spiral3 = experiment(5, r#"{"source": "spiral3", "samples": 200}"#, "cross_entropy", 2, 3);
    for (name, e) in [("digits", digits), ("spiral3", spiral3)] {
        let mut cpu = common::engine(&e);
        let cpu_metrics: Vec<_> = (0..20).map(|_| cpu.step().unwrap()).collect();
        let mut gpu = common::gpu_engine(&e);
        let gpu_metrics = gpu.run(20, 5).unwrap();
        common::assert_same_run(name, &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
    }
}
