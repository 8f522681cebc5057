//! Step-by-phase mode: a step taken one phase at a time is the same step
//! as `step()`, on both engines, and each phase reports what it produced.

mod common;

use std::sync::Arc;

use serde_json::json;
use stepscope_core::engine::phases::PhaseReport;
use stepscope_core::engine::StepPhase;
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::stats::tensor_stats;
use stepscope_core::{CpuEngine, Experiment};

fn accumulating() -> Experiment {
    common::experiment(json!({
        "grad_accumulation": 2,
        "clip_grad_norm": 0.5,
        "regularization": {"kind": "l2", "rate": 0.001},
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 2, "total_steps": 20}
    }))
}

fn phases_of_one_step(engine: &mut CpuEngine) -> Vec<PhaseReport> {
    let mut out = vec![engine.step_phase().unwrap()];
    while out.last().unwrap().metrics.is_none() {
        out.push(engine.step_phase().unwrap());
    }
    out
}

#[test]
fn a_step_by_phase_equals_a_whole_step_on_the_cpu() {
    let e = accumulating();
    let mut whole = common::engine(&e);
    let mut phased = common::engine(&e);
    for _ in 0..3 {
        let expected = whole.step().unwrap();
        let reports = phases_of_one_step(&mut phased);
        let order: Vec<StepPhase> = reports.iter().map(|r| r.phase).collect();
        assert_eq!(
            order,
            [
                StepPhase::Forward { micro: 0 },
                StepPhase::Backward { micro: 0 },
                StepPhase::Forward { micro: 1 },
                StepPhase::Backward { micro: 1 },
                StepPhase::Optimizer
            ]
        );
        let metrics = reports.last().unwrap().metrics.clone().unwrap();
        assert_eq!((metrics.step, metrics.loss, metrics.grad_norm), (expected.step, expected.loss, expected.grad_norm));
        // The step's loss is the mean of the micro-batches' losses.
        let micro_losses: Vec<f32> = reports.iter().filter_map(|r| r.loss).collect();
        assert_eq!(micro_losses.len(), 2);
        assert!(((micro_losses[0] + micro_losses[1]) / 2.0 - metrics.loss).abs() <= 1e-7);
        assert_eq!(whole.state(), phased.state(), "bit for bit");
    }
}

#[test]
fn each_phase_reports_its_tensors() {
    let e = accumulating();
    let mut engine = common::engine(&e);
    let forward = engine.step_phase().unwrap();
    // Forward: pre-activation and activation of every layer, from the
    // engine's own buffers.
    assert_eq!(forward.layers.len(), 2);
    let names: Vec<&str> = forward.layers[0].tensors.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["pre-activation", "activation"]);
    assert_eq!(forward.layers[0].tensors[1].stats, tensor_stats(&engine.activations().a[0]));
    assert_eq!(forward.layers[0].tensors[1].stats.count() as usize, 16 * 8);
    assert!(forward.layers[0].tensors[1].stats.max <= 1.0, "tanh outputs");

    let backward = engine.step_phase().unwrap();
    let names: Vec<&str> = backward.layers[1].tensors.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["weight grad", "bias grad", "layer grad"]);
    let g = &backward.layers[1].tensors;
    assert!((g[2].norm.powi(2) - g[0].norm.powi(2) - g[1].norm.powi(2)).abs() < 1e-9 * g[2].norm.powi(2).max(1.0));

    engine.step_phase().unwrap();
    engine.step_phase().unwrap();
    let optimizer = engine.step_phase().unwrap();
    assert_eq!(optimizer.phase, StepPhase::Optimizer);
    let names: Vec<&str> = optimizer.layers[0].tensors.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["update", "parameters", "exp_avg", "exp_avg_sq"]);
    for layer in &optimizer.layers {
        let ratio = layer.update_ratio.unwrap();
        assert!(ratio > 0.0 && ratio < 1.0, "layer {}: ‖Δθ‖/‖θ‖ = {ratio}", layer.layer);
    }
    assert_eq!(optimizer.next(), StepPhase::Forward { micro: 0 });
    assert!(!engine.mid_step());
}

#[test]
fn a_whole_step_finishes_a_step_begun_by_phase() {
    let e = accumulating();
    let mut whole = common::engine(&e);
    let mut mixed = common::engine(&e);
    whole.step().unwrap();
    whole.step().unwrap();
    mixed.step_phase().unwrap();
    mixed.step_phase().unwrap();
    assert!(mixed.mid_step());
    assert_eq!(mixed.next_phase(), StepPhase::Forward { micro: 1 });
    mixed.step().unwrap();
    assert!(!mixed.mid_step());
    mixed.step().unwrap();
    assert_eq!(whole.state(), mixed.state());
}

/// The same phases on the GPU: the same kernels as a whole submit (so the
/// final state is identical to the GPU's own `step`), and summaries within
/// the CPU/GPU tolerance of `gpu_training.rs` (1e-5 relative).
#[test]
fn gpu_phases_match_the_gpu_step_and_the_cpu_phases() {
    let ctx = Arc::new(GpuContext::new_blocking().expect("GPU tests need an adapter"));
    for optimizer in [json!({"kind": "adamw", "lr": 0.01}), json!({"kind": "sgd", "lr": 0.1, "momentum": 0.9})] {
        let mut e = accumulating();
        e.optimizer = serde_json::from_value(optimizer).unwrap();
        let cpu_start = common::engine(&e);
        let mut whole = GpuEngine::from_state(ctx.clone(), cpu_start.state(), cpu_start.data().clone()).unwrap();
        let mut phased = GpuEngine::from_state(ctx.clone(), cpu_start.state(), cpu_start.data().clone()).unwrap();
        let mut cpu = common::engine(&e);
        for _ in 0..2 {
            let expected = whole.step().unwrap();
            let cpu_reports = phases_of_one_step(&mut cpu);
            for cpu_report in &cpu_reports {
                assert_eq!(phased.next_phase(), cpu_report.phase);
                let report = pollster::block_on(phased.step_phase()).unwrap();
                assert_eq!(report.phase, cpu_report.phase);
                assert_eq!(report.step, cpu_report.step);
                for (g, c) in report.layers.iter().zip(&cpu_report.layers) {
                    for (gt, ct) in g.tensors.iter().zip(&c.tensors) {
                        let what = format!("{} layer {} {}", report.phase, g.layer, gt.name);
                        assert_eq!(gt.name, ct.name);
                        assert!(
                            (gt.norm - ct.norm).abs() <= 1e-5 * ct.norm + 1e-7,
                            "{what}: {} vs {}",
                            gt.norm,
                            ct.norm
                        );
                        let (gm, cm) = (gt.stats.mean, ct.stats.mean);
                        assert!(
                            (gm - cm).abs() <= 1e-5 * (ct.stats.std + cm.abs()) + 1e-7,
                            "{what}: mean {gm} vs {cm}"
                        );
                    }
                }
                if let (Some(g), Some(c)) = (report.loss, cpu_report.loss) {
                    assert!((g - c).abs() <= 1e-5 * c.abs() + 1e-7, "micro-batch loss {g} vs {c}");
                }
                if let Some(m) = report.metrics {
                    assert_eq!(
                        (m.step, m.loss, m.grad_norm, m.lr),
                        (expected.step, expected.loss, expected.grad_norm, expected.lr)
                    );
                }
            }
            assert!(!phased.mid_step());
            assert_eq!(phased.state().unwrap(), whole.state().unwrap(), "identical kernels, identical state");
        }
        // A whole submit refuses to start while a phased step is unfinished;
        // finish_step completes it.
        pollster::block_on(phased.step_phase()).unwrap();
        assert!(phased.submit(1).is_err());
        let finished = pollster::block_on(phased.finish_step()).unwrap().unwrap();
        let expected = whole.step().unwrap();
        assert_eq!((finished.loss, finished.grad_norm), (expected.loss, expected.grad_norm));
        assert_eq!(phased.state().unwrap(), whole.state().unwrap());
    }
}
