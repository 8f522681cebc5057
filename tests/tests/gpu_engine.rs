//! The GPU engine against the CPU engine on WebGPU, through the trainer the
//! page drives (`submit` + `collect().await`, then `read_state().await`):
//! the whole-run checks of `stepscope_core::trainer::conformance`, written
//! once and run natively too, proving the engine works in the browser and
//! not only its kernels. Tolerances as `conformance` states them.
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use stepscope_core::data::Dataset;
use stepscope_core::gpu::matmul::MatmulVariant;
use stepscope_core::gpu::{FusedWidth, GpuContext, GpuEngine};
use stepscope_core::trainer::conformance;
use stepscope_core::{CpuEngine, Experiment};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

/// The GPU device of this test binary, shared.
async fn ctx() -> Arc<GpuContext> {
    thread_local! {
        static CTX: std::cell::RefCell<Option<Arc<GpuContext>>> = const { std::cell::RefCell::new(None) };
    }
    if let Some(ctx) = CTX.with(|c| c.borrow().clone()) {
        return ctx;
    }
    // The engine takes an Arc; on the web the context is single-threaded.
    #[allow(clippy::arc_with_non_send_sync)]
    let ctx = Arc::new(GpuContext::new().await.expect("the browser offers a WebGPU adapter"));
    console_log!("adapter {}", ctx.describe());
    CTX.with(|c| *c.borrow_mut() = Some(ctx.clone()));
    ctx
}

/// The shared whole-run body (`trainer::conformance::whole_run`, the same
/// one the native tests run on lavapipe): `e` for the sum of `submits`
/// steps on both engines, every step and the end state compared.
async fn compare(name: &str, e: &Experiment, submits: &[usize], fused: bool) {
    if let Err(message) = conformance::whole_run(name, e, ctx().await, submits, fused).await {
        panic!("{message}");
    }
}

/// The page's default experiment (spiral, two tanh layers, AdamW): 10 steps
/// in submits of 1, 4 and 5.
#[wasm_bindgen_test]
async fn the_default_experiment_trains_as_on_the_cpu() {
    let e = stepscope_app::model::edit::default_experiment();
    compare("default", &e, &[1, 4, 5], false).await;
}

/// The same on the fused step: K whole steps in one dispatch, with a
/// workgroup of 64 invocations and of 4 (the calibration times both).
#[wasm_bindgen_test]
async fn the_default_experiment_trains_fused_as_on_the_cpu() {
    let e = stepscope_app::model::edit::default_experiment();
    compare("default, fused", &e, &[1, 4, 5], true).await;
    let narrow = conformance::whole_run_fused_at(
        "default, fused, 4 invocations",
        &e,
        ctx().await,
        &[1, 4, 5],
        FusedWidth::Narrow,
    );
    if let Err(message) = narrow.await {
        panic!("{message}");
    }
}

/// The same on the blocked matmul kernels (no barriers), the variants the
/// calibration picks on software adapters: a small network and a wide one.
#[wasm_bindgen_test]
async fn blocked_matmuls_train_as_on_the_cpu() {
    let e = stepscope_app::model::edit::default_experiment();
    let check =
        conformance::whole_run_on_matmuls("default, blocked", &e, ctx().await, &[1, 4, 5], MatmulVariant::Blocked);
    if let Err(message) = check.await {
        panic!("{message}");
    }
    let mut wide = e.clone();
    wide.batch_size = 70;
    for layer in wide.model.layers.iter_mut().rev().skip(1) {
        layer.units = 65;
    }
    let check =
        conformance::whole_run_on_matmuls("65 wide, blocked", &wide, ctx().await, &[2, 3], MatmulVariant::Blocked);
    if let Err(message) = check.await {
        panic!("{message}");
    }
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
        c.fused(),
        c.max_steps,
        c.phased_steps_per_s(),
        c.fused_steps_per_s().unwrap_or(0.0)
    );
    for t in &c.matmuls {
        console_log!(
            "layer {} {} {:?}: tiled {:.3} ms, blocked {:.3} ms → {}",
            t.layer,
            t.matmul.name(),
            t.shape,
            1e3 * t.seconds[0],
            1e3 * t.seconds[1],
            t.chosen.name()
        );
    }
    for (width, cost, k) in &c.fused_widths {
        console_log!(
            "fused, {} invocations: {cost:?}, {:.1} steps/s at K = {k}{}",
            width.invocations(),
            cost.steps_per_second(*k),
            if c.fused_width() == Some(*width) { " (kept)" } else { "" }
        );
    }
    assert!(!c.matmuls.is_empty());
    assert!(c.phased.per_step_ms > 0.0 && c.fused().is_some_and(|f| f.per_step_ms > 0.0));
    // WebGPU caps no loops: both widths of the fused kernel are timed.
    assert_eq!(c.fused_widths.iter().map(|w| w.0).collect::<Vec<_>>(), FusedWidth::ALL);
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
    let narrow = conformance::whole_run_fused_at(
        "sgd/ce/clip/accumulation, fused, 4",
        &e,
        ctx().await,
        &[3, 7],
        FusedWidth::Narrow,
    );
    if let Err(message) = narrow.await {
        panic!("{message}");
    }
}

/// Every optimizer, loss and schedule of the native matrix, in two submits
/// each (one of 2 steps, one of 4), on WebGPU.
#[wasm_bindgen_test]
async fn every_optimizer_loss_and_schedule_trains_as_on_the_cpu() {
    for (name, e) in conformance::training_matrix() {
        compare(&name, &e, &[2, 4], false).await;
    }
}

/// Transformer runs (issue 27) on WebGPU: every optimizer, clipping,
/// micro-batches, z-loss and the untied head, as natively on lavapipe.
#[wasm_bindgen_test]
async fn transformer_runs_train_as_on_the_cpu() {
    // Tiny Shakespeare: a module links it where it trains on it (the
    // worker's does; so does this test's).
    stepscope_core::data::use_built_in_shakespeare();
    for (name, e) in conformance::gpt_training_matrix() {
        compare(&name, &e, &[1, 3, 2], false).await;
    }
}

/// Conv nets (the conv and pool kernels of `gpu::conv`) on WebGPU, every
/// optimizer among them, as natively on lavapipe.
#[wasm_bindgen_test]
async fn conv_nets_train_as_on_the_cpu() {
    for (name, e) in conformance::conv_training_matrix() {
        compare(&name, &e, &[1, 3], false).await;
    }
}

/// A run moved from the CPU to WebGPU and back equals one that stayed.
#[wasm_bindgen_test]
async fn switching_engines_mid_run_changes_nothing() {
    let e = stepscope_app::model::edit::default_experiment();
    if let Err(message) = conformance::switching_engines_mid_run("default", &e, ctx().await).await {
        panic!("{message}");
    }
}

/// Live hyperparameter edits are taken in place on WebGPU (phased and
/// fused) and on the CPU, bit for bit as a run rebuilt from its state.
#[wasm_bindgen_test]
async fn live_edits_are_taken_in_place() {
    let e = stepscope_app::model::edit::default_experiment();
    for (name, gpu, fused) in
        [("cpu", None, false), ("gpu", Some(ctx().await), false), ("fused", Some(ctx().await), true)]
    {
        if let Err(message) = conformance::live_edits_in_place(name, &e, gpu, fused).await {
            panic!("{message}");
        }
    }
}
