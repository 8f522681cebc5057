//! One trainer over both engines: the only thing the page, the CLI and the
//! benchmark drive. It sits above the CPU reference engine and the GPU
//! engine (neither imports it, and nothing below it imports `gpu/`), and it
//! is async so that the same code runs natively and on the web: the page
//! awaits it without blocking, native callers block on it (`block_on`).
//!
//! A run goes `submit(K)` then `collect()`: on the GPU one submit of K
//! steps and its readback; on the CPU the K steps run in `collect`. The
//! state, the views' tensors, per-layer statistics and evaluations are read
//! the same way whichever engine runs. `apply` takes a live edit in place
//! where the engine can (`Experiment::retunable_to`) and rebuilds the run
//! from its state otherwise.

pub mod conformance;

use std::sync::Arc;

use crate::data::{Dataset, Table};
use crate::engine::{evaluate, CpuEngine, Evaluation, MemoryBytes, PhaseReport, StepMetrics, TrainState};
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::gpu::{Calibration, GpuContext, GpuEngine, PendingState, SubmitCost, MAX_STEPS_PER_SUBMIT};
use crate::model::Layout;
use crate::stats::{tensor_stats, TensorStats};

/// Which engine a trainer runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Cpu,
    Gpu,
}

enum Inner {
    Cpu(Box<CpuEngine>),
    Gpu(Box<GpuEngine>),
}

/// How `Trainer::apply` took an edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// In place: nothing read back, no buffer rebuilt.
    InPlace,
    /// The run was read back and rebuilt from its state (a change of shape
    /// or of optimizer).
    Rebuilt,
}

pub struct Trainer {
    inner: Inner,
    /// CPU: steps submitted and not run yet (they run in `collect`).
    queued: usize,
    /// Lesson switches, kept across rebuilds.
    zero_grad: bool,
    activation_checkpointing: bool,
    /// Whether the GPU may run the fused step (`calibrate` picks it where
    /// it is faster).
    fused_allowed: bool,
}

/// A state read begun by `Trainer::begin_read_state`: ready (CPU) or the
/// GPU's copies in flight.
pub enum StateRead {
    Ready(Box<TrainState>),
    Gpu(Box<PendingState>),
}

impl StateRead {
    pub fn step(&self) -> u64 {
        match self {
            StateRead::Ready(s) => s.step(),
            StateRead::Gpu(p) => p.step(),
        }
    }

    pub async fn finish(self) -> Result<TrainState> {
        match self {
            StateRead::Ready(s) => Ok(*s),
            StateRead::Gpu(p) => (*p).finish().await,
        }
    }
}

fn build(state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Inner> {
    Ok(match gpu {
        None => Inner::Cpu(Box::new(CpuEngine::from_state(state, data)?)),
        Some(ctx) => Inner::Gpu(Box::new(GpuEngine::from_state(ctx, state, data)?)),
    })
}

impl Trainer {
    /// Continues `state` on the CPU, or on the GPU of `gpu`.
    pub fn new(state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Trainer> {
        Ok(Trainer {
            inner: build(state, data, gpu)?,
            queued: 0,
            zero_grad: true,
            activation_checkpointing: false,
            fused_allowed: true,
        })
    }

    /// A fresh run of `e` on `data` (`TrainState::fresh`).
    pub fn fresh(e: &Experiment, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Trainer> {
        Trainer::new(TrainState::fresh(e), data, gpu)
    }

    pub fn backend(&self) -> Backend {
        match &self.inner {
            Inner::Cpu(_) => Backend::Cpu,
            Inner::Gpu(_) => Backend::Gpu,
        }
    }

    pub fn experiment(&self) -> &Experiment {
        match &self.inner {
            Inner::Cpu(e) => e.experiment(),
            Inner::Gpu(e) => e.experiment(),
        }
    }

    pub fn layout(&self) -> &Layout {
        match &self.inner {
            Inner::Cpu(e) => e.layout(),
            Inner::Gpu(e) => e.layout(),
        }
    }

    pub fn data(&self) -> &Dataset {
        match &self.inner {
            Inner::Cpu(e) => e.data(),
            Inner::Gpu(e) => e.data(),
        }
    }

    /// Optimizer steps applied (collected).
    pub fn step_count(&self) -> u64 {
        match &self.inner {
            Inner::Cpu(e) => e.step_count(),
            Inner::Gpu(e) => e.step_count(),
        }
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        match &self.inner {
            Inner::Cpu(e) => e.memory(),
            Inner::Gpu(e) => e.memory(),
        }
    }

    /// The GPU device the run is on; None on the CPU engine.
    pub fn gpu_context(&self) -> Option<&Arc<GpuContext>> {
        match &self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => Some(e.context()),
        }
    }

    /// The GPU engine, for what only it has (test hooks, the benchmark's
    /// dispatch counts); None on the CPU.
    pub fn gpu_engine(&mut self) -> Option<&mut GpuEngine> {
        match &mut self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => Some(e),
        }
    }

    /// Whether the GPU runs the fused step now.
    pub fn runs_fused(&self) -> bool {
        matches!(&self.inner, Inner::Gpu(e) if e.runs_fused())
    }

    /// Most steps one submit takes.
    pub fn max_steps_per_submit(&self) -> usize {
        match &self.inner {
            Inner::Cpu(_) => MAX_STEPS_PER_SUBMIT,
            Inner::Gpu(e) => e.max_steps_per_submit(),
        }
    }

    /// What a GPU submit costs on its calibrated path (`calibrate`).
    pub fn submit_cost(&self) -> Option<SubmitCost> {
        match &self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => e.submit_cost,
        }
    }

    /// Lesson: when false, gradients are not zeroed between steps.
    pub fn set_zero_grad(&mut self, on: bool) {
        self.zero_grad = on;
        match &mut self.inner {
            Inner::Cpu(e) => e.zero_grad = on,
            Inner::Gpu(e) => e.zero_grad = on,
        }
    }

    pub fn zero_grad(&self) -> bool {
        self.zero_grad
    }

    /// Recompute activations in backward instead of storing them.
    pub fn set_activation_checkpointing(&mut self, on: bool) -> Result<()> {
        match &mut self.inner {
            Inner::Cpu(e) => e.set_activation_checkpointing(on)?,
            Inner::Gpu(e) => e.set_activation_checkpointing(on)?,
        }
        self.activation_checkpointing = on;
        Ok(())
    }

    pub fn activation_checkpointing(&self) -> bool {
        self.activation_checkpointing
    }

    /// Whether the GPU may run the fused step; false keeps the phased
    /// kernels (their per-phase timestamps).
    pub fn allow_fused(&mut self, allowed: bool) {
        self.fused_allowed = allowed;
        if let Inner::Gpu(e) = &mut self.inner {
            e.use_fused &= allowed;
        }
    }

    /// GPU: measures (or takes the cached figures for this adapter and
    /// shape) the phased and the fused path and runs the faster; None on
    /// the CPU.
    pub async fn calibrate(&mut self) -> Result<Option<Calibration>> {
        let allowed = self.fused_allowed;
        let Inner::Gpu(e) = &mut self.inner else { return Ok(None) };
        let calibration = e.calibrate().await?;
        if !allowed {
            e.use_fused = false;
            e.submit_cost = Some(calibration.phased);
        }
        Ok(Some(calibration))
    }

    /// Starts `k` more optimizer steps (clamped to 1…`max_steps_per_submit`).
    pub fn submit(&mut self, k: usize) -> Result<()> {
        let k = k.clamp(1, self.max_steps_per_submit());
        match &mut self.inner {
            Inner::Cpu(_) => self.queued += k,
            Inner::Gpu(e) => e.submit(k)?,
        }
        Ok(())
    }

    /// The metrics of every step submitted and not yet collected. A
    /// non-finite value stops the run at the last good step: the error
    /// names the layer and phase, and later submitted steps are dropped.
    pub async fn collect(&mut self) -> Result<Vec<StepMetrics>> {
        match &mut self.inner {
            Inner::Cpu(e) => {
                let k = std::mem::take(&mut self.queued);
                let mut out = Vec::with_capacity(k);
                for _ in 0..k {
                    out.push(e.step()?);
                }
                Ok(out)
            }
            Inner::Gpu(e) => {
                let mut out = Vec::new();
                while e.has_in_flight() {
                    out.extend(e.collect_any().await?);
                }
                Ok(out)
            }
        }
    }

    /// `steps` steps in submits of at most `per_submit`, each collected.
    pub async fn run(&mut self, steps: usize, per_submit: usize) -> Result<Vec<StepMetrics>> {
        let mut out = Vec::with_capacity(steps);
        let mut left = steps;
        while left > 0 {
            let k = left.min(per_submit.max(1)).min(self.max_steps_per_submit());
            self.submit(k)?;
            out.extend(self.collect().await?);
            left -= k;
        }
        Ok(out)
    }

    /// Whether a step begun phase by phase is unfinished.
    pub fn mid_step(&self) -> bool {
        match &self.inner {
            Inner::Cpu(e) => e.mid_step(),
            Inner::Gpu(e) => e.mid_step(),
        }
    }

    /// CPU: the next phase of the current step, without its statistics
    /// (`CpuEngine::step_part`); the metrics when it finished the step.
    /// The GPU takes whole steps (`submit`).
    pub fn step_part(&mut self) -> Result<Option<StepMetrics>> {
        if self.queued > 0 {
            return Err(Error::Experiment("collect the submitted steps before stepping in parts".into()));
        }
        match &mut self.inner {
            Inner::Cpu(e) => e.step_part(),
            Inner::Gpu(_) => Err(Error::Gpu("the GPU engine takes whole steps (submit)".into())),
        }
    }

    /// The next phase of the current step (step-by-phase mode).
    pub async fn step_phase(&mut self) -> Result<PhaseReport> {
        match &mut self.inner {
            Inner::Cpu(e) => e.step_phase(),
            Inner::Gpu(e) => e.step_phase().await,
        }
    }

    /// Finishes a step begun phase by phase, so that state reads and whole
    /// steps start at a step boundary.
    pub async fn finish_partial_step(&mut self) -> Result<Option<StepMetrics>> {
        match &mut self.inner {
            Inner::Cpu(e) if e.mid_step() => e.step().map(Some),
            Inner::Cpu(_) => Ok(None),
            Inner::Gpu(e) => e.finish_step().await,
        }
    }

    fn at_boundary(&self, what: &str) -> Result<()> {
        let in_flight = self.queued > 0 || matches!(&self.inner, Inner::Gpu(e) if e.has_in_flight());
        if in_flight || self.mid_step() {
            return Err(Error::Experiment(format!("collect the submitted steps and finish the step before {what}")));
        }
        Ok(())
    }

    /// The run's state (what a checkpoint holds), read back from the GPU
    /// when on it. At a step boundary, with nothing in flight.
    pub async fn read_state(&mut self) -> Result<TrainState> {
        self.at_boundary("reading the state")?;
        match &mut self.inner {
            Inner::Cpu(e) => Ok(e.state()),
            Inner::Gpu(e) => e.read_state().await,
        }
    }

    /// Starts reading the state without waiting for it (background
    /// checkpoints): training may go on before `StateRead::finish`.
    pub fn begin_read_state(&mut self) -> Result<StateRead> {
        self.at_boundary("reading the state")?;
        Ok(match &mut self.inner {
            Inner::Cpu(e) => StateRead::Ready(Box::new(e.state())),
            Inner::Gpu(e) => StateRead::Gpu(Box::new(e.begin_read_state()?)),
        })
    }

    /// Parameters, gradients and the last updates (each (P)), for views.
    pub async fn tensors(&mut self) -> Result<[Vec<f32>; 3]> {
        match &mut self.inner {
            Inner::Cpu(e) => Ok([e.params().to_vec(), e.grads().to_vec(), e.updates().to_vec()]),
            Inner::Gpu(e) => e.read_tensors().await,
        }
    }

    /// Per layer: statistics of [activations, gradients, weights, updates]
    /// of the last step (the GPU's `tensor_stats` kernel, or its CPU twin).
    pub async fn layer_stats(&mut self) -> Result<Vec<[TensorStats; 4]>> {
        match &mut self.inner {
            Inner::Gpu(e) => e.read_layer_stats().await,
            Inner::Cpu(e) => Ok(e
                .layout()
                .layers
                .iter()
                .enumerate()
                .map(|(l, shape)| {
                    let range = shape.weight_offset..shape.bias_offset + shape.units;
                    [
                        tensor_stats(&e.activations().a[l]),
                        tensor_stats(&e.grads()[range.clone()]),
                        tensor_stats(&e.params()[range.clone()]),
                        tensor_stats(&e.updates()[range]),
                    ]
                })
                .collect()),
        }
    }

    /// Loss and accuracy over `table` with the current parameters, by the
    /// CPU reference forward pass (in chunks; see `engine::evaluate`).
    pub async fn evaluate(&mut self, table: &Table) -> Result<Option<Evaluation>> {
        match &mut self.inner {
            Inner::Cpu(e) => Ok(e.evaluate(table)),
            Inner::Gpu(e) => {
                let [params, _, _] = e.read_tensors().await?;
                Ok(evaluate(&params, e.layout(), e.experiment(), table))
            }
        }
    }

    /// Takes an edit of the experiment at a step boundary. What can change
    /// in place does (`Experiment::retunable_to`: learning rate, schedule,
    /// optimizer hyperparameters, clipping, regularization), with no
    /// readback and no buffer rebuilt; anything else rebuilds the run from
    /// its state on the same engine, the optimizer state carried over where
    /// it still fits (`OptimizerState::carried_to`). The data stays: a new
    /// dataset is a new run. On error the run is as it was.
    pub async fn apply(&mut self, to: &Experiment) -> Result<Applied> {
        crate::validate::experiment(to)?;
        self.at_boundary("editing the run")?;
        if to.data != self.experiment().data || to.seed != self.experiment().seed {
            return Err(Error::Experiment("a change of data or seed starts a new run".into()));
        }
        if self.experiment().retunable_to(to) {
            match &mut self.inner {
                Inner::Cpu(e) => e.retune(to)?,
                Inner::Gpu(e) => e.retune(to)?,
            }
            return Ok(Applied::InPlace);
        }
        let mut state = self.read_state().await?;
        let optimizer = std::mem::take(&mut state.optimizer);
        state.optimizer = optimizer.carried_to(&state.experiment.optimizer, &to.optimizer, state.params.len());
        state.experiment = to.clone();
        let data = self.data().clone();
        self.replace(state, data)?;
        Ok(Applied::Rebuilt)
    }

    /// Replaces the run with `state` on `data` (a restore, a rollback), on
    /// the same engine, keeping the lesson switches. Everything is built
    /// before the current run is dropped: on error it stays.
    pub fn replace(&mut self, state: TrainState, data: Dataset) -> Result<()> {
        let gpu = self.gpu_context().cloned();
        self.rebuild(state, data, gpu)
    }

    /// Continues the run on the GPU of `gpu`, or on the CPU (None): the
    /// state moves across, so the run goes on exactly where it was.
    pub async fn move_to(&mut self, gpu: Option<Arc<GpuContext>>) -> Result<()> {
        self.finish_partial_step().await?;
        let state = self.read_state().await?;
        let data = self.data().clone();
        self.rebuild(state, data, gpu)
    }

    /// Replaces the run with `state` on the given engine (after a GPU
    /// error, when the GPU's own state cannot be trusted).
    pub fn rebuild(&mut self, state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<()> {
        let mut inner = build(state, data, gpu)?;
        match &mut inner {
            Inner::Cpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(self.activation_checkpointing)?;
            }
            Inner::Gpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(self.activation_checkpointing)?;
            }
        }
        self.inner = inner;
        self.queued = 0;
        Ok(())
    }
}

/// Runs a trainer's future to completion on this thread (native callers:
/// the CLI, the benchmark, the tests). The GPU engine drives the device
/// itself natively, so nothing else needs to poll.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}
