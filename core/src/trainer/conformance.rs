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

use serde_json::json;

use super::{Applied, Trainer};
use crate::data::Dataset;
use crate::engine::{StepMetrics, TrainState};
use crate::experiment::{Experiment, OptimizerSpec};
use crate::gpu::gpt::AttentionVariant;
use crate::gpu::matmul::{LayerMatmuls, MatmulVariant};
use crate::gpu::{FusedWidth, GpuContext};

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

/// A small experiment; `patch` is merged over the defaults (JSON object;
/// an "optimizer" or "schedule" replaces the default whole).
pub fn experiment(patch: serde_json::Value) -> Experiment {
    let mut base = json!({
        "seed": 7,
        "model": {"inputs": 2, "layers": [
            {"units": 8, "activation": "tanh"},
            {"units": 1, "activation": "linear"}]},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "adamw", "lr": 0.01},
        "batch_size": 16,
        "data": {"source": "spiral", "samples": 200, "noise": 0.1, "train_fraction": 0.8}
    });
    merge(&mut base, patch);
    Experiment::from_json(&base.to_string()).expect("a conformance experiment is valid")
}

fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_object()
                    && b.get(k.as_str()).is_some_and(|x| x.is_object())
                    && k != "optimizer"
                    && k != "schedule"
                {
                    if let Some(slot) = b.get_mut(k.as_str()) {
                        merge(slot, v);
                    }
                } else {
                    b.insert(k, v);
                }
            }
        }
        (b, p) => *b = p,
    }
}

/// Every optimizer, loss and schedule, with clipping, accumulation,
/// regularization and the activations in rotation: the whole-run cases
/// every GPU path is compared with the CPU engine on.
pub fn training_matrix() -> Vec<(String, Experiment)> {
    let mut cases = Vec::new();
    let optimizers = [
        json!({"kind": "sgd", "lr": 0.1}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 0.001}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.8, "dampening": 0.1}),
        json!({"kind": "adam", "lr": 0.01, "weight_decay": 0.01}),
        json!({"kind": "adamw", "lr": 0.01}),
        json!({"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}),
    ];
    let losses = [("bce_with_logits", 1, "spiral"), ("cross_entropy", 2, "xor"), ("mse", 1, "reg_gauss")];
    let schedules = [
        json!({"kind": "constant"}),
        json!({"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 12, "min_lr": 0.001}),
        json!({"kind": "warmup_linear", "warmup_steps": 2, "total_steps": 10}),
    ];
    let mut case = 0;
    for optimizer in &optimizers {
        for (loss, outputs, source) in losses {
            case += 1;
            let schedule = &schedules[case % schedules.len()];
            let clip = if case % 2 == 0 { json!(0.5) } else { json!(null) };
            let accumulation = 1 + case % 3;
            let reg = if case % 4 == 1 { json!({"kind": "l2", "rate": 0.001}) } else { json!(null) };
            let activation = ["tanh", "relu", "gelu_tanh", "silu", "leaky_relu", "sigmoid"][case % 6];
            let e = experiment(json!({
                "model": {"inputs": 3, "layers": [
                    {"units": 9, "activation": activation},
                    {"units": 7, "activation": "tanh"},
                    {"units": outputs, "activation": "linear"}]},
                "loss": loss, "optimizer": optimizer, "schedule": schedule,
                "batch_size": 13, "grad_accumulation": accumulation, "clip_grad_norm": clip,
                "regularization": reg,
                "data": {"source": source, "samples": 90, "noise": 0.1, "train_fraction": 0.8,
                         "features": ["x1", "x2", "sin_x1"]}
            }));
            let name = format!("{optimizer} {loss} {schedule} clip={clip} k={accumulation}");
            cases.push((name, e));
        }
    }
    cases
}

/// Transformer runs for the whole-run checks: a small character-level GPT
/// on Tiny Shakespeare (awkward sizes: a head of 6, a window of 9) under
/// each optimizer, with and without clipping, micro-batches, z-loss, q/k
/// LayerNorm and the untied head.
pub fn gpt_training_matrix() -> Vec<(String, Experiment)> {
    let base = |patch: serde_json::Value| {
        let mut e = json!({
            "seed": 11,
            "model": {"kind": "gpt", "vocab_size": 65, "context": 9, "embed": 12, "heads": 2, "blocks": 2},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1},
            "batch_size": 3,
            "data": {"source": "shakespeare", "train_fraction": 0.9}
        });
        merge(&mut e, patch);
        Experiment::from_json(&e.to_string()).expect("a conformance transformer is valid")
    };
    let cases = [
        ("adamw, clipped", json!({"clip_grad_norm": 0.5})),
        (
            "adam with decay, k=2, z-loss",
            json!({"optimizer": {"kind": "adam", "lr": 0.005, "weight_decay": 0.01},
            "grad_accumulation": 2, "z_loss": 1e-3}),
        ),
        (
            "sgd nesterov with decay, untied head",
            json!({"optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9,
            "nesterov": true, "weight_decay": 0.001}, "model": {"tie_embeddings": false}}),
        ),
        // SGD: the k LayerNorm's bias has a gradient of exactly 0 in exact
        // arithmetic (softmax does not see a shift common to every key), so
        // each engine's is rounding noise, and Adam would scale those
        // different noises into steps of ±lr (the losses still agree).
        (
            "sgd momentum, q/k LayerNorm, k=2",
            json!({"optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}, "model": {"qk_layernorm": true},
                   "grad_accumulation": 2}),
        ),
        (
            "lamb with decay, warmup cosine, one block of 4 heads",
            json!({"optimizer": {"kind": "lamb", "lr": 0.01, "weight_decay": 0.01},
            "model": {"blocks": 1, "heads": 4}, "schedule": {"kind": "warmup_cosine", "warmup_steps": 2,
            "total_steps": 10, "min_lr": 0.001}, "clip_grad_norm": 1.0}),
        ),
    ];
    cases.into_iter().map(|(name, patch)| (format!("gpt {name}"), base(patch))).collect()
}

/// Conv nets on the 8 × 8 digits, every conv and pool kernel and every
/// optimizer among them: convolutions with and without padding, strides 1
/// and 2, max and average pooling with windows that tile and that overlap,
/// each activation, clipping, accumulation, regularization, schedules.
pub fn conv_training_matrix() -> Vec<(String, Experiment)> {
    let base = |layers: serde_json::Value, patch: serde_json::Value| {
        let mut e = json!({
            "seed": 5,
            "model": {"input_shape": [1, 8, 8], "layers": layers},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adam", "lr": 0.01},
            "batch_size": 16,
            "data": {"source": "digits"}
        });
        merge(&mut e, patch);
        Experiment::from_json(&e.to_string()).expect("a conformance conv net is valid")
    };
    let dense = json!({"units": 10, "activation": "linear"});
    // conv 3×3×4 pad 1 → max pool 2 → conv 3×3×6 → avg pool 2 stride 1 → dense.
    let pooled = json!([
        {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
        {"kind": "max_pool2d", "kernel": 2},
        {"kind": "conv2d", "filters": 6, "kernel": 3, "activation": "tanh"},
        {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
        dense.clone()]);
    // A pool first (no input gradient below it), a strided conv, overlapping windows.
    let strided = json!([
        {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
        {"kind": "conv2d", "filters": 5, "kernel": 3, "stride": 2, "padding": 1, "activation": "gelu_tanh"},
        {"kind": "max_pool2d", "kernel": 3, "stride": 1},
        {"units": 12, "activation": "sigmoid"},
        dense.clone()]);
    let cases = [
        ("adam", pooled.clone(), json!({})),
        (
            "sgd nesterov with decay, clipped, k=2, l2, warmup cosine",
            pooled.clone(),
            json!({"optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true,
                "weight_decay": 0.001}, "clip_grad_norm": 0.5, "grad_accumulation": 2,
                "regularization": {"kind": "l2", "rate": 0.001},
                "schedule": {"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 12, "min_lr": 0.001}}),
        ),
        (
            "adamw, l1, pool first, strided",
            strided.clone(),
            json!({"optimizer": {"kind": "adamw", "lr": 0.01}, "regularization": {"kind": "l1", "rate": 0.0005}}),
        ),
        (
            "lamb, k=3, warmup linear, strided",
            strided,
            json!({"optimizer": {"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}, "grad_accumulation": 3,
                "schedule": {"kind": "warmup_linear", "warmup_steps": 2, "total_steps": 10}, "batch_size": 7}),
        ),
    ];
    cases.into_iter().map(|(name, layers, patch)| (format!("conv {name}"), base(layers, patch))).collect()
}
