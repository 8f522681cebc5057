//! Whole runs on the CPU engine: loss falls, determinism, exact resume
//! through a checkpoint, and gradient accumulation.

mod common;

use serde_json::json;
use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::Dataset;
use stepscope_core::engine::{evaluate, Evaluator, LAYER_PART_MACS};
use stepscope_core::model::Layout;
use stepscope_core::{CpuEngine, StepMetrics};

fn run(engine: &mut CpuEngine, steps: usize) -> Vec<StepMetrics> {
    (0..steps).map(|_| engine.step().unwrap()).collect()
}

#[test]
fn circle_run_learns() {
    let e = common::experiment(json!({
        "model": {"inputs": 2, "layers": [
            {"units": 16, "activation": "tanh"}, {"units": 16, "activation": "tanh"},
            {"units": 1, "activation": "linear"}]},
        "optimizer": {"kind": "adamw", "lr": 0.03},
        "data": {"source": "circle", "samples": 300, "noise": 0.0, "train_fraction": 0.8}
    }));
    let mut engine = common::engine(&e);
    let before = engine.evaluate(&engine.data().test.clone()).unwrap();
    let metrics = run(&mut engine, 400);
    let after = engine.evaluate(&engine.data().test.clone()).unwrap();
    assert!(after.loss < 0.5 * before.loss, "test loss {} -> {}", before.loss, after.loss);
    assert!(after.accuracy.unwrap() > 0.9, "accuracy {:?}", after.accuracy);
    let first: f32 = metrics[..20].iter().map(|m| m.loss).sum();
    let last: f32 = metrics[380..].iter().map(|m| m.loss).sum();
    assert!(last < 0.5 * first);
}

#[test]
fn same_seed_same_run_bit_for_bit_and_other_seed_differs() {
    let e = common::experiment(json!({"clip_grad_norm": 0.5, "grad_accumulation": 2}));
    let (mut a, mut b) = (common::engine(&e), common::engine(&e));
    let (ma, mb) = (run(&mut a, 30), run(&mut b, 30));
    let bits = |m: &[StepMetrics]| m.iter().map(|m| (m.loss.to_bits(), m.grad_norm.to_bits())).collect::<Vec<_>>();
    assert_eq!(bits(&ma), bits(&mb));
    assert_eq!(a.state(), b.state());
    let mut other = common::experiment(json!({"seed": 8, "clip_grad_norm": 0.5, "grad_accumulation": 2}));
    other.seed = 8;
    let mut c = common::engine(&other);
    assert_ne!(bits(&run(&mut c, 30)), bits(&ma));
}

/// N steps, save, load, M more equals N + M straight, for every optimizer
/// and with shuffling across epoch boundaries (160 train rows, batch 16·k).
#[test]
fn checkpoint_resume_is_exact() {
    for optimizer in [
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true}),
        json!({"kind": "adam", "lr": 0.01, "weight_decay": 0.001}),
        json!({"kind": "adamw", "lr": 0.01}),
        json!({"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}),
    ] {
        let e = common::experiment(json!({
            "optimizer": optimizer,
            "schedule": {"kind": "warmup_cosine", "warmup_steps": 5, "total_steps": 40},
            "grad_accumulation": 3, "clip_grad_norm": 1.0
        }));
        let (n, m) = (13, 17);
        let mut straight = common::engine(&e);
        let straight_metrics = run(&mut straight, n + m);

        let mut first = common::engine(&e);
        run(&mut first, n);
        let bytes = save_checkpoint(&first.state()).unwrap();
        let state = load_checkpoint(&bytes).unwrap();
        assert_eq!(state, first.state());
        let data = Dataset::load(&state.experiment, None).unwrap();
        let mut resumed = CpuEngine::from_state(state, data).unwrap();
        let resumed_metrics = run(&mut resumed, m);
        assert_eq!(
            resumed_metrics,
            straight_metrics[n..]
                .iter()
                .map(|m| StepMetrics { phases: Default::default(), ..m.clone() })
                .collect::<Vec<_>>()
                .iter()
                .zip(&resumed_metrics)
                .map(|(s, r)| StepMetrics { phases: r.phases, ..s.clone() })
                .collect::<Vec<_>>(),
            "{optimizer}"
        );
        assert_eq!(resumed.state(), straight.state(), "{optimizer}");
    }
}

/// k micro-batches of b rows give the update of one batch of k·b rows:
/// each micro-loss is scaled by 1/k, so the summed gradient is the mean
/// over k·b rows. Summation order differs, so agreement is to f32
/// rounding: 1e-5 relative on the gradient norm and 1e-5 on parameters.
#[test]
fn accumulation_equals_one_large_batch() {
    let big =
        common::experiment(json!({"batch_size": 32, "data": {"source": "spiral", "samples": 200, "shuffle": false}}));
    let small = common::experiment(
        json!({"batch_size": 8, "grad_accumulation": 4, "data": {"source": "spiral", "samples": 200, "shuffle": false}}),
    );
    let (mut a, mut b) = (common::engine(&big), common::engine(&small));
    for _ in 0..10 {
        let (ma, mb) = (a.step().unwrap(), b.step().unwrap());
        assert!((ma.grad_norm - mb.grad_norm).abs() <= 1e-5 * ma.grad_norm, "{} vs {}", ma.grad_norm, mb.grad_norm);
        assert!((ma.loss - mb.loss).abs() <= 1e-5 * ma.loss);
    }
    for (x, y) in a.params().iter().zip(b.params()) {
        assert!((x - y).abs() <= 1e-5, "{x} vs {y}");
    }
}

#[test]
fn non_finite_is_reported_with_layer_and_phase() {
    let e = common::experiment(
        json!({"optimizer": {"kind": "sgd", "lr": 1.0}, "loss": "mse", "regularization": {"kind": "l2", "rate": 1e30}}),
    );
    let mut engine = common::engine(&e);
    let mut error = None;
    for _ in 0..10 {
        if let Err(err) = engine.step() {
            error = Some(err.to_string());
            break;
        }
    }
    let error = error.expect("an L2 rate of 1e30 must blow up");
    assert!(error.contains("layer") && error.contains("NaN/Inf"), "{error}");
    // The step is numbered as the page counts them: the failed step is the
    // one after the last completed.
    let failed = engine.step_count() + 1;
    assert!(error.contains(&format!("at step {failed},")), "{error}");
}

/// A step taken in parts (`step_part`: each micro-batch's forward and
/// backward, then the update; a layer at a time for a large network; what a
/// caller yields between on a long step) has the bits of a whole `step`,
/// with accumulation and activation checkpointing too; the parts come in
/// that number, and only the last gives the metrics. A step begun in parts
/// and finished by `step_phase` (step-by-phase mode) or `step` has the
/// same bits as well.
#[test]
fn a_step_in_parts_equals_a_whole_step() {
    let wide = serde_json::json!({"layers": [
        {"units": 300, "activation": "relu"},
        {"units": 300, "activation": "tanh"},
        {"units": 1, "activation": "linear"}]});
    for (k, model, checkpointing) in [
        (1, serde_json::json!({}), false),
        (3, serde_json::json!({}), false),
        (1, wide.clone(), false),
        (2, wide, true),
    ] {
        let by_layer = !model.as_object().unwrap().is_empty();
        let e = common::experiment(serde_json::json!({"grad_accumulation": k, "clip_grad_norm": 0.5, "model": model}));
        let layers = e.model.layers.len();
        assert_eq!(by_layer, (e.batch_size * Layout::new(&e).parameter_count) as u64 >= LAYER_PART_MACS);
        let (mut whole, mut parts) = (common::engine(&e), common::engine(&e));
        whole.set_activation_checkpointing(checkpointing).unwrap();
        parts.set_activation_checkpointing(checkpointing).unwrap();
        for _ in 0..4 {
            let expected = whole.step().unwrap();
            let mut done = None;
            let mut count = 0;
            while done.is_none() {
                done = parts.step_part().unwrap();
                count += 1;
                assert_eq!(parts.mid_step(), done.is_none(), "k={k}: mid-step until the update");
            }
            let got = done.unwrap();
            let per_pass = if by_layer { layers } else { 1 };
            assert_eq!(count, 2 * k * per_pass + 1, "k={k}: forward and backward per micro-batch, then the update");
            assert_eq!(
                (got.step, got.loss.to_bits(), got.grad_norm.to_bits()),
                (expected.step, expected.loss.to_bits(), expected.grad_norm.to_bits())
            );
        }
        assert_eq!(whole.state(), parts.state(), "k={k}");
        // Begun a layer at a time, finished phase by phase, then whole.
        whole.step().unwrap();
        parts.step_part().unwrap();
        while parts.step_phase().unwrap().metrics.is_none() {}
        assert_eq!(whole.state(), parts.state(), "k={k}: finished by step_phase");
        whole.step().unwrap();
        parts.step_part().unwrap();
        parts.step().unwrap();
        assert_eq!(whole.state(), parts.state(), "k={k}: finished by step");
    }
}

/// An evaluation taken a few rows at a time (what the page's views do for
/// a large network, yielding between parts) agrees with `evaluate`: exactly
/// when the table is one chunk done at once, to f32 rounding otherwise.
#[test]
fn an_evaluation_in_parts_agrees_with_a_whole_one() {
    let e = common::experiment(serde_json::json!({}));
    let engine = common::engine(&e);
    let layout = Layout::new(&e);
    let table = &engine.data().test;
    let whole = evaluate(engine.params(), &layout, &e, table).unwrap();
    let mut at_once = Evaluator::new(&layout, table.rows(), table.rows());
    assert!(at_once.advance(engine.params(), &layout, &e, table, usize::MAX));
    assert_eq!(at_once.result(), Some(whole));
    for (chunk, step) in [(1, 1), (7, 3), (16, 40)] {
        let mut parts = Evaluator::new(&layout, table.rows(), chunk);
        let mut calls = 0;
        while !parts.advance(engine.params(), &layout, &e, table, step) {
            assert!(parts.result().is_none(), "no figure before the table is done");
            calls += 1;
        }
        assert_eq!(calls, table.rows().div_ceil(step) - 1, "chunk {chunk}, {step} rows a call");
        let got = parts.result().unwrap();
        assert!((got.loss - whole.loss).abs() <= 1e-5 * whole.loss.abs().max(1.0), "{got:?} against {whole:?}");
        assert!((got.accuracy.unwrap() - whole.accuracy.unwrap()).abs() <= 1e-6);
    }
}
