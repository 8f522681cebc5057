//! Activation checkpointing: forward keeps only each layer's output and
//! backward recomputes the pre-activations. The run must not change at
//! all: same kernels (CPU functions) on the same inputs give the same
//! bits, so "on" and "off" are compared bit for bit on each engine, and
//! the GPU against the CPU with `gpu_training.rs`'s tolerance.

mod common;

use serde_json::json;
use stepscope_core::engine::{CheckpointingTrade, StepPhase};
use stepscope_core::gpu::GpuEngine;
use stepscope_core::{CpuEngine, Error, Experiment, StepMetrics, TrainState};

const ACTIVATIONS: [&str; 7] = ["linear", "relu", "leaky_relu", "tanh", "sigmoid", "gelu_tanh", "silu"];

use common::{gpu_engine, shared_gpu as shared};

/// Four layers (three hidden, widths differing so the shared z scratch is
/// wider than most layers), accumulation over 3 micro-batches, clipping.
fn deep(activation: &str, optimizer: serde_json::Value) -> Experiment {
    common::experiment(json!({
        "model": {"inputs": 3, "layers": [
            {"units": 9, "activation": activation},
            {"units": 12, "activation": activation},
            {"units": 5, "activation": activation},
            {"units": 2, "activation": "linear"}]},
        "loss": "cross_entropy",
        "optimizer": optimizer,
        "batch_size": 13,
        "grad_accumulation": 3,
        "clip_grad_norm": 0.5,
        "regularization": {"kind": "l2", "rate": 0.001},
        "data": {"source": "spiral", "samples": 120, "noise": 0.1, "train_fraction": 0.8,
                 "features": ["x1", "x2", "sin_x1"]}
    }))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn assert_same_metrics(name: &str, a: &[StepMetrics], b: &[StepMetrics]) {
    assert_eq!(a.len(), b.len(), "{name}");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.step, x.loss.to_bits(), x.grad_norm.to_bits(), x.lr.to_bits(), x.clipped),
            (y.step, y.loss.to_bits(), y.grad_norm.to_bits(), y.lr.to_bits(), y.clipped),
            "{name} step {}: loss {} vs {}, grad_norm {} vs {}",
            x.step,
            x.loss,
            y.loss,
            x.grad_norm,
            y.grad_norm
        );
    }
}

fn assert_same_state(name: &str, a: &TrainState, b: &TrainState) {
    assert_eq!(bits(&a.params), bits(&b.params), "{name}: params");
    assert_eq!(bits(&a.optimizer.exp_avg), bits(&b.optimizer.exp_avg), "{name}: exp_avg");
    assert_eq!(bits(&a.optimizer.exp_avg_sq), bits(&b.optimizer.exp_avg_sq), "{name}: exp_avg_sq");
    assert_eq!(bits(&a.optimizer.momentum_buffer), bits(&b.optimizer.momentum_buffer), "{name}: momentum");
    assert_eq!(a.optimizer.step, b.optimizer.step, "{name}");
    assert_eq!(a.data_position, b.data_position, "{name}");
}

fn optimizer_for(case: usize) -> serde_json::Value {
    [
        json!({"kind": "adamw", "lr": 0.01}),
        json!({"kind": "sgd", "lr": 0.1, "momentum": 0.9}),
        json!({"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}),
    ][case % 3]
        .clone()
}

/// CPU: 8 steps with checkpointing equal 8 without, bit for bit, for
/// every activation; switching on half-way is the same run too.
#[test]
fn cpu_checkpointing_changes_nothing() {
    for (case, activation) in ACTIVATIONS.into_iter().enumerate() {
        let e = deep(activation, optimizer_for(case));
        let mut plain = common::engine(&e);
        let mut recomputing = common::engine(&e);
        recomputing.set_activation_checkpointing(true).unwrap();
        assert!(recomputing.activation_checkpointing() && !plain.activation_checkpointing());
        let a: Vec<StepMetrics> = (0..8).map(|_| plain.step().unwrap()).collect();
        let b: Vec<StepMetrics> = (0..8).map(|_| recomputing.step().unwrap()).collect();
        assert_same_metrics(activation, &a, &b);
        assert_same_state(activation, &plain.state(), &recomputing.state());
        assert_eq!(bits(plain.grads()), bits(recomputing.grads()), "{activation}: grads");

        let mut switched = common::engine(&e);
        let mut c: Vec<StepMetrics> = (0..4).map(|_| switched.step().unwrap()).collect();
        switched.set_activation_checkpointing(true).unwrap();
        c.extend((0..2).map(|_| switched.step().unwrap()));
        switched.set_activation_checkpointing(false).unwrap();
        c.extend((0..2).map(|_| switched.step().unwrap()));
        assert_same_metrics(&format!("{activation} switched"), &a, &c);
        assert_same_state(&format!("{activation} switched"), &plain.state(), &switched.state());
    }
}

/// GPU: on against off bit for bit (the recomputation is the forward
/// kernel on the forward's inputs), single steps and K steps per submit,
/// switching half-way; and on against the CPU with checkpointing within
/// `gpu_training.rs`'s 1e-5 relative (its doc gives the reasons).
#[test]
fn gpu_checkpointing_changes_nothing() {
    for (case, activation) in ACTIVATIONS.into_iter().enumerate() {
        let e = deep(activation, optimizer_for(case));
        let mut plain = gpu_engine(&e);
        let mut recomputing = gpu_engine(&e);
        recomputing.set_activation_checkpointing(true).unwrap();
        assert!(recomputing.activation_checkpointing());
        let a = plain.run(8, 1).unwrap();
        let b = recomputing.run(8, 4).unwrap();
        assert_same_metrics(activation, &a, &b);
        let reference = plain.state().unwrap();
        assert_same_state(activation, &reference, &recomputing.state().unwrap());

        let mut switched = gpu_engine(&e);
        let mut c = switched.run(3, 3).unwrap();
        switched.set_activation_checkpointing(true).unwrap();
        c.extend(switched.run(3, 1).unwrap());
        switched.set_activation_checkpointing(false).unwrap();
        c.extend(switched.run(2, 2).unwrap());
        assert_same_metrics(&format!("{activation} switched"), &a, &c);
        assert_same_state(&format!("{activation} switched"), &reference, &switched.state().unwrap());

        let mut cpu = common::engine(&e);
        cpu.set_activation_checkpointing(true).unwrap();
        let cpu_metrics: Vec<StepMetrics> = (0..8).map(|_| cpu.step().unwrap()).collect();
        for (c, g) in cpu_metrics.iter().zip(&b) {
            let close = |x: f32, y: f32| (x - y).abs() <= 1e-5 * x.abs() + 1e-7;
            assert!(close(c.loss, g.loss), "{activation} step {}: loss {} vs {}", c.step, c.loss, g.loss);
            assert!(close(c.grad_norm, g.grad_norm), "{activation} step {}: norm", c.step);
            assert_eq!(c.clipped, g.clipped);
        }
        for (c, g) in cpu.params().iter().zip(&reference.params) {
            assert!((c - g).abs() <= 1e-5 * (1.0 + c.abs()), "{activation}: param cpu {c} gpu {g}");
        }
    }
}

/// Memory held for backward, from the actual buffers, on both engines:
///   without checkpointing: z and a per layer, 2·4·B·Σ O_l bytes;
///   with: a per layer and one z scratch, 4·B·(Σ O_l + max O).
/// The difference is `CheckpointingTrade::bytes_saved`, 4·B·(Σ O_l − max O).
/// Here B = 13, O = 9, 12, 5, 2: 2·4·13·28 = 2912 against
/// 4·13·(28 + 12) = 2080, 832 bytes saved.
#[test]
fn memory_shrinks_by_the_model_derived_amount_on_both_engines() {
    let e = deep("tanh", json!({"kind": "adamw", "lr": 0.01}));
    let mut cpu = common::engine(&e);
    let mut gpu = gpu_engine(&e);
    let off = cpu.memory();
    assert_eq!(off, gpu.memory());
    assert_eq!(off.activations, 2 * 4 * 13 * 28);
    cpu.set_activation_checkpointing(true).unwrap();
    gpu.set_activation_checkpointing(true).unwrap();
    let on = cpu.memory();
    assert_eq!(on, gpu.memory());
    assert_eq!(on.activations, 4 * 13 * (28 + 12));
    assert!(on.activations < off.activations);
    let trade = CheckpointingTrade::new(cpu.layout(), e.batch_size);
    assert_eq!(off.activations - on.activations, trade.bytes_saved);
    assert_eq!(trade.bytes_saved, 832);
    // Everything else is untouched.
    assert_eq!(
        (on.params, on.grads, on.optimizer, on.backward_scratch),
        (off.params, off.grads, off.optimizer, off.backward_scratch)
    );
    // Recomputation: one dense forward per layer, 2·B·Σ I·O with
    // Σ I·O = 3·9 + 9·12 + 12·5 + 5·2 = 205; a step's matmuls are
    // 2·B·(2·205 + 205 − 27).
    assert_eq!(trade.extra_flops, 2 * 13 * 205);
    assert_eq!(trade.step_flops, 2 * 13 * (2 * 205 + 205 - 27));
    cpu.set_activation_checkpointing(false).unwrap();
    gpu.set_activation_checkpointing(false).unwrap();
    assert_eq!((cpu.memory(), gpu.memory()), (off, off));
}

fn non_finite_message(err: Error) -> String {
    match err {
        Error::NonFinite(message) => message,
        other => panic!("expected a non-finite error, got {other}"),
    }
}

/// A NaN still names the right layer and phase with checkpointing on both
/// engines, and the step stops before the update.
///   forward: a NaN weight in layer 1 makes z[1] NaN: "layer 1 during
///   forward" (not the layers after it, and not backward's recomputation);
///   backward only: a bias of 1e20 in a gelu_tanh layer gives finite
///   forward values (gelu(z) = z there) but f′(z) = … (1 − t²)·(1 + 3cz²)
///   = 0·∞ = NaN: "layer 1 during backward". The recomputation sees the
///   same finite z as forward and reports nothing.
#[test]
fn non_finite_values_name_layer_and_phase_with_checkpointing() {
    let e = common::experiment(json!({
        "model": {"inputs": 2, "layers": [
            {"units": 4, "activation": "tanh"},
            {"units": 3, "activation": "gelu_tanh"},
            {"units": 1, "activation": "linear"}]}
    }));
    let clean = common::engine(&e).state();
    let data = common::engine(&e).data().clone();
    let shape = common::engine(&e).layout().layers[1];
    let mut forward_nan = clean.clone();
    forward_nan.params[shape.weight_offset + 2] = f32::NAN;
    let mut backward_nan = clean.clone();
    backward_nan.params[shape.bias_offset..shape.bias_offset + shape.units].fill(1e20);
    for (expected, state) in [("layer 1 during forward", forward_nan), ("layer 1 during backward", backward_nan)] {
        let mut cpu = CpuEngine::from_state(state.clone(), data.clone()).unwrap();
        let mut gpu = GpuEngine::from_state(shared(), state.clone(), data.clone()).unwrap();
        cpu.set_activation_checkpointing(true).unwrap();
        gpu.set_activation_checkpointing(true).unwrap();
        let cpu_message = non_finite_message(cpu.step().unwrap_err());
        let gpu_message = non_finite_message(gpu.run(3, 3).unwrap_err());
        assert!(cpu_message.contains(expected), "cpu: {cpu_message}");
        assert!(gpu_message.contains(expected), "gpu: {gpu_message}");
        // Both engines number the failed step as the page does.
        assert!(
            cpu_message.contains("at step 1,") && gpu_message.contains("at step 1,"),
            "{cpu_message} / {gpu_message}"
        );
        assert_eq!((cpu.step_count(), gpu.step_count()), (0, 0));
        assert_eq!(bits(cpu.params()), bits(&state.params), "{expected}: kept");
        assert_eq!(bits(&gpu.state().unwrap().params), bits(&state.params), "{expected}: kept");
    }
}

/// Step by phase with checkpointing: the forward report shows the
/// outputs only (there are no per-layer pre-activations to show), the
/// step is the same as a whole step, and switching is refused part-way
/// through a step on both engines.
#[test]
fn step_by_phase_with_checkpointing() {
    let e = deep("tanh", json!({"kind": "adamw", "lr": 0.01}));
    let mut whole = common::engine(&e);
    let mut phased = common::engine(&e);
    let mut gpu = gpu_engine(&e);
    phased.set_activation_checkpointing(true).unwrap();
    gpu.set_activation_checkpointing(true).unwrap();
    let expected = whole.step().unwrap();
    let forward = phased.step_phase().unwrap();
    let gpu_forward = pollster::block_on(gpu.step_phase()).unwrap();
    for report in [&forward, &gpu_forward] {
        assert_eq!(report.phase, StepPhase::Forward { micro: 0 });
        let names: Vec<&str> = report.layers[0].tensors.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["activation"]);
    }
    assert!(phased.set_activation_checkpointing(false).is_err());
    assert!(gpu.set_activation_checkpointing(false).is_err());
    let metrics = phased.step().unwrap();
    assert_eq!(
        (metrics.loss.to_bits(), metrics.grad_norm.to_bits()),
        (expected.loss.to_bits(), expected.grad_norm.to_bits())
    );
    assert_same_state("phased", &whole.state(), &phased.state());
    let gpu_metrics = pollster::block_on(gpu.finish_step()).unwrap().unwrap();
    assert!((gpu_metrics.loss - expected.loss).abs() <= 1e-5 * expected.loss.abs() + 1e-7);
    phased.set_activation_checkpointing(false).unwrap();
    gpu.set_activation_checkpointing(false).unwrap();
}
