//! Whole runs on the CPU engine: loss falls, determinism, exact resume
//! through a checkpoint, and gradient accumulation.

mod common;

use serde_json::json;
use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::Dataset;
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
}

/// A step taken in parts (`step_part`: each micro-batch's forward and
/// backward, then the update; what a caller yields between on a long step)
/// has the bits of a whole `step`, with accumulation too; the parts come in
/// that number, and only the last gives the metrics.
#[test]
fn a_step_in_parts_equals_a_whole_step() {
    for k in [1, 3] {
        let e = common::experiment(serde_json::json!({"grad_accumulation": k, "clip_grad_norm": 0.5}));
        let (mut whole, mut parts) = (common::engine(&e), common::engine(&e));
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
            assert_eq!(count, 2 * k + 1, "k={k}: forward and backward per micro-batch, then the update");
            assert_eq!(
                (got.step, got.loss.to_bits(), got.grad_norm.to_bits()),
                (expected.step, expected.loss.to_bits(), expected.grad_norm.to_bits())
            );
        }
        assert_eq!(whole.state(), parts.state(), "k={k}");
    }
}
