//! The GPU engine against the CPU engine on WebGPU: short runs, submitted
//! and collected the page's way (`submit` + `collect_async().await`, then
//! `read_state().await`), proving the engine works in the browser and not
//! only its kernels. Tolerances as `core/tests/gpu_training.rs` states them.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use stepscope_core::data::Dataset;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::{CpuEngine, Experiment, StepMetrics};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

/// GPU and CPU differ only in summation order and exp/tanh
/// implementations; gpu_training.rs requires 1e-5 relative on loss and
/// gradient norm (20× the largest deviation seen), and the same schedule
/// value and clipping decision.
fn assert_close_runs(name: &str, cpu: &[StepMetrics], gpu: &[StepMetrics]) {
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

/// As gpu_training.rs: within 1e-5 of 1 + |p|.
fn assert_close_params(name: &str, cpu: &[f32], gpu: &[f32]) {
    assert_eq!(cpu.len(), gpu.len(), "{name}");
    for (i, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        assert!((c - g).abs() <= 1e-5 * (1.0 + c.abs()), "{name}: {i} cpu {c} gpu {g}");
    }
}

/// Trains `e` for the sum of `submits` steps on both engines, the GPU one
/// in submits of those sizes (on the fused step when `fused`), and
/// compares every step and the end state.
async fn compare(name: &str, e: &Experiment, submits: &[usize], fused: bool) {
    // The engine takes an Arc; on the web the context is single-threaded.
    #[allow(clippy::arc_with_non_send_sync)]
    let ctx = Arc::new(GpuContext::new().await.expect("the browser offers a WebGPU adapter"));
    console_log!("{name}: adapter {}", ctx.describe());
    let data = Dataset::load(e, None).expect("built-in data");
    let mut cpu = CpuEngine::new(e, data).expect("the CPU engine builds");
    let mut gpu = GpuEngine::from_state(ctx, cpu.state(), cpu.data().clone()).expect("the GPU engine builds");
    gpu.use_fused = fused;
    assert_eq!(gpu.runs_fused(), fused, "{name}: the fused step applies");
    let steps: usize = submits.iter().sum();
    let mut gpu_metrics = Vec::new();
    for &k in submits {
        gpu.submit(k).expect("submit");
        let before = gpu_metrics.len();
        while gpu_metrics.len() < before + k {
            let got = gpu.collect_async().await.expect("collect");
            assert!(!got.is_empty(), "{name}: a submit of {k} steps gave no metrics");
            gpu_metrics.extend(got);
        }
    }
    let cpu_metrics: Vec<StepMetrics> = (0..steps).map(|_| cpu.step().expect("cpu step")).collect();
    assert_eq!(gpu_metrics.len(), steps, "{name}: one metrics record per step");
    assert_close_runs(name, &cpu_metrics, &gpu_metrics);
    let (cs, gs) = (cpu.state(), gpu.read_state().await.expect("read_state"));
    assert_close_params(&format!("{name} params"), &cs.params, &gs.params);
    assert_close_params(&format!("{name} exp_avg"), &cs.optimizer.exp_avg, &gs.optimizer.exp_avg);
    assert_close_params(&format!("{name} exp_avg_sq"), &cs.optimizer.exp_avg_sq, &gs.optimizer.exp_avg_sq);
    assert_close_params(&format!("{name} momentum"), &cs.optimizer.momentum_buffer, &gs.optimizer.momentum_buffer);
    assert_eq!(cs.data_position, gs.data_position, "{name}");
    assert_eq!(cs.step(), gs.step(), "{name}");
    assert_eq!(gs.step(), steps as u64, "{name}");
    assert!(cpu_metrics.iter().all(|m| m.loss.is_finite() && m.grad_norm > 0.0), "{name}: a real run");
}

/// The page's default experiment (spiral, two tanh layers, AdamW): 10 steps
/// in submits of 1, 4 and 5.
#[wasm_bindgen_test]
async fn the_default_experiment_trains_as_on_the_cpu() {
    let e = stepscope_app::model::edit::default_experiment();
    compare("default", &e, &[1, 4, 5], false).await;
}

/// The same on the fused step: K whole steps in one dispatch.
#[wasm_bindgen_test]
async fn the_default_experiment_trains_fused_as_on_the_cpu() {
    let e = stepscope_app::model::edit::default_experiment();
    compare("default, fused", &e, &[1, 4, 5], true).await;
}

/// The calibration times both paths on the browser's adapter (awaited, as
/// the page does) and picks one; its figures are logged.
#[wasm_bindgen_test]
async fn calibration_picks_a_path_on_webgpu() {
    #[allow(clippy::arc_with_non_send_sync)]
    let ctx = Arc::new(GpuContext::new().await.expect("the browser offers a WebGPU adapter"));
    let e = stepscope_app::model::edit::default_experiment();
    let cpu = CpuEngine::new(&e, Dataset::load(&e, None).expect("built-in data")).expect("the CPU engine builds");
    let mut gpu = GpuEngine::from_state(ctx.clone(), cpu.state(), cpu.data().clone()).expect("the GPU engine builds");
    let c = gpu.calibrate().await.expect("calibration");
    console_log!(
        "calibration on {}: phased {:?}, fused {:?}; predicted at K = {}: phased {:.1} steps/s, fused {:.1} steps/s",
        ctx.describe(),
        c.phased,
        c.fused,
        c.max_steps,
        c.phased_steps_per_s(),
        c.fused_steps_per_s().unwrap_or(0.0)
    );
    assert!(c.phased.per_step_ms > 0.0 && c.fused.is_some_and(|f| f.per_step_ms > 0.0));
    assert_eq!(gpu.runs_fused(), c.fused_wins());
    assert_eq!(gpu.step_count(), 0);
}

/// Cross-entropy on XOR with SGD (Nesterov momentum, weight decay), a
/// warmup-cosine schedule, clipping and gradient accumulation: 10 steps.
#[wasm_bindgen_test]
async fn clipping_accumulation_and_momentum_train_as_on_the_cpu() {
    let e = Experiment::from_json(
        r#"{"seed": 3,
            "model": {"inputs": 3, "layers": [
                {"units": 9, "activation": "relu"}, {"units": 7, "activation": "gelu_tanh"},
                {"units": 2, "activation": "linear"}]},
            "loss": "cross_entropy",
            "optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 0.001},
            "schedule": {"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 10, "min_lr": 0.001},
            "batch_size": 13, "grad_accumulation": 2, "clip_grad_norm": 0.5,
            "data": {"source": "xor", "samples": 90, "noise": 0.1, "train_fraction": 0.8,
                     "features": ["x1", "x2", "sin_x1"]}}"#,
    )
    .expect("a valid experiment");
    compare("sgd/ce/clip/accumulation", &e, &[3, 7], false).await;
    compare("sgd/ce/clip/accumulation, fused", &e, &[3, 7], true).await;
}
