//! The blocked matmul variants (`shaders/*_blocked.wgsl`, `gpu::matmul`)
//! in whole runs: the same cases as the tiled kernels against the CPU
//! engine, variants mixed per layer and switched mid-run, with activation
//! checkpointing, and the calibration that picks them.

mod common;

use common::{assert_same_run, gpu_engine};
use serde_json::json;
use stepscope_core::gpu::matmul::{LayerMatmuls, Matmul, MatmulVariant};
use stepscope_core::gpu::GpuEngine;
use stepscope_core::StepMetrics;

fn with_variant(e: &stepscope_core::Experiment, v: MatmulVariant) -> GpuEngine {
    let mut gpu = gpu_engine(e);
    gpu.use_fused = false;
    gpu.set_matmuls(vec![LayerMatmuls::all(v); e.model.layers.len()]).unwrap();
    gpu
}

/// Every optimizer, loss and schedule, with clipping and accumulation on
/// and off, on the blocked kernels, within the tolerances of the tiled
/// ones (`assert_same_run`): both sum in the same order; only the bias
/// gradient is summed in row order, as the CPU sums it.
#[test]
fn blocked_matmuls_match_the_cpu_engine_for_every_optimizer_loss_and_schedule() {
    for (name, e) in common::training_matrix() {
        let mut cpu = common::engine(&e);
        let mut gpu = with_variant(&e, MatmulVariant::Blocked);
        let cpu_metrics: Vec<StepMetrics> = (0..12).map(|_| cpu.step().unwrap()).collect();
        let gpu_metrics = gpu.run(12, 5).unwrap();
        assert_same_run(&name, &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
    }
}

/// The blocked weight gradient sums the bias in its own pass: one
/// dispatch fewer per layer and micro-batch.
#[test]
fn the_blocked_weight_gradient_drops_the_bias_dispatch() {
    let e = common::experiment(json!({"grad_accumulation": 2}));
    let tiled = with_variant(&e, MatmulVariant::Tiled);
    let blocked = with_variant(&e, MatmulVariant::Blocked);
    let layers = e.model.layers.len();
    assert_eq!(tiled.dispatches_per_step() - blocked.dispatches_per_step(), 2 * layers);
}

/// No dispatch of its own computes the loss gradient or an activation
/// backward (the loss and the input gradients apply them in their
/// passes): per micro-batch gather and advance, then per layer a forward,
/// a weight gradient and (above the first) an input gradient, and the
/// loss; per step the norm, clipping, the Adam update and the advance.
/// With checkpointing, L − 1 recomputed forwards on top.
#[test]
fn a_phased_step_is_a_forward_a_weight_and_an_input_gradient_per_layer() {
    let e = common::experiment(json!({"grad_accumulation": 2, "optimizer": {"kind": "adam", "lr": 0.01}}));
    let layers = e.model.layers.len();
    let per_micro = 2 + layers + 1 + layers + (layers - 1);
    let blocked = with_variant(&e, MatmulVariant::Blocked);
    assert_eq!(blocked.dispatches_per_step(), 2 * per_micro + 4);
    let tiled = with_variant(&e, MatmulVariant::Tiled);
    assert_eq!(tiled.dispatches_per_step(), 2 * (per_micro + layers) + 4, "tiled: a bias dispatch per layer");
    let mut checkpointing = with_variant(&e, MatmulVariant::Blocked);
    checkpointing.set_activation_checkpointing(true).unwrap();
    assert_eq!(checkpointing.dispatches_per_step(), 2 * (per_micro + layers - 1) + 4);
}

/// Variants mixed per layer, switched mid-run, and with activation
/// checkpointing (backward recomputes z with the layer's forward variant):
/// all the same run as the CPU engine's. (Smooth activations: a ReLU
/// kink crossed by a rounding-level difference makes any two engines part
/// after a dozen steps here, tiled and blocked alike.)
#[test]
fn mixed_and_switched_variants_and_checkpointing_keep_the_run() {
    let e = common::experiment(json!({
        "model": {"inputs": 2, "layers": [
            {"units": 70, "activation": "tanh"}, {"units": 9, "activation": "silu"},
            {"units": 33, "activation": "gelu_tanh"}, {"units": 2, "activation": "linear"}]},
        "loss": "cross_entropy", "batch_size": 45, "grad_accumulation": 2, "clip_grad_norm": 0.5,
        "optimizer": {"kind": "adamw", "lr": 0.01, "weight_decay": 0.1}
    }));
    let mut cpu = common::engine(&e);
    let cpu_metrics: Vec<StepMetrics> = (0..16).map(|_| cpu.step().unwrap()).collect();

    let (t, b) = (MatmulVariant::Tiled, MatmulVariant::Blocked);
    let mixed = vec![
        LayerMatmuls { forward: b, backward_input: t, backward_weight: b },
        LayerMatmuls { forward: t, backward_input: b, backward_weight: t },
        LayerMatmuls { forward: b, backward_input: b, backward_weight: t },
        LayerMatmuls { forward: t, backward_input: t, backward_weight: b },
    ];
    let mut gpu = gpu_engine(&e);
    gpu.use_fused = false;
    gpu.set_matmuls(mixed.clone()).unwrap();
    assert_eq!(gpu.matmuls(), &mixed[..]);
    let mut metrics = gpu.run(5, 5).unwrap();
    gpu.set_matmuls(vec![LayerMatmuls::all(b); 4]).unwrap();
    metrics.extend(gpu.run(5, 2).unwrap());
    gpu.set_activation_checkpointing(true).unwrap();
    metrics.extend(gpu.run(6, 3).unwrap());
    assert_same_run("mixed, switched, checkpointed", &cpu, &cpu_metrics, &mut gpu, &metrics);
    assert!(gpu.set_matmuls(vec![LayerMatmuls::all(b); 3]).is_err(), "one choice per layer");
}

/// Calibration times both variants of every matmul of every layer (the
/// first layer has no input gradient), runs the faster of each, and
/// caches the figures by adapter and shape: a later engine of the same
/// shape starts on the measured choice.
#[test]
fn calibration_picks_a_variant_per_matmul_and_caches_it() {
    let e = common::experiment(json!({
        "model": {"inputs": 2, "layers": [{"units": 40, "activation": "relu"}, {"units": 1, "activation": "linear"}]},
        "batch_size": 37
    }));
    let mut gpu = gpu_engine(&e);
    let calibration = pollster::block_on(gpu.calibrate()).unwrap();
    assert_eq!(calibration.matmuls.len(), 5, "{:?}", calibration.matmuls);
    for t in &calibration.matmuls {
        assert!(t.seconds.iter().all(|&s| s > 0.0), "{t:?}");
        assert_eq!(gpu.matmuls()[t.layer].get(t.matmul), t.chosen, "{t:?}");
        assert!(!(t.layer == 0 && t.matmul == Matmul::BackwardInput));
        let faster = if t.seconds[1] < t.seconds[0] { MatmulVariant::Blocked } else { MatmulVariant::Tiled };
        assert!(t.chosen == faster || (t.seconds[1] - t.seconds[0]).abs() <= 0.05 * t.seconds[0], "{t:?}");
    }
    let later = gpu_engine(&e);
    assert_eq!(later.matmuls(), gpu.matmuls(), "a later engine of this shape starts on the measured choice");
    // The run itself is untouched by calibration.
    assert_eq!(gpu.step_count(), 0);
}
