//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use serde_json::json;
use stepscope_core::data::Dataset;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::{CpuEngine, Experiment, StepMetrics};

/// One GPU device per test binary, shared. Fails (does not skip) without
/// an adapter: CI installs lavapipe.
pub fn shared_gpu() -> Arc<GpuContext> {
    static CTX: std::sync::OnceLock<Arc<GpuContext>> = std::sync::OnceLock::new();
    CTX.get_or_init(|| Arc::new(GpuContext::new_blocking().expect("GPU tests need an adapter"))).clone()
}

/// A fresh run of `e` on the shared GPU (initialised as the CPU engine).
pub fn gpu_engine(e: &Experiment) -> GpuEngine {
    let cpu = engine(e);
    GpuEngine::from_state(shared_gpu(), cpu.state(), cpu.data().clone()).unwrap()
}

/// A small experiment; `patch` is merged over the defaults (JSON object).
pub fn experiment(patch: serde_json::Value) -> Experiment {
    let mut base = serde_json::json!({
        "seed": 7,
        "model": {"inputs": 2, "layers": [
            {"units": 8, "activation": "tanh"},
            {"units": 1, "activation": "linear"}]},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "adamw", "lr": 0.01},
        "batch_size": 16,
        "data": {"source": "spiral", "samples": 200, "noise": 0.1, "train_fraction": 0.8}
    });
    merge(&mut base, patch);
    Experiment::from_json(&base.to_string()).expect("test experiment is valid")
}

fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_object()
                    && b.get(k.as_str()).is_some_and(|x| x.is_object())
                    && k != "optimizer"
                    && k != "schedule"
                {
                    merge(b.get_mut(k.as_str()).unwrap(), v);
                } else {
                    b.insert(k, v);
                }
            }
        }
        (b, p) => *b = p,
    }
}

pub fn engine(e: &Experiment) -> CpuEngine {
    let data = Dataset::load(e, None).unwrap();
    CpuEngine::new(e, data).unwrap()
}

/// GPU and CPU differ only in summation order inside matmuls and
/// reductions (about I·2⁻²⁴ relative per sum) and in exp/tanh
/// implementations. Over 12 steps training amplifies these a little (most
/// through Adam's division by √v). Largest deviations seen on lavapipe:
/// 2.9e-7 relative in the loss, 4.8e-7 in the gradient norm, 2.1e-7 in a
/// parameter (relative to 1 + |p|). We require 1e-5 (20× margin); a real
/// bug (a wrong derivative, a dropped term) moves the loss by 1e-3 or more
/// at the first step.
pub fn assert_close_runs(name: &str, cpu: &[StepMetrics], gpu: &[StepMetrics]) {
    assert_eq!(cpu.len(), gpu.len(), "{name}");
    for (c, g) in cpu.iter().zip(gpu) {
        assert_eq!(c.step, g.step, "{name}");
        assert_eq!(c.lr, g.lr, "{name}: same schedule value");
        assert!(
            (c.loss - g.loss).abs() <= 1e-5 * c.loss.abs() + 1e-7,
            "{name} step {}: loss cpu {} gpu {}",
            c.step,
            c.loss,
            g.loss
        );
        assert!(
            (c.grad_norm - g.grad_norm).abs() <= 1e-5 * c.grad_norm + 1e-7,
            "{name} step {}: grad_norm cpu {} gpu {}",
            c.step,
            c.grad_norm,
            g.grad_norm
        );
        assert_eq!(c.clipped, g.clipped, "{name} step {}: clipped", c.step);
    }
}

pub fn assert_close_params(name: &str, cpu: &[f32], gpu: &[f32]) {
    for (i, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        assert!((c - g).abs() <= 1e-5 * (1.0 + c.abs()), "{name}: param {i} cpu {c} gpu {g}");
    }
}

/// Every optimizer, loss and schedule, with clipping, accumulation,
/// regularization and the activations in rotation: the whole-run cases
/// every GPU path is compared with the CPU engine on.
pub fn training_matrix() -> Vec<(String, Experiment)> {
    let mut cases = Vec::new();
    let optimizers = [
        json!({"kind": "sgd", "lr": 0.1}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 0.001}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.8, "dampening": 0.1}),
        json!({"kind": "adam", "lr": 0.01, "weight_decay": 0.01}),
        json!({"kind": "adamw", "lr": 0.01}),
        json!({"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}),
    ];
    let losses = [("bce_with_logits", 1, "spiral"), ("cross_entropy", 2, "xor"), ("mse", 1, "reg_gauss")];
    let schedules = [
        json!({"kind": "constant"}),
        json!({"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 12, "min_lr": 0.001}),
        json!({"kind": "warmup_linear", "warmup_steps": 2, "total_steps": 10}),
    ];
    let mut case = 0;
    for optimizer in &optimizers {
        for (loss, outputs, source) in losses {
            case += 1;
            let schedule = &schedules[case % schedules.len()];
            let clip = if case % 2 == 0 { json!(0.5) } else { json!(null) };
            let accumulation = 1 + case % 3;
            let reg = if case % 4 == 1 { json!({"kind": "l2", "rate": 0.001}) } else { json!(null) };
            let activation = ["tanh", "relu", "gelu_tanh", "silu", "leaky_relu", "sigmoid"][case % 6];
            let e = experiment(json!({
                "model": {"inputs": 3, "layers": [
                    {"units": 9, "activation": activation},
                    {"units": 7, "activation": "tanh"},
                    {"units": outputs, "activation": "linear"}]},
                "loss": loss, "optimizer": optimizer, "schedule": schedule,
                "batch_size": 13, "grad_accumulation": accumulation, "clip_grad_norm": clip,
                "regularization": reg,
                "data": {"source": source, "samples": 90, "noise": 0.1, "train_fraction": 0.8,
                         "features": ["x1", "x2", "sin_x1"]}
            }));
            let name = format!("{optimizer} {loss} {schedule} clip={clip} k={accumulation}");
            cases.push((name, e));
        }
    }
    cases
}

/// The GPU run `gpu` (its metrics `gpu_metrics`) against the CPU run:
/// metrics, parameters, optimizer moments, data position and step.
pub fn assert_same_run(
    name: &str,
    cpu: &CpuEngine,
    cpu_metrics: &[StepMetrics],
    gpu: &mut GpuEngine,
    gpu_metrics: &[StepMetrics],
) {
    assert_close_runs(name, cpu_metrics, gpu_metrics);
    let (cs, gs) = (cpu.state(), gpu.state().unwrap());
    assert_close_params(name, &cs.params, &gs.params);
    assert_close_params(name, &cs.optimizer.exp_avg, &gs.optimizer.exp_avg);
    assert_close_params(name, &cs.optimizer.exp_avg_sq, &gs.optimizer.exp_avg_sq);
    assert_close_params(name, &cs.optimizer.momentum_buffer, &gs.optimizer.momentum_buffer);
    assert_eq!(cs.data_position, gs.data_position, "{name}");
    assert_eq!(cs.step(), gs.step(), "{name}");
}
