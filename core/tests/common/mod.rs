//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use stepscope_core::data::Dataset;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::{CpuEngine, Experiment};

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
