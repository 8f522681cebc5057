//! Optimizers and schedules against values worked out independently by
//! `fixtures/make_reference.py` (numpy re-implementations of torch.optim
//! and optax.lamb, operation by operation in float32).

use serde::Deserialize;
use stepscope_core::experiment::{OptimizerSpec, Schedule};
use stepscope_core::model::TensorInfo;
use stepscope_core::optim::{learning_rate, optimizer_step, OptimizerState};

#[derive(Deserialize)]
struct Fixture {
    optimizers: Vec<OptimizerCase>,
    schedules: Vec<ScheduleCase>,
}

#[derive(Deserialize)]
struct OptimizerCase {
    name: String,
    optimizer: OptimizerSpec,
    tensor_sizes: Vec<usize>,
    params0: Vec<f32>,
    lrs: Vec<f64>,
    grads: Vec<Vec<f32>>,
    params: Vec<Vec<f32>>,
    state: std::collections::HashMap<String, Vec<f32>>,
}

#[derive(Deserialize)]
struct ScheduleCase {
    name: String,
    base_lr: f64,
    schedule: Schedule,
    lrs: Vec<f64>,
}

fn fixture() -> Fixture {
    serde_json::from_str(include_str!("fixtures/optim_reference.json")).unwrap()
}

/// Tolerance: SGD, Adam and AdamW follow torch's operation order exactly,
/// so they must agree to the bit. LAMB's per-tensor norms are summed in a
/// different order than numpy's, which may move the trust ratio by an ulp:
/// 4 ulps relative (5e-7) over 5 steps.
#[test]
fn optimizers_match_reference() {
    for case in fixture().optimizers {
        let mut offset = 0;
        let tensors: Vec<TensorInfo> = case
            .tensor_sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let t = TensorInfo {
                    name: format!("t{i}"),
                    shape: vec![len],
                    offset,
                    len,
                    is_weight: i == 0,
                    decays: true,
                };
                offset += len;
                t
            })
            .collect();
        let mut params = case.params0.clone();
        let mut state = OptimizerState::new(&case.optimizer, params.len());
        let exact = !matches!(case.optimizer, OptimizerSpec::Lamb { .. });
        for (t, (grads, want)) in case.grads.iter().zip(&case.params).enumerate() {
            optimizer_step(&mut params, &mut state, grads, &case.optimizer, case.lrs[t], &tensors);
            compare(&case.name, &format!("params after step {}", t + 1), &params, want, exact);
        }
        for (key, want) in &case.state {
            let got = state.buffer_mut(key).unwrap().clone();
            compare(&case.name, key, &got, want, exact);
        }
        assert_eq!(state.buffers().len(), case.state.len(), "{}: state buffers", case.name);
    }
}

fn compare(case: &str, what: &str, got: &[f32], want: &[f32], exact: bool) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if exact { g.to_bits() == w.to_bits() } else { (g - w).abs() <= 5e-7 * w.abs().max(1e-3) };
        assert!(ok, "{case} {what}[{i}]: got {g:e}, want {w:e}");
    }
}

/// Schedules are computed in f64 by both; 1e-15 relative covers cos().
#[test]
fn schedules_match_reference() {
    for case in fixture().schedules {
        for (t, &want) in case.lrs.iter().enumerate() {
            let got = learning_rate(&case.schedule, case.base_lr, t as u64);
            assert!((got - want).abs() <= 1e-15 * want.abs().max(1e-12), "{} t={t}: {got} vs {want}", case.name);
        }
    }
}
