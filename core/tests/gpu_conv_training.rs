//! Whole conv-net runs on the GPU engine (`gpu::conv`'s kernels in the
//! phased plan) against the CPU engine: every optimizer, clipping,
//! accumulation, regularization and schedule; K steps per submit;
//! activation checkpointing; checkpoints across engines; the NaN sentinel.

mod common;
mod gpu_common;

use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::Dataset;
use stepscope_core::gpu::{conv, GpuEngine};
use stepscope_core::model::LayerOp;
use stepscope_core::trainer::{block_on, conformance};
use stepscope_core::{Error, Trainer};

use common::{gpu_engine, shared_gpu as shared};

/// The shared whole-run body, in submits of 1, 3 and 4 steps.
#[test]
fn conv_nets_train_as_on_the_cpu_engine() {
    for (name, e) in conformance::conv_training_matrix() {
        block_on(conformance::whole_run(&name, &e, shared(), &[1, 3, 4], false)).unwrap();
    }
}

/// K steps in one submit are the same kernels in the same order as K
/// submits of one: the same bits.
#[test]
fn k_steps_per_submit_equal_single_steps_exactly() {
    let (_, e) = conformance::conv_training_matrix().swap_remove(1);
    let (mut single, mut batched) = (gpu_engine(&e), gpu_engine(&e));
    let (a, b) = (single.run(6, 1).unwrap(), batched.run(6, 6).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.loss.to_bits(), x.grad_norm.to_bits()), (y.loss.to_bits(), y.grad_norm.to_bits()));
    }
    assert_eq!(single.state().unwrap(), batched.state().unwrap());
}

/// The implicit-GEMM kernels (`*_tiled.wgsl`) in every conv layer train
/// with the direct kernels' bits, step for step, so the calibration's
/// pick changes a run's speed and never its numbers; before it has timed
/// anything, a conv layer runs the direct kernels.
#[test]
fn implicit_gemm_trains_with_the_direct_kernels_bits() {
    use stepscope_core::gpu::matmul::{LayerMatmuls, MatmulVariant};
    for (name, mut e) in conformance::conv_training_matrix() {
        // A batch no other test calibrates at (the timings are cached per
        // process by shape): this engine has timed nothing.
        e.batch_size = 13;
        e.shards = 1;
        let (mut direct, mut gemm) = (gpu_engine(&e), gpu_engine(&e));
        for (l, m) in direct.matmuls().iter().enumerate() {
            if matches!(direct.layout().layers[l].op, LayerOp::Conv(_)) {
                assert_eq!(*m, LayerMatmuls::all(MatmulVariant::Blocked), "{name}: layer {l} before calibrating");
            }
        }
        // The dense layers as the direct run has them (their two variants
        // differ in the bias gradient's order); every conv kernel tiled.
        let tiled: Vec<_> = direct
            .layout()
            .layers
            .iter()
            .zip(direct.matmuls())
            .map(|(l, m)| match l.op {
                LayerOp::Conv(_) => LayerMatmuls::all(MatmulVariant::Tiled),
                _ => *m,
            })
            .collect();
        gemm.set_matmuls(tiled).unwrap();
        let (a, b) = (direct.run(4, 2).unwrap(), gemm.run(4, 2).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.loss.to_bits(), x.grad_norm.to_bits()), (y.loss.to_bits(), y.grad_norm.to_bits()), "{name}");
        }
        assert_eq!(direct.state().unwrap(), gemm.state().unwrap(), "{name}");
    }
}

/// Checkpointing recomputes each conv's and pool's z in backward with
/// forward's kernel on forward's inputs: the same bits, less memory, and
/// the CPU's checkpointed run.
#[test]
fn activation_checkpointing_keeps_the_bits_and_frees_memory() {
    for (name, e) in conformance::conv_training_matrix().into_iter().step_by(2) {
        let data = Dataset::load(&e, None).unwrap();
        let mut plain = Trainer::fresh(&e, data.clone(), Some(shared())).unwrap();
        let mut kept = Trainer::fresh(&e, data.clone(), Some(shared())).unwrap();
        kept.set_activation_checkpointing(true).unwrap();
        let mut cpu = Trainer::fresh(&e, data, None).unwrap();
        cpu.set_activation_checkpointing(true).unwrap();
        let (a, b, c) =
            (block_on(plain.run(4, 2)).unwrap(), block_on(kept.run(4, 2)).unwrap(), block_on(cpu.run(4, 2)).unwrap());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.loss.to_bits(), x.grad_norm.to_bits()), (y.loss.to_bits(), y.grad_norm.to_bits()), "{name}");
        }
        conformance::close_runs(&name, &c, &b).unwrap();
        let (sa, sb) = (block_on(plain.read_state()).unwrap(), block_on(kept.read_state()).unwrap());
        assert_eq!(sa.params, sb.params, "{name}: the same bits with checkpointing");
        conformance::close_states(&name, &block_on(cpu.read_state()).unwrap(), &sb).unwrap();
        assert!(kept.memory().activations < plain.memory().activations, "{name}");
    }
}

/// A GPU run's checkpoint restores on the GPU exactly and continues on the
/// CPU as the CPU's own run would.
#[test]
fn checkpoints_move_between_engines() {
    let (name, e) = conformance::conv_training_matrix().swap_remove(0);
    let mut gpu = gpu_engine(&e);
    gpu.run(3, 3).unwrap();
    let state = gpu.state().unwrap();
    let bytes = save_checkpoint(&state).unwrap();
    let mut again = GpuEngine::from_state(shared(), load_checkpoint(&bytes).unwrap(), gpu.data().clone()).unwrap();
    assert_eq!(again.state().unwrap(), state);
    let (a, b) = (gpu.run(2, 2).unwrap(), again.run(2, 2).unwrap());
    assert_eq!(a[1].loss.to_bits(), b[1].loss.to_bits(), "{name}");
    let mut cpu = common::engine(&e);
    let cpu_metrics: Vec<_> = (0..5).map(|_| cpu.step().unwrap()).collect();
    conformance::close_runs(&name, &cpu_metrics[3..], &a).unwrap();
}

/// A regularization rate that overflows: the GPU stops at the step and in
/// the phase the CPU stops, names the layer, and keeps the last good
/// parameters.
#[test]
fn non_finite_values_name_layer_and_phase_as_the_cpu() {
    let (_, mut e) = conformance::conv_training_matrix().swap_remove(1);
    e.regularization = Some(stepscope_core::experiment::Regularization {
        kind: stepscope_core::experiment::RegularizationKind::L2,
        rate: 1e30,
    });
    e.clip_grad_norm = None;
    let mut gpu = gpu_engine(&e);
    let err = gpu.run(6, 6).unwrap_err();
    let Error::NonFinite(message) = &err else { panic!("{err}") };
    assert!(message.contains("layer"), "{message}");
    let mut cpu = common::engine(&e);
    let cpu_err = (0..6).find_map(|_| cpu.step().err()).expect("the CPU run overflows too");
    assert_eq!(cpu.step_count(), gpu.step_count(), "{cpu_err} / {err}");
    let (c, g) = (cpu.state(), gpu.state().unwrap());
    assert!(g.params.iter().all(|p| p.is_finite()), "{err}");
    common::assert_close_params("after NaN", &c.params, &g.params);
}

/// The GPU's memory figures are what it holds for a conv net: z and a of
/// every layer (2·4·B·Σ units); as backward's scratch, ∂L/∂z of every layer
/// (4·B·Σ units) and ∂W's partial sums for the largest conv layer; no
/// patch matrix (its kernels are direct) and no index of the max pools'
/// choices (found again in backward).
#[test]
fn memory_figures_are_the_buffers_the_gpu_holds() {
    let (_, e) = conformance::conv_training_matrix().swap_remove(0);
    let gpu = gpu_engine(&e);
    let layout = gpu.layout();
    let units: u64 = layout.layers.iter().map(|l| l.units as u64).sum();
    let (m, b, p) = (gpu.memory(), e.batch_size as u64, layout.parameter_count as u64);
    assert_eq!((m.params, m.grads, m.optimizer), (4 * p, 4 * p, 2 * 4 * p));
    let partials = layout
        .layers
        .iter()
        .filter_map(|l| if let LayerOp::Conv(c) = l.op { Some(conv::partials_floats(e.batch_size, &c)) } else { None })
        .max()
        .unwrap() as u64;
    assert_eq!((m.activations, m.backward_scratch), (2 * 4 * b * units, 4 * b * units + 4 * partials));
}

/// A step taken phase by phase (the page's step-through) and a profiled
/// step (each phase its own pass) on a conv net: per-layer reports of every
/// layer, pools included, and the run stays the CPU's.
#[test]
fn phases_and_profiled_steps_keep_the_run() {
    use stepscope_core::engine::StepPhase;
    let (name, e) = conformance::conv_training_matrix().swap_remove(1); // 2 micro-batches
    let mut cpu = common::engine(&e);
    let cpu_metrics: Vec<_> = (0..3).map(|_| cpu.step().unwrap()).collect();
    let mut gpu = gpu_engine(&e);
    let mut metrics = Vec::new();
    let mut phases = Vec::new();
    loop {
        let report = block_on(gpu.step_phase()).unwrap();
        assert_eq!(report.layers.len(), e.model.layers.len(), "{name}: {:?}", report.phase);
        phases.push(report.phase);
        if let Some(m) = report.metrics {
            metrics.push(m);
            break;
        }
    }
    assert_eq!(phases.first(), Some(&StepPhase::Forward { micro: 0 }), "{name}: {phases:?}");
    assert!(phases.contains(&StepPhase::Backward { micro: 1 }), "{name}: {phases:?}");
    gpu.submit_profiled().unwrap();
    metrics.extend(gpu.collect().unwrap());
    metrics.extend(gpu.run(1, 1).unwrap());
    common::assert_same_run(&name, &cpu, &cpu_metrics, &mut gpu, &metrics);
}

/// Calibration times both variants of each conv layer's three kernels (the
/// first layer has no input gradient; a pool has none of its own) beside
/// the dense layers' matmuls, runs the faster of each (ties keep the
/// direct kernels), and caches them: a later engine of the shape starts on
/// the measured choice.
#[test]
fn calibration_picks_a_convolution_variant_per_kernel_and_caches_it() {
    use stepscope_core::gpu::matmul::{Matmul, MatmulVariant};
    let (name, e) = conformance::conv_training_matrix().swap_remove(0);
    let mut gpu = gpu_engine(&e);
    let calibration = pollster::block_on(gpu.calibrate()).unwrap();
    let layers = &gpu.layout().layers;
    let convs: Vec<usize> = (0..layers.len()).filter(|&l| matches!(layers[l].op, LayerOp::Conv(_))).collect();
    let dense = layers.iter().filter(|l| l.op == LayerOp::Dense).count();
    let first_is_conv = convs.first() == Some(&0);
    let expected = 3 * (convs.len() + dense) - 1;
    assert!(first_is_conv, "{name}: the matrix's first net starts with a conv layer");
    assert_eq!(calibration.matmuls.len(), expected, "{name}: {:?}", calibration.matmuls);
    for t in &calibration.matmuls {
        assert_eq!(t.conv, convs.contains(&t.layer), "{t:?}");
        assert!(t.seconds.iter().all(|&s| s > 0.0), "{t:?}");
        assert_eq!(gpu.matmuls()[t.layer].get(t.matmul), t.chosen, "{t:?}");
        assert!(!(t.layer == 0 && t.matmul == Matmul::BackwardInput));
        let faster = if t.seconds[0] < t.seconds[1] { MatmulVariant::Tiled } else { MatmulVariant::Blocked };
        assert!(t.chosen == faster || (t.seconds[1] - t.seconds[0]).abs() <= 0.05 * t.seconds[1], "{t:?}");
    }
    let later = gpu_engine(&e);
    assert_eq!(later.matmuls(), gpu.matmuls(), "{name}: a later engine of this shape starts on the measured choice");
    assert_eq!(gpu.step_count(), 0);
}
