//! The fused training step (`shaders/train_step_fused.wgsl`, K whole steps
//! in one dispatch) against the CPU engine, its twin: the same whole-run
//! cases as the phased path, switching paths mid-run and through
//! checkpoints, non-finite values, the zero-grad lesson, and calibration.

mod common;

use common::{assert_close_params, assert_close_runs, assert_same_run, gpu_engine};
use serde_json::json;
use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::engine::Timing;
use stepscope_core::gpu::{caps_loop_iterations, FusedWidth, GpuEngine, PassKind, SubmitCost};
use stepscope_core::{Error, StepMetrics};

fn fused_engine(e: &stepscope_core::Experiment) -> GpuEngine {
    let mut gpu = gpu_engine(e);
    gpu.use_fused = true;
    gpu
}

/// The fused engine at `width`, or None where the adapter cannot run that
/// width for `e` (llvmpipe's loop cap).
fn fused_engine_at(e: &stepscope_core::Experiment, width: FusedWidth) -> Option<GpuEngine> {
    let mut gpu = fused_engine(e);
    (gpu.set_fused_width(width) || !gpu.fused_available()).then_some(gpu)
}

/// Tolerances as for the phased path (`assert_close_runs`): the fused
/// kernel performs the same operations per element; only the order of sums
/// over the batch (row order, as the CPU) and of the squared norms (WG
/// strided partials) differ, a few ulps per sum. Both widths of the
/// kernel (64 and 4 invocations) are held to them.
#[test]
fn fused_steps_match_the_cpu_engine_for_every_optimizer_loss_and_schedule() {
    for width in FusedWidth::ALL {
        let mut fused_cases = 0;
        for (name, e) in common::training_matrix() {
            let mut cpu = common::engine(&e);
            let Some(mut gpu) = fused_engine_at(&e, width) else { continue };
            let name = format!("{name}, {} invocations", width.invocations());
            let lamb = name.contains("lamb");
            assert_eq!(gpu.runs_fused(), !lamb, "{name}: LAMB alone runs phased");
            fused_cases += usize::from(gpu.runs_fused());
            let cpu_metrics: Vec<StepMetrics> = (0..12).map(|_| cpu.step().unwrap()).collect();
            // 12 steps as submits of 5, 5 and 2: K steps in one dispatch.
            let gpu_metrics = gpu.run(12, 5).unwrap();
            assert_same_run(&name, &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
            if gpu.runs_fused() && gpu.has_timestamps() {
                assert!(gpu_metrics.iter().all(|m| m.timing == Timing::GpuFused), "{name}");
            }
        }
        assert_eq!(fused_cases, 15, "{width:?}");
    }
}

#[test]
fn l1_regularization_and_deep_narrow_networks_match_on_the_fused_path() {
    let mut layers: Vec<serde_json::Value> = (0..7).map(|_| json!({"units": 5, "activation": "silu"})).collect();
    layers.push(json!({"units": 1, "activation": "linear"}));
    let e = common::experiment(json!({
        "model": {"inputs": 2, "layers": layers},
        "regularization": {"kind": "l1", "rate": 0.002},
        "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}, "batch_size": 70
    }));
    let mut cpu = common::engine(&e);
    let cpu_metrics: Vec<StepMetrics> = (0..20).map(|_| cpu.step().unwrap()).collect();
    for width in FusedWidth::ALL {
        let Some(mut gpu) = fused_engine_at(&e, width) else { continue };
        assert!(gpu.runs_fused());
        let gpu_metrics = gpu.run(20, 20).unwrap();
        assert_same_run(&format!("l1, 8 layers, {width:?}"), &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
    }
}

/// Parameters and optimizer moments are the engine's own buffers on both
/// paths: a run may switch at any submit, and through a checkpoint.
#[test]
fn a_run_switching_paths_and_through_checkpoints_equals_the_cpu_run() {
    let e = common::experiment(json!({"grad_accumulation": 2, "clip_grad_norm": 0.3,
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 30}}));
    let mut cpu = common::engine(&e);
    let cpu_metrics: Vec<StepMetrics> = (0..24).map(|_| cpu.step().unwrap()).collect();

    let mut gpu = gpu_engine(&e);
    let mut metrics = gpu.run(6, 3).unwrap();
    gpu.use_fused = true;
    metrics.extend(gpu.run(6, 6).unwrap());
    gpu.use_fused = false;
    metrics.extend(gpu.run(6, 2).unwrap());
    // Through a checkpoint into a fresh engine that runs fused.
    let bytes = save_checkpoint(&gpu.state().unwrap()).unwrap();
    let mut restored =
        GpuEngine::from_state(common::shared_gpu(), load_checkpoint(&bytes).unwrap(), gpu.data().clone()).unwrap();
    restored.use_fused = true;
    metrics.extend(restored.run(6, 4).unwrap());
    assert_same_run("switching", &cpu, &cpu_metrics, &mut restored, &metrics);
}

#[test]
fn non_finite_values_stop_the_fused_step_as_the_phased_one() {
    let e = common::experiment(
        json!({"optimizer": {"kind": "sgd", "lr": 1.0}, "loss": "mse", "regularization": {"kind": "l2", "rate": 1e30}}),
    );
    let mut phased = gpu_engine(&e);
    let phased_err = phased.run(10, 10).unwrap_err();
    let p = phased.state().unwrap();
    for width in FusedWidth::ALL {
        let Some(mut fused) = fused_engine_at(&e, width) else { continue };
        let fused_err = fused.run(10, 10).unwrap_err();
        assert!(matches!(fused_err, Error::NonFinite(_)), "{fused_err}");
        assert_eq!(fused_err.to_string(), phased_err.to_string(), "{width:?}: same step, phase and layer");
        assert_eq!(fused.step_count(), phased.step_count());
        let f = fused.state().unwrap();
        assert!(f.params.iter().all(|x| x.is_finite()));
        assert_close_params("after NaN", &p.params, &f.params);
    }
}

#[test]
fn forgetting_to_zero_gradients_piles_them_up_on_the_fused_path_too() {
    let e = common::experiment(json!({"optimizer": {"kind": "sgd", "lr": 0.01}}));
    let mut cpu = common::engine(&e);
    let mut gpu = fused_engine(&e);
    cpu.zero_grad = false;
    gpu.zero_grad = false;
    let piled: Vec<StepMetrics> = (0..20).map(|_| cpu.step().unwrap()).collect();
    let piled_gpu = gpu.run(20, 7).unwrap();
    assert_close_runs("no zero_grad, fused", &piled, &piled_gpu);
}

/// The views read gradients and updates from the engine's buffers: the
/// fused path leaves them as the phased path does.
#[test]
fn the_fused_path_leaves_gradients_updates_and_activations_for_the_views() {
    let e = common::experiment(json!({}));
    let (mut phased, mut fused) = (gpu_engine(&e), fused_engine(&e));
    phased.run(3, 3).unwrap();
    fused.run(3, 3).unwrap();
    let [p_params, p_grads, p_updates] = pollster::block_on(phased.read_tensors()).unwrap();
    let [f_params, f_grads, f_updates] = pollster::block_on(fused.read_tensors()).unwrap();
    assert_close_params("params", &p_params, &f_params);
    assert_close_params("grads", &p_grads, &f_grads);
    assert_close_params("updates", &p_updates, &f_updates);
    assert!(f_updates.iter().any(|&u| u != 0.0));
    // The per-layer statistics (activations of the last micro-batch,
    // gradients, weights, updates) agree as well.
    let (p_stats, f_stats) =
        (pollster::block_on(phased.read_layer_stats()).unwrap(), pollster::block_on(fused.read_layer_stats()).unwrap());
    for (l, (p, f)) in p_stats.iter().zip(&f_stats).enumerate() {
        for (kind, (p, f)) in p.iter().zip(f).enumerate() {
            assert!((p.mean - f.mean).abs() <= 1e-5 * (1.0 + p.mean.abs()), "layer {l} kind {kind}: {p:?} / {f:?}");
        }
    }
}

#[test]
fn calibration_measures_both_paths_and_caches_by_adapter_and_shape() {
    let e = common::experiment(json!({"batch_size": 24}));
    let mut gpu = gpu_engine(&e);
    let first = pollster::block_on(gpu.calibrate()).unwrap();
    let fused = first.fused().expect("adam can run fused");
    assert!(fused.per_step_ms > 0.0 && first.phased.per_step_ms > 0.0, "{first:?}");
    // Every width the adapter runs was timed, and the faster one is kept.
    let widths: Vec<FusedWidth> = first.fused_widths.iter().map(|w| w.0).collect();
    assert_eq!(widths, gpu.fused_widths(), "{first:?}");
    let faster = first.fused_widths.iter().map(|w| w.1.steps_per_second(w.2)).fold(0.0, f64::max);
    let kept = first.fused_widths.iter().find(|w| Some(w.0) == first.fused_width()).unwrap();
    assert_eq!((kept.1, kept.1.steps_per_second(kept.2)), (fused, faster));
    assert_eq!(gpu.fused_width(), first.fused_width());
    assert!(first.fused_steps_per_s().unwrap() > 0.0 && first.phased_steps_per_s() > 0.0);
    assert!(!first.cached);
    assert_eq!(gpu.use_fused, first.fused_wins());
    assert_eq!(gpu.submit_cost, Some(first.best()));
    assert_eq!(gpu.step_count(), 0, "calibration runs on a probe, not on the run");
    let mut again = gpu_engine(&e);
    let second = pollster::block_on(again.calibrate()).unwrap();
    assert!(second.cached);
    assert_eq!((second.phased, second.fused()), (first.phased, first.fused()));
    assert_eq!(again.fused_width(), first.fused_width());
    // LAMB has no fused path: only the phased one is measured.
    let lamb = common::experiment(json!({"optimizer": {"kind": "lamb", "lr": 0.01}}));
    let mut gpu = gpu_engine(&lamb);
    let calibration = pollster::block_on(gpu.calibrate()).unwrap();
    assert_eq!(calibration.fused(), None);
    assert!(!gpu.runs_fused());
}

/// Steps per submit follow the measured cost: as many as fit in the
/// target time, more where a submit's fixed cost dominates.
#[test]
fn steps_per_submit_follow_the_submit_cost() {
    let cheap = SubmitCost { fixed_ms: 0.1, per_step_ms: 0.05 };
    assert_eq!(cheap.steps_for(10.0, 64), 64);
    let slow_steps = SubmitCost { fixed_ms: 1.0, per_step_ms: 43.0 };
    assert_eq!(slow_steps.steps_for(30.0, 64), 1);
    let fixed = SubmitCost { fixed_ms: 85.0, per_step_ms: 1.0 };
    assert_eq!(fixed.steps_for(30.0, 64), 64, "twice the fixed cost is the target");
    assert!((fixed.steps_per_second(64) - 64e3 / 149.0).abs() < 1e-9);
}

/// llvmpipe (lavapipe) silently leaves a loop nest after 65 535
/// iterations per invocation; the fused kernel's nest spans a submit's
/// steps. There, fused submits are capped below that (or the fused step
/// does not apply at all), so the run still equals the CPU run; elsewhere
/// nothing changes. Without the cap, 64 steps of (64, 64) went wrong from
/// the 6th step on lavapipe, and one step of 256 units at batch 64 was
/// cut short.
#[test]
fn fused_submits_stay_inside_the_adapters_loop_limit() {
    // 16 steps pass the cap on lavapipe (5 fused steps of (64, 64) per
    // submit). SGD: Adam divides tiny gradients of wide layers by their
    // own √v, which turns their last-bit differences into visible ones.
    for (units, batch) in [(64, 64), (256, 64)] {
        let e = common::experiment(json!({
            "model": {"inputs": 2, "layers": [{"units": units, "activation": "tanh"},
                {"units": units, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
            "batch_size": batch, "clip_grad_norm": 1.0, "optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}
        }));
        let mut cpu = common::engine(&e);
        let cpu_metrics: Vec<StepMetrics> = (0..16).map(|_| cpu.step().unwrap()).collect();
        for width in FusedWidth::ALL {
            // Where a width does not fit the cap, the engine stays on the
            // other (or on the phased path), and still equals the CPU run.
            let mut gpu = fused_engine(&e);
            gpu.set_fused_width(width);
            let capped = caps_loop_iterations(&gpu.context().adapter_info);
            if capped {
                assert!(!gpu.runs_fused() || gpu.max_steps_per_submit() < 64, "{units}: capped on llvmpipe");
            }
            let name = format!("{units} units, batch {batch}, fused={} {:?}", gpu.runs_fused(), gpu.fused_width());
            let gpu_metrics = gpu.run(16, 16).unwrap();
            assert_same_run(&name, &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
        }
    }
}

/// The page moves a run between engines by its state: a run that switches
/// CPU → GPU (fused) → CPU equals one that stays on the CPU.
#[test]
fn a_run_switching_engines_mid_way_equals_one_that_does_not() {
    let e = common::experiment(json!({"grad_accumulation": 2, "clip_grad_norm": 0.5}));
    let mut straight = common::engine(&e);
    let expected: Vec<StepMetrics> = (0..12).map(|_| straight.step().unwrap()).collect();

    let mut cpu = common::engine(&e);
    let mut metrics: Vec<StepMetrics> = (0..4).map(|_| cpu.step().unwrap()).collect();
    let mut gpu = GpuEngine::from_state(common::shared_gpu(), cpu.state(), cpu.data().clone()).unwrap();
    gpu.use_fused = true;
    metrics.extend(gpu.run(4, 4).unwrap());
    let mut back = stepscope_core::CpuEngine::from_state(gpu.state().unwrap(), gpu.data().clone()).unwrap();
    metrics.extend((0..4).map(|_| back.step().unwrap()));
    assert_close_runs("cpu → gpu → cpu", &expected, &metrics);
    assert_close_params("cpu → gpu → cpu", &straight.state().params, &back.state().params);
}

/// The profiled step (`GpuEngine::submit_profiled`): one step on the phased
/// kernels with per-phase timestamps in the middle of a fused run. The run
/// stays the CPU engine's within the twin tolerances, the profiled step's
/// phases are timed apart where the adapter has timestamps, and the run
/// goes back to the fused step after it.
#[test]
fn a_profiled_step_in_a_fused_run_times_its_phases_and_keeps_the_run() {
    let mut checked = 0;
    for (name, e) in common::training_matrix().into_iter().take(6) {
        let mut cpu = common::engine(&e);
        let mut gpu = fused_engine(&e);
        if !gpu.runs_fused() {
            continue;
        }
        checked += 1;
        let cpu_metrics: Vec<StepMetrics> = (0..9).map(|_| cpu.step().unwrap()).collect();
        let mut gpu_metrics = gpu.run(4, 4).unwrap();
        gpu.submit_profiled().unwrap();
        let profiled = gpu.collect().unwrap();
        assert_eq!(profiled.len(), 1, "{name}: one step");
        if gpu.has_timestamps() {
            let m = &profiled[0];
            assert_eq!(m.timing, Timing::GpuTimestamps, "{name}");
            assert!(
                m.phases.forward_ms > 0.0 && m.phases.backward_ms > 0.0 && m.phases.optimizer_ms > 0.0,
                "{name}: {m:?}"
            );
            assert!(gpu.timestamp_resolution_ms().is_some_and(|r| r > 0.0), "{name}");
            // The passes kept for a trace: the fused submits' and the
            // profiled step's, each under its step, adding up to its phases.
            let kept = gpu.take_passes();
            let of = |kind: PassKind| -> f64 {
                kept.iter().filter(|p| p.step == m.step && p.kind == kind).map(|p| p.end_ms - p.start_ms).sum()
            };
            assert!((of(PassKind::Forward) - m.phases.forward_ms).abs() < 1e-9, "{name}: {kept:?}");
            assert!((of(PassKind::Backward) - m.phases.backward_ms).abs() < 1e-9, "{name}");
            assert!(kept.iter().any(|p| p.kind == PassKind::Fused && p.step < m.step), "{name}: {kept:?}");
            assert!(gpu.take_passes().is_empty(), "{name}: taken once");
        }
        gpu_metrics.extend(profiled);
        assert!(gpu.runs_fused(), "{name}: back on the fused step");
        gpu_metrics.extend(gpu.run(4, 4).unwrap());
        assert_same_run(&name, &cpu, &cpu_metrics, &mut gpu, &gpu_metrics);
    }
    assert!(checked > 0);
}
