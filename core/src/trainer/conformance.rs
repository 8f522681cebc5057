//! The whole-run checks of the GPU engine against the CPU reference,
//! written once through `Trainer` and run by both test suites: natively on
//! lavapipe (`core/tests/gpu_training.rs`, blocking on them) and in the
//! browser on WebGPU (`tests/tests/gpu_engine.rs`, awaiting them). Each
//! returns what differed, by name, or Ok.
//!
//! Tolerances: GPU and CPU differ only in summation order inside matmuls
//! and reductions (about I·2⁻²⁴ relative per sum) and in exp/tanh
//! implementations. Over a dozen steps training amplifies these a little
//! (most through Adam's division by √v). Largest deviations seen on
//! lavapipe: 2.9e-7 relative in the loss, 4.8e-7 in the gradient norm,
//! 2.1e-7 in a parameter (relative to 1 + |p|). We require 1e-5 (20×
//! margin); a real bug (a wrong derivative, a dropped term) moves the loss
//! by 1e-3 or more at the first step.

use std::sync::Arc;

use super::{Applied, Trainer};
use crate::data::Dataset;
use crate::engine::{StepMetrics, TrainState};
use crate::experiment::{Experiment, OptimizerSpec};
use crate::gpu::gpt::AttentionVariant;
use crate::gpu::matmul::{LayerMatmuls, MatmulVariant};
use crate::gpu::{FusedWidth, GpuContext};

mod matrices;

pub use matrices::{conv_training_matrix, experiment, gpt_training_matrix, training_matrix};

/// Relative tolerance of loss, gradient norm and parameters (see above).
pub const TOLERANCE: f32 = 1e-5;

pub type Check = std::result::Result<(), String>;

/// Metrics of two runs of the same experiment agree step by step: the
/// same steps, schedule values and clipping decisions; loss and gradient
/// norm within `TOLERANCE`.
pub fn close_runs(name: &str, cpu: &[StepMetrics], gpu: &[StepMetrics]) -> Check {
    if cpu.len() != gpu.len() {
        return Err(format!("{name}: {} steps against {}", cpu.len(), gpu.len()));
    }
    for (c, g) in cpu.iter().zip(gpu) {
        let at = format!("{name} step {}", c.step);
        if c.step != g.step || c.lr != g.lr || c.clipped != g.clipped {
            return Err(format!(
                "{at}: step, lr, clipped {:?} against {:?}",
                (c.lr, c.clipped),
                (g.step, g.lr, g.clipped)
            ));
        }
        if (c.loss - g.loss).abs() > TOLERANCE * c.loss.abs() + 1e-7 {
            return Err(format!("{at}: loss {} against {}", c.loss, g.loss));
        }
        if (c.grad_norm - g.grad_norm).abs() > TOLERANCE * c.grad_norm + 1e-7 {
            return Err(format!("{at}: grad_norm {} against {}", c.grad_norm, g.grad_norm));
        }
    }
    Ok(())
}

/// Values within `TOLERANCE` of 1 + |value|.
pub fn close_values(name: &str, cpu: &[f32], gpu: &[f32]) -> Check {
    if cpu.len() != gpu.len() {
        return Err(format!("{name}: {} values against {}", cpu.len(), gpu.len()));
    }
    match cpu.iter().zip(gpu).position(|(c, g)| (c - g).abs() > TOLERANCE * (1.0 + c.abs())) {
        Some(i) => Err(format!("{name}: value {i} is {} against {}", cpu[i], gpu[i])),
        None => Ok(()),
    }
}

/// Two states of one run agree: parameters and optimizer moments within
/// `TOLERANCE`, the same step and data position.
pub fn close_states(name: &str, a: &TrainState, b: &TrainState) -> Check {
    close_values(&format!("{name} params"), &a.params, &b.params)?;
    close_values(&format!("{name} exp_avg"), &a.optimizer.exp_avg, &b.optimizer.exp_avg)?;
    close_values(&format!("{name} exp_avg_sq"), &a.optimizer.exp_avg_sq, &b.optimizer.exp_avg_sq)?;
    close_values(&format!("{name} momentum"), &a.optimizer.momentum_buffer, &b.optimizer.momentum_buffer)?;
    if a.step() != b.step() || a.data_position != b.data_position {
        return Err(format!("{name}: step or data position differ ({} against {})", a.step(), b.step()));
    }
    Ok(())
}

fn failed(name: &str) -> impl Fn(crate::Error) -> String + '_ {
    move |err| format!("{name}: {err}")
}

/// Trains `e` on both engines, the GPU in submits of the sizes `submits`
/// (on the fused step when `fused`, which must then apply), and compares
/// every step's metrics and the end state.
pub async fn whole_run(name: &str, e: &Experiment, gpu: Arc<GpuContext>, submits: &[usize], fused: bool) -> Check {
    whole_run_on(name, e, gpu, submits, Setup { width: fused.then_some(FusedWidth::Wide), ..Setup::default() }).await
}

/// `whole_run` on the fused step of `width` (its workgroup of 64
/// invocations or of 4).
pub async fn whole_run_fused_at(
    name: &str,
    e: &Experiment,
    gpu: Arc<GpuContext>,
    submits: &[usize],
    width: FusedWidth,
) -> Check {
    whole_run_on(name, e, gpu, submits, Setup { width: Some(width), ..Setup::default() }).await
}

/// `whole_run` on the phased path with every matmul on `variant`
/// (`gpu::matmul`), rather than the variants the engine starts on.
pub async fn whole_run_on_matmuls(
    name: &str,
    e: &Experiment,
    gpu: Arc<GpuContext>,
    submits: &[usize],
    variant: MatmulVariant,
) -> Check {
    whole_run_on(name, e, gpu, submits, Setup { matmuls: Some(variant), ..Setup::default() }).await
}

/// `whole_run` of a transformer with its attention on `variant`
/// (`gpu::gpt::AttentionVariant`) rather than the one the engine starts on.
pub async fn whole_run_on_attention(
    name: &str,
    e: &Experiment,
    gpu: Arc<GpuContext>,
    submits: &[usize],
    variant: AttentionVariant,
) -> Check {
    whole_run_on(name, e, gpu, submits, Setup { attention: Some(variant), ..Setup::default() }).await
}

/// How `whole_run_on` sets the GPU engine up; `None` leaves what the engine
/// starts on.
#[derive(Default)]
struct Setup {
    /// The fused step of this width (which must then apply).
    width: Option<FusedWidth>,
    /// Every matmul on this variant.
    matmuls: Option<MatmulVariant>,
    /// A transformer's attention on this variant.
    attention: Option<AttentionVariant>,
}

async fn whole_run_on(name: &str, e: &Experiment, gpu: Arc<GpuContext>, submits: &[usize], setup: Setup) -> Check {
    let Setup { width, matmuls, attention } = setup;
    let err = failed(name);
    let data = Dataset::load(e, None).map_err(&err)?;
    let mut cpu = Trainer::fresh(e, data.clone(), None).map_err(&err)?;
    let mut on_gpu = Trainer::fresh(e, data, Some(gpu)).map_err(&err)?;
    let fused = width.is_some();
    on_gpu.allow_fused(fused);
    if let Some(engine) = on_gpu.gpu_engine() {
        engine.use_fused = fused;
        if let Some(w) = width {
            if !engine.set_fused_width(w) {
                return Err(format!("{name}: the adapter runs no fused step of {} invocations", w.invocations()));
            }
        }
        if let Some(v) = matmuls {
            let layers = engine.matmuls().len();
            engine.set_matmuls(vec![LayerMatmuls::all(v); layers]).map_err(&err)?;
        }
        if let Some(v) = attention {
            engine.set_attention(v).map_err(&err)?;
            if engine.attention() != Some(v) {
                return Err(format!("{name}: not a transformer"));
            }
        }
    } else if attention.is_some() || matmuls.is_some() {
        return Err(format!("{name}: not on the GPU engine"));
    }
    if on_gpu.runs_fused() != fused {
        return Err(format!("{name}: the fused step does not apply"));
    }
    let (mut cpu_metrics, mut gpu_metrics) = (Vec::new(), Vec::new());
    for &k in submits {
        cpu.submit(k).map_err(&err)?;
        cpu_metrics.extend(cpu.collect().await.map_err(&err)?);
        on_gpu.submit(k).map_err(&err)?;
        gpu_metrics.extend(on_gpu.collect().await.map_err(&err)?);
    }
    let steps: usize = submits.iter().sum();
    if gpu_metrics.len() != steps {
        return Err(format!("{name}: {} metrics records for {steps} steps", gpu_metrics.len()));
    }
    if !cpu_metrics.iter().all(|m| m.loss.is_finite() && m.grad_norm > 0.0) {
        return Err(format!("{name}: not a real run (a zero gradient or a non-finite loss)"));
    }
    close_runs(name, &cpu_metrics, &gpu_metrics)?;
    let (a, b) = (cpu.read_state().await.map_err(&err)?, on_gpu.read_state().await.map_err(&err)?);
    close_states(name, &a, &b)
}

/// A run that moves from the CPU to the GPU and back part-way equals one
/// that stays on the CPU, within the twin tolerances: switching engines
/// changes speed and nothing else.
pub async fn switching_engines_mid_run(name: &str, e: &Experiment, gpu: Arc<GpuContext>) -> Check {
    let err = failed(name);
    let data = Dataset::load(e, None).map_err(&err)?;
    let mut stays = Trainer::fresh(e, data.clone(), None).map_err(&err)?;
    let mut moves = Trainer::fresh(e, data, None).map_err(&err)?;
    let reference = stays.run(15, 5).await.map_err(&err)?;
    let mut moved = moves.run(5, 5).await.map_err(&err)?;
    moves.move_to(Some(gpu)).await.map_err(&err)?;
    moved.extend(moves.run(5, 5).await.map_err(&err)?);
    moves.move_to(None).await.map_err(&err)?;
    moved.extend(moves.run(5, 5).await.map_err(&err)?);
    close_runs(name, &reference, &moved)?;
    let (a, b) = (stays.read_state().await.map_err(&err)?, moves.read_state().await.map_err(&err)?);
    close_states(name, &a, &b)
}

/// Live edits of the hyperparameters (learning rate, betas or momentum,
/// weight decay, clipping, regularization, schedule) are taken in place
/// on the engine of `gpu` (or the CPU; on the GPU's fused step when
/// `fused` and it applies), and the run goes on exactly as one rebuilt from
/// its state with the edited experiment: the same bits.
pub async fn live_edits_in_place(name: &str, e: &Experiment, gpu: Option<Arc<GpuContext>>, fused: bool) -> Check {
    let err = failed(name);
    let data = Dataset::load(e, None).map_err(&err)?;
    let mut live = Trainer::fresh(e, data.clone(), gpu.clone()).map_err(&err)?;
    if let Some(engine) = live.gpu_engine() {
        engine.use_fused = fused;
    }
    live.run(4, 2).await.map_err(&err)?;
    let mut edited = e.clone();
    edited.clip_grad_norm = Some(0.25);
    edited.regularization =
        Some(crate::experiment::Regularization { kind: crate::experiment::RegularizationKind::L2, rate: 0.003 });
    edited.schedule = crate::experiment::Schedule::WarmupCosine { warmup_steps: 2, total_steps: 20, min_lr: 0.001 };
    edited.optimizer = match edited.optimizer {
        OptimizerSpec::Sgd { lr, momentum, dampening, nesterov, .. } => OptimizerSpec::Sgd {
            lr: lr * 0.5,
            momentum: if momentum == 0.0 { 0.0 } else { momentum * 0.5 },
            dampening,
            nesterov,
            weight_decay: 0.002,
        },
        OptimizerSpec::Adam { lr, eps, .. } => {
            OptimizerSpec::Adam { lr: lr * 0.5, betas: [0.8, 0.99], eps, weight_decay: 0.002 }
        }
        OptimizerSpec::Adamw { lr, eps, .. } => {
            OptimizerSpec::Adamw { lr: lr * 0.5, betas: [0.8, 0.99], eps, weight_decay: 0.002 }
        }
        OptimizerSpec::Lamb { lr, eps, .. } => {
            OptimizerSpec::Lamb { lr: lr * 0.5, betas: [0.8, 0.99], eps, weight_decay: 0.002 }
        }
    };
    let mut state = live.read_state().await.map_err(&err)?;
    match live.apply(&edited).await.map_err(&err)? {
        Applied::InPlace => {}
        Applied::Rebuilt => return Err(format!("{name}: a hyperparameter edit rebuilt the run")),
    }
    state.experiment = edited.clone();
    let mut rebuilt = Trainer::new(state, data, gpu).map_err(&err)?;
    if let (Some(a), Some(b)) = (live.gpu_engine().map(|e| e.runs_fused()), rebuilt.gpu_engine()) {
        b.use_fused = a;
    }
    let a = live.run(6, 3).await.map_err(&err)?;
    let b = rebuilt.run(6, 3).await.map_err(&err)?;
    let bits =
        |m: &[StepMetrics]| m.iter().map(|m| (m.step, m.loss.to_bits(), m.grad_norm.to_bits())).collect::<Vec<_>>();
    if let Some((x, y)) = bits(&a).into_iter().zip(bits(&b)).find(|(x, y)| x != y) {
        return Err(format!(
            "{name}: the edited run differs from the rebuilt one at step {}: {x:?} against {y:?}",
            x.0
        ));
    }
    if a.iter().any(|m| m.lr != crate::optim::learning_rate(&edited.schedule, edited.optimizer.lr(), m.step)) {
        return Err(format!("{name}: the edit's schedule is not the one used"));
    }
    let (x, y) = (live.read_state().await.map_err(&err)?, rebuilt.read_state().await.map_err(&err)?);
    if x != y {
        return Err(format!("{name}: the edited run's state differs from the rebuilt one's"));
    }
    Ok(())
}
