//! Whole runs on the GPU engine against the CPU reference: every optimizer,
//! loss and schedule, with clipping and accumulation on and off; K steps
//! per submit; checkpoints across engines; non-finite values; device loss.

mod common;
mod gpu_common;

use std::sync::Arc;

use gpu_common::ctx;
use serde_json::json;
use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::Dataset;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::trainer::{block_on, conformance, Applied, Backend};
use stepscope_core::{CpuEngine, Error, StepMetrics, Trainer};

use common::{assert_close_params, assert_close_runs, gpu_engine, shared_gpu as shared};

/// The shared whole-run body (`trainer::conformance`), as the browser
/// test runs it on WebGPU: one submit per step here.
#[test]
fn every_optimizer_loss_and_schedule_matches_the_cpu_engine() {
    for (name, e) in common::training_matrix() {
        block_on(conformance::whole_run(&name, &e, shared(), &[1; 12], false)).unwrap();
    }
}

/// A run moved from the CPU to the GPU and back equals one that stayed.
#[test]
fn switching_engines_mid_run_changes_nothing() {
    for (name, e) in common::training_matrix().into_iter().step_by(4) {
        block_on(conformance::switching_engines_mid_run(&name, &e, shared())).unwrap();
    }
}

/// Live hyperparameter edits are taken in place on both engines, with the
/// same bits as a run rebuilt from its state, for every optimizer and on
/// the fused step.
#[test]
fn live_edits_are_taken_in_place_on_both_engines() {
    for (name, e) in common::training_matrix().into_iter().step_by(3) {
        block_on(conformance::live_edits_in_place(&format!("cpu {name}"), &e, None, false)).unwrap();
        block_on(conformance::live_edits_in_place(&format!("gpu {name}"), &e, Some(shared()), false)).unwrap();
        block_on(conformance::live_edits_in_place(&format!("fused {name}"), &e, Some(shared()), true)).unwrap();
    }
}

/// Edits that change the run's shape rebuild it from its state, on the
/// same engine, and the optimizer state goes with it where it fits.
#[test]
fn shape_edits_rebuild_the_run_from_its_state() {
    let e = common::experiment(json!({"optimizer": {"kind": "adam", "lr": 0.01}}));
    let data = Dataset::load(&e, None).unwrap();
    let mut trainer = Trainer::fresh(&e, data, Some(shared())).unwrap();
    block_on(trainer.run(3, 3)).unwrap();
    let before = block_on(trainer.read_state()).unwrap();
    let mut wider = e.clone();
    wider.batch_size = 20;
    assert_eq!(block_on(trainer.apply(&wider)).unwrap(), Applied::Rebuilt);
    let after = block_on(trainer.read_state()).unwrap();
    assert_eq!((&after.params, &after.optimizer.exp_avg, after.step()), (&before.params, &before.optimizer.exp_avg, 3));
    assert_eq!(trainer.backend(), Backend::Gpu);
    let metrics = block_on(trainer.run(2, 2)).unwrap();
    assert_eq!(metrics[0].step, 3);
    // A change of data is a new run, refused here; the run stays.
    let mut other = wider.clone();
    other.seed += 1;
    assert!(block_on(trainer.apply(&other)).is_err());
    assert_eq!(trainer.step_count(), 5);
}

/// K steps recorded into one submit run the same kernels in the same order
/// as K submits of one step: the results agree bit for bit.
#[test]
fn k_steps_per_submit_equal_single_steps_exactly() {
    let e = common::experiment(json!({"grad_accumulation": 2, "clip_grad_norm": 1.0,
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 4, "total_steps": 40}}));
    let mut single = gpu_engine(&e);
    let mut batched = gpu_engine(&e);
    let a = single.run(20, 1).unwrap();
    let b = batched.run(20, 8).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (x.step, x.loss.to_bits(), x.grad_norm.to_bits()),
            (y.step, y.loss.to_bits(), y.grad_norm.to_bits())
        );
    }
    assert_eq!(single.state().unwrap(), batched.state().unwrap());
}

#[test]
fn checkpoints_move_between_engines() {
    let e = common::experiment(json!({"optimizer": {"kind": "adam", "lr": 0.02}, "clip_grad_norm": 1.0}));
    // GPU → checkpoint → GPU restores exactly, and → CPU continues the run.
    let mut gpu = gpu_engine(&e);
    gpu.run(10, 5).unwrap();
    let state = gpu.state().unwrap();
    let bytes = save_checkpoint(&state).unwrap();
    let loaded = load_checkpoint(&bytes).unwrap();
    assert_eq!(loaded, state);
    let data = Dataset::load(&loaded.experiment, None).unwrap();
    let mut restored = GpuEngine::from_state(shared(), loaded.clone(), data.clone()).unwrap();
    assert_eq!(restored.state().unwrap(), state);
    let mut cpu = CpuEngine::from_state(loaded, data).unwrap();
    let gpu_next = gpu.run(8, 1).unwrap();
    let cpu_next: Vec<StepMetrics> = (0..8).map(|_| cpu.step().unwrap()).collect();
    assert_close_runs("gpu→cpu", &cpu_next, &gpu_next);
    let restored_next = restored.run(8, 1).unwrap();
    assert_eq!(
        restored_next.iter().map(|m| m.loss.to_bits()).collect::<Vec<_>>(),
        gpu_next.iter().map(|m| m.loss.to_bits()).collect::<Vec<_>>(),
        "a restored GPU run continues exactly"
    );
    // CPU → checkpoint → GPU.
    let mut cpu = common::engine(&e);
    for _ in 0..10 {
        cpu.step().unwrap();
    }
    let loaded = load_checkpoint(&save_checkpoint(&cpu.state()).unwrap()).unwrap();
    let mut gpu = GpuEngine::from_state(shared(), loaded, cpu.data().clone()).unwrap();
    let g = gpu.run(5, 5).unwrap();
    let c: Vec<StepMetrics> = (0..5).map(|_| cpu.step().unwrap()).collect();
    assert_close_runs("cpu→gpu", &c, &g);
}

#[test]
fn non_finite_values_name_layer_and_phase_and_keep_the_last_good_state() {
    let e = common::experiment(
        json!({"optimizer": {"kind": "sgd", "lr": 1.0}, "loss": "mse", "regularization": {"kind": "l2", "rate": 1e30}}),
    );
    let mut gpu = gpu_engine(&e);
    let err = gpu.run(10, 10).unwrap_err();
    let Error::NonFinite(message) = &err else { panic!("{err}") };
    assert!(
        message.contains("layer")
            && (message.contains("forward") || message.contains("optimizer") || message.contains("backward")),
        "{message}"
    );
    // The CPU engine fails at the same step and in the same phase.
    let mut cpu = common::engine(&e);
    let cpu_err = (0..10).find_map(|_| cpu.step().err()).expect("cpu fails too");
    assert_eq!(cpu.step_count(), gpu.step_count(), "{cpu_err} / {err}");
    // Both kept the parameters of the last good step: the optimizer kernels
    // skip once the flag is set.
    let (c, g) = (cpu.state(), gpu.state().unwrap());
    assert!(g.params.iter().all(|p| p.is_finite()), "{err}");
    assert_close_params("after NaN", &c.params, &g.params);
}

#[test]
fn device_loss_is_an_error_and_training_resumes_on_a_new_device() {
    let e = common::experiment(json!({}));
    let own = Arc::new(GpuContext::new_blocking().unwrap());
    let cpu = common::engine(&e);
    let mut gpu = GpuEngine::from_state(own.clone(), cpu.state(), cpu.data().clone()).unwrap();
    gpu.run(5, 5).unwrap();
    let checkpoint = save_checkpoint(&gpu.state().unwrap()).unwrap();
    own.device.destroy();
    let err = gpu.run(1, 1).unwrap_err();
    assert!(matches!(err, Error::Gpu(_)), "{err}");
    // A new device, the last checkpoint, and training goes on.
    let fresh = Arc::new(GpuContext::new_blocking().unwrap());
    let state = load_checkpoint(&checkpoint).unwrap();
    let mut resumed = GpuEngine::from_state(fresh, state, cpu.data().clone()).unwrap();
    let m = resumed.run(3, 3).unwrap();
    assert_eq!(m[0].step, 5);
    let _ = ctx();
}

/// The page's per-layer statistics, computed on the GPU, describe the same
/// tensors as the CPU engine's after the same step: activations, gradients
/// and weights, with updates equal to the parameter change. min/max within
/// 1e-5 relative, means within 1e-4 of the spread, histograms summing to
/// the element count (bins may differ where values sit on a bin edge).
#[test]
fn layer_statistics_describe_the_engine_tensors() {
    use stepscope_core::stats::tensor_stats;
    let e = common::experiment(json!({"optimizer": {"kind": "adam", "lr": 0.01}}));
    let mut cpu = common::engine(&e);
    let mut gpu = gpu_engine(&e);
    let before = cpu.state().params;
    cpu.step().unwrap();
    gpu.step().unwrap();
    let stats = pollster::block_on(gpu.read_layer_stats()).unwrap();
    let layout = cpu.layout().clone();
    assert_eq!(stats.len(), layout.layers.len());
    for (l, shape) in layout.layers.iter().enumerate() {
        let range = shape.weight_offset..shape.bias_offset + shape.units;
        let updates: Vec<f32> = range.clone().map(|i| cpu.params()[i] - before[i]).collect();
        let expected = [
            tensor_stats(&cpu.activations().a[l]),
            tensor_stats(&cpu.grads()[range.clone()]),
            tensor_stats(&cpu.params()[range.clone()]),
            tensor_stats(&updates),
        ];
        for (kind, (g, c)) in stats[l].iter().zip(&expected).enumerate() {
            let spread = (c.max - c.min).abs().max(1e-12);
            let what = format!("layer {l} kind {kind}");
            assert_eq!(g.count(), c.count(), "{what}");
            assert_eq!(g.non_finite, 0, "{what}");
            assert!((g.min - c.min).abs() <= 1e-5 * spread.max(c.min.abs()), "{what}: min {} vs {}", g.min, c.min);
            assert!((g.max - c.max).abs() <= 1e-5 * spread.max(c.max.abs()), "{what}: max {} vs {}", g.max, c.max);
            assert!((g.mean - c.mean).abs() <= 1e-4 * spread, "{what}: mean {} vs {}", g.mean, c.mean);
            assert!((g.std - c.std).abs() <= 1e-3 * spread, "{what}: std {} vs {}", g.std, c.std);
        }
    }
}

/// Memory figures come from the actual buffers and agree across engines:
/// parameters and gradients 4·P bytes each; optimizer state 0, 1 or 2
/// copies by optimizer; stored activations 2·4·B·Σ units.
#[test]
fn memory_figures_match_the_model_on_both_engines() {
    for (optimizer, copies) in [
        (json!({"kind": "sgd", "lr": 0.1}), 0),
        (json!({"kind": "sgd", "lr": 0.1, "momentum": 0.9}), 1),
        (json!({"kind": "adamw", "lr": 0.01}), 2),
    ] {
        let e = common::experiment(json!({"optimizer": optimizer, "batch_size": 24}));
        let cpu = common::engine(&e);
        let gpu = gpu_engine(&e);
        let p = cpu.layout().parameter_count as u64;
        let m = cpu.memory();
        assert_eq!(m, gpu.memory());
        assert_eq!((m.params, m.grads, m.optimizer), (4 * p, 4 * p, copies * 4 * p));
        let units: u64 = e.model.layers.iter().map(|l| l.units as u64).sum();
        assert_eq!(m.activations, 2 * 4 * 24 * units);
        assert_eq!(m.peak_backward(), m.params + m.grads + m.optimizer + m.activations + m.backward_scratch);
    }
}

/// The "forgot to zero the gradients" lesson: gradients pile up, so the
/// gradient norm grows well past the correct loop's, and both engines
/// agree on it.
#[test]
fn forgetting_to_zero_gradients_piles_them_up_on_both_engines() {
    let e = common::experiment(json!({"optimizer": {"kind": "sgd", "lr": 0.01}}));
    let (mut right, mut wrong_cpu, mut wrong_gpu) = (common::engine(&e), common::engine(&e), gpu_engine(&e));
    wrong_cpu.zero_grad = false;
    wrong_gpu.zero_grad = false;
    let correct: Vec<StepMetrics> = (0..20).map(|_| right.step().unwrap()).collect();
    let piled: Vec<StepMetrics> = (0..20).map(|_| wrong_cpu.step().unwrap()).collect();
    let piled_gpu = wrong_gpu.run(20, 1).unwrap();
    assert_close_runs("no zero_grad", &piled, &piled_gpu);
    assert_eq!(piled[0].grad_norm, correct[0].grad_norm, "the first step is the same");
    assert!(piled[19].grad_norm > 5.0 * correct[19].grad_norm, "{} vs {}", piled[19].grad_norm, correct[19].grad_norm);
}

/// A background state read (the page's background checkpoints) holds the
/// state at the step it began, even while later steps run before it is
/// awaited.
#[test]
fn a_background_state_read_is_the_state_when_it_began() {
    for optimizer in [json!({"kind": "adam", "lr": 0.01}), json!({"kind": "sgd", "lr": 0.1, "momentum": 0.9})] {
        let e = common::experiment(json!({ "optimizer": optimizer }));
        let mut reference = gpu_engine(&e);
        reference.run(3, 3).unwrap();
        let expected = reference.state().unwrap();

        let mut engine = gpu_engine(&e);
        engine.run(3, 3).unwrap();
        let pending = engine.begin_read_state().unwrap();
        assert_eq!(pending.step(), 3);
        engine.run(2, 2).unwrap();
        let state = pollster::block_on(pending.finish()).unwrap();
        assert_eq!(state, expected);
        assert_eq!(engine.step_count(), 5);
        assert_ne!(engine.state().unwrap().params, expected.params, "training went on meanwhile");
    }
}
