//! Finite-difference check of the whole network's gradient: every
//! activation and every loss, with regularization, through `CpuEngine`.

mod common;

use serde_json::json;
use stepscope_core::model::regularization_forward;
use stepscope_core::CpuEngine;

/// Loss the engine's gradient describes: data loss on the full training
/// table (batch = all rows, no shuffling) plus regularization.
fn objective(engine: &CpuEngine, params: &[f32]) -> f64 {
    let mut state = engine.state();
    state.params = params.to_vec();
    let probe = CpuEngine::from_state(state, engine.data().clone()).unwrap();
    let data_loss = probe.evaluate(&probe.data().train).unwrap().loss as f64;
    let reg = match &probe.experiment().regularization {
        Some(r) => regularization_forward(params, probe.tensors(), r) as f64,
        None => 0.0,
    };
    data_loss + reg
}

/// Central differences with h = 1e-3 on the f32 network. The objective is
/// O(1) and computed in f32 (rounding about 1e-7, so about 1e-4 after
/// dividing by 2h); truncation is O(h^2 f''), about 1e-6 for these smooth
/// activations. We accept |analytic - numeric| <= 1e-3 + 2 % |numeric|.
/// L1's |w| has a kink at 0: weights within h of 0 are skipped there, since
/// the difference quotient straddles the kink. relu and leaky_relu could
/// cross a kink too; these seeds and points do not.
#[test]
fn whole_network_gradient_matches_finite_differences() {
    let cases = [
        ("bce_with_logits", 1, "tanh", "sigmoid", "xor"),
        ("cross_entropy", 2, "gelu_tanh", "silu", "circle"),
        ("mse", 1, "leaky_relu", "tanh", "reg_gauss"),
        ("mse", 1, "relu", "linear", "gauss"),
        ("bce_with_logits", 1, "sigmoid", "gelu_tanh", "spiral"),
    ];
    for (i, (loss, outputs, act1, act2, source)) in cases.into_iter().enumerate() {
        let reg = if i % 2 == 0 { json!({"kind": "l2", "rate": 0.01}) } else { json!({"kind": "l1", "rate": 0.003}) };
        let e = common::experiment(json!({
            "model": {"inputs": 3, "layers": [
                {"units": 5, "activation": act1},
                {"units": 4, "activation": act2},
                {"units": outputs, "activation": "linear"}]},
            "loss": loss,
            "optimizer": {"kind": "sgd", "lr": 0.0},
            "batch_size": 12,
            "regularization": reg,
            "data": {"source": source, "samples": 15, "noise": 0.1, "train_fraction": 0.8,
                     "features": ["x1", "x2", "x1_x2"], "shuffle": false}
        }));
        // Also with activation checkpointing: backward's recomputed z must
        // give the same derivative.
        let checkpointing = i % 2 == 1;
        let mut engine = common::engine(&e);
        assert_eq!(engine.data().train.rows(), 12);
        engine.set_activation_checkpointing(checkpointing).unwrap();
        engine.step().unwrap(); // lr 0: parameters unchanged, gradients kept
        let params = engine.params().to_vec();
        let analytic = engine.grads().to_vec();
        let h = 1e-3f32;
        let l1 =
            e.regularization.as_ref().is_some_and(|r| r.kind == stepscope_core::experiment::RegularizationKind::L1);
        for p in 0..params.len() {
            if l1 && params[p].abs() < h {
                continue;
            }
            let (mut plus, mut minus) = (params.clone(), params.clone());
            plus[p] += h;
            minus[p] -= h;
            let numeric = (objective(&engine, &plus) - objective(&engine, &minus)) / (2.0 * h as f64);
            let diff = (analytic[p] as f64 - numeric).abs();
            assert!(
                diff <= 1e-3 + 0.02 * numeric.abs(),
                "{loss}/{act1}/{act2} (checkpointing {checkpointing}): dparam[{p}] analytic {} numeric {numeric}",
                analytic[p]
            );
        }
    }
}
