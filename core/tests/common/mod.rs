//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use stepscope_core::data::Dataset;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::trainer::conformance;
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

#[allow(unused_imports)]
pub use stepscope_core::trainer::conformance::{experiment, training_matrix};

pub fn engine(e: &Experiment) -> CpuEngine {
    let data = Dataset::load(e, None).unwrap();
    CpuEngine::new(e, data).unwrap()
}

/// Within the twin tolerances (`stepscope_core::trainer::conformance`).
pub fn assert_close_runs(name: &str, cpu: &[StepMetrics], gpu: &[StepMetrics]) {
    if let Err(message) = conformance::close_runs(name, cpu, gpu) {
        panic!("{message}");
    }
}

pub fn assert_close_params(name: &str, cpu: &[f32], gpu: &[f32]) {
    if let Err(message) = conformance::close_values(name, cpu, gpu) {
        panic!("{message}");
    }
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
