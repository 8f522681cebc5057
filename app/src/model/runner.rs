//! The training loop. One async task owns the engine; controls talk to it
//! through a command queue, so nothing else ever holds the engine across
//! an await. Each animation frame: apply commands, train for a time budget
//! (CPU: steps until the budget is spent; GPU: one submit of K steps, K
//! adapted to the budget, awaited without blocking), then refresh the
//! views from the engine's real parameters.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint, verify_restore};
use stepscope_core::data::Dataset;
use stepscope_core::engine::evaluate;
use stepscope_core::engine::{MemoryBytes, PhaseReport};
use stepscope_core::gpu::{GpuContext, GpuEngine};
use stepscope_core::model::{init_parameters, Layout};
use stepscope_core::optim::OptimizerState;
use stepscope_core::stats::{tensor_stats, TensorStats};
use stepscope_core::{CpuEngine, Error, Experiment, StepMetrics, TrainState};
use wasm_bindgen_futures::JsFuture;
use web_time::Instant;

use super::checkpoints::{latest_before, remember, Pending, Ring};
use super::loader::Loader;
use super::views::{snapshot, Snapshot};

/// What the controls ask of the loop.
#[derive(Clone, Debug)]
pub enum Command {
    /// Fresh parameters for this experiment (model, data or seed changed).
    Reset(Experiment),
    /// Continue the run under changed hyperparameters.
    Apply(Experiment),
    /// One optimizer step.
    StepOnce,
    /// New CSV text for `"source": "csv"`, with the experiment it implies.
    UseCsv(Arc<String>, Experiment),
    /// The current run as checkpoint bytes, for a download.
    SaveCheckpoint,
    /// Continue from an uploaded checkpoint (refused whole if bad).
    RestoreCheckpoint(Arc<Vec<u8>>),
    /// Restore the current run into a fresh engine and compare.
    VerifyRestore,
    /// The "forgot to zero the gradients" lesson: false keeps gradients
    /// piling up across steps, as a loop without `optimizer.zero_grad()`.
    ZeroGrad(bool),
    /// Step-by-phase mode: run the next phase of the current step.
    StepPhase,
    /// Back to the newest automatic checkpoint from before this step.
    Rollback(u64),
    /// A PyTorch script that continues this run from its checkpoint.
    ExportPytorch,
    /// The training rows as CSV (for the PyTorch script's `--data`).
    ExportData,
    /// Lesson: a loader taking this many ms per batch, prefetching this
    /// many batches (0 ms: off).
    Loader(f64, usize),
    /// Lesson: log every this many steps exactly (None: as the frame
    /// budget allows).
    LogEvery(Option<usize>),
    /// Lesson: one step with k micro-batches of b against one batch of
    /// k·b, from the current state.
    CheckAccumulation(usize),
    /// Recompute pre-activations in backward instead of storing them.
    ActivationCheckpointing(bool),
}

/// What a command produced for the page.
#[derive(Clone, Debug)]
pub enum Outcome {
    Checkpoint(Vec<u8>, u64),
    Restored(Box<Experiment>, u64),
    Verified(String, bool),
    Phase(Box<PhaseReport>),
    /// Rolled back to the checkpoint of this step (its experiment).
    RolledBack(Box<Experiment>, u64),
    /// A file to download: name and contents.
    File(String, Vec<u8>),
    Accumulation(AccumulationReport),
}

/// One step as one batch of k·b rows against k micro-batches of b rows.
#[derive(Clone, Debug, PartialEq)]
pub struct AccumulationReport {
    pub step: u64,
    pub k: usize,
    pub micro_batch: usize,
    /// Loss of the step: one batch, accumulated.
    pub loss: (f32, f32),
    /// Largest |θ_one − θ_accumulated| after the step, and largest |θ|.
    pub max_diff: f32,
    pub max_param: f32,
    /// Stored activations: one batch, accumulated.
    pub activation_bytes: (u64, u64),
}

impl AccumulationReport {
    pub fn passed(&self) -> bool {
        self.max_diff <= 1e-5 * self.max_param.max(1.0)
    }
}

pub type Commands = Arc<Mutex<VecDeque<Command>>>;

pub fn push(commands: &Commands, command: Command) {
    commands.lock().unwrap_or_else(|p| p.into_inner()).push_back(command);
}

/// Which engine runs, and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendInfo {
    pub gpu: bool,
    /// "WebGPU" or "CPU (WebAssembly)".
    pub name: String,
    /// The adapter, when on the GPU.
    pub adapter: String,
    /// Why the CPU runs, when it does.
    pub fallback_reason: Option<String>,
}

/// What the loop reports to the page after a frame.
#[derive(Clone, Debug, Default)]
pub struct FrameReport {
    pub metrics: Vec<StepMetrics>,
    pub snapshot: Option<Arc<Snapshot>>,
    pub error: Option<String>,
    /// Training should stop (NaN/Inf): the page pauses.
    pub pause: bool,
    pub notice: Option<String>,
}

enum PageEngine {
    Cpu(Box<CpuEngine>),
    Gpu(Box<GpuEngine>),
}

pub struct Runner {
    engine: PageEngine,
    gpu: Option<Arc<GpuContext>>,
    csv: Option<Arc<String>>,
    /// Steps per GPU submit, adapted to the frame budget.
    steps_per_submit: usize,
    /// The newest automatic checkpoints (model::checkpoints): rollback
    /// and device-loss recovery restore from here.
    ring: Ring,
    /// The step of the last automatic checkpoint.
    last_checkpoint: u64,
    /// Lesson: the simulated slow loader, when on.
    loader: Option<Loader>,
    /// Lesson: steps between logs, when fixed.
    steps_per_log: Option<usize>,
    last_snapshot_at: Option<Instant>,
    snapshot_cost_ms: f64,
    /// Lesson switches, kept across engine rebuilds.
    zero_grad: bool,
    activation_checkpointing: bool,
}

/// Time for training per animation frame, leaving room for drawing.
const TRAIN_BUDGET_MS: f64 = 8.0;

fn fresh_state(e: &Experiment) -> TrainState {
    let layout = Layout::new(e);
    TrainState {
        experiment: e.clone(),
        params: init_parameters(&layout, e.seed),
        optimizer: OptimizerState::new(&e.optimizer, layout.parameter_count),
        data_position: stepscope_core::data::DataPosition::start(e.seed),
    }
}

fn build(gpu: &Option<Arc<GpuContext>>, state: TrainState, data: Dataset) -> Result<PageEngine, Error> {
    Ok(match gpu {
        Some(ctx) => PageEngine::Gpu(Box::new(GpuEngine::from_state(ctx.clone(), state, data)?)),
        None => PageEngine::Cpu(Box::new(CpuEngine::from_state(state, data)?)),
    })
}

impl Runner {
    pub fn new(e: &Experiment, gpu: Option<Arc<GpuContext>>, csv: Option<Arc<String>>) -> Result<Runner, String> {
        Runner::from_state(fresh_state(e), gpu, csv)
    }

    /// Continues `state` (an autosaved run).
    pub fn from_state(
        state: TrainState,
        gpu: Option<Arc<GpuContext>>,
        csv: Option<Arc<String>>,
    ) -> Result<Runner, String> {
        let data =
            Dataset::load(&state.experiment, csv.as_deref().map(String::as_str)).map_err(|err| err.to_string())?;
        let ring = Ring::default();
        remember(&ring, state.clone());
        let last_checkpoint = state.step();
        let engine = build(&gpu, state, data).map_err(|err| err.to_string())?;
        Ok(Runner {
            engine,
            gpu,
            csv,
            steps_per_submit: 1,
            ring,
            last_checkpoint,
            loader: None,
            steps_per_log: None,
            last_snapshot_at: None,
            snapshot_cost_ms: 0.0,
            zero_grad: true,
            activation_checkpointing: false,
        })
    }

    pub fn experiment(&self) -> &Experiment {
        match &self.engine {
            PageEngine::Cpu(e) => e.experiment(),
            PageEngine::Gpu(e) => e.experiment(),
        }
    }

    fn data(&self) -> &Dataset {
        match &self.engine {
            PageEngine::Cpu(e) => e.data(),
            PageEngine::Gpu(e) => e.data(),
        }
    }

    pub fn step_count(&self) -> u64 {
        match &self.engine {
            PageEngine::Cpu(e) => e.step_count(),
            PageEngine::Gpu(e) => e.step_count(),
        }
    }

    pub fn steps_per_submit(&self) -> usize {
        self.steps_per_submit
    }

    async fn state(&mut self) -> Result<TrainState, Error> {
        match &mut self.engine {
            PageEngine::Cpu(e) => Ok(e.state()),
            PageEngine::Gpu(e) => e.read_state().await,
        }
    }

    /// Finishes a step begun phase by phase, so that state reads and whole
    /// steps start at a step boundary.
    pub async fn finish_partial_step(&mut self) -> Result<Option<StepMetrics>, Error> {
        match &mut self.engine {
            PageEngine::Cpu(e) if e.mid_step() => e.step().map(Some),
            PageEngine::Cpu(_) => Ok(None),
            PageEngine::Gpu(e) => e.finish_step().await,
        }
    }

    /// Applies a command. On error the current run is left as it was.
    pub async fn handle(&mut self, command: Command) -> Result<Option<Outcome>, String> {
        if let Command::StepPhase = command {
            let report = match &mut self.engine {
                PageEngine::Cpu(e) => e.step_phase(),
                PageEngine::Gpu(e) => e.step_phase().await,
            };
            return report.map(|r| Some(Outcome::Phase(Box::new(r)))).map_err(|err| err.to_string());
        }
        self.finish_partial_step().await.map_err(|err| err.to_string())?;
        match command {
            Command::SaveCheckpoint => {
                let state = self.state().await.map_err(|err| err.to_string())?;
                let bytes = save_checkpoint(&state).map_err(|err| err.to_string())?;
                return Ok(Some(Outcome::Checkpoint(bytes, state.step())));
            }
            Command::RestoreCheckpoint(bytes) => {
                // Everything is checked before the current run is replaced.
                let state = load_checkpoint(&bytes).map_err(|err| format!("The checkpoint was not loaded: {err}"))?;
                let e = state.experiment.clone();
                let data = Dataset::load(&e, self.csv.as_deref().map(String::as_str))
                    .map_err(|err| format!("The checkpoint was not loaded: {err}"))?;
                let step = state.step();
                let engine =
                    build(&self.gpu, state, data).map_err(|err| format!("The checkpoint was not loaded: {err}"))?;
                self.engine = engine;
                self.apply_lessons()?;
                return Ok(Some(Outcome::Restored(Box::new(e), step)));
            }
            Command::VerifyRestore => {
                let state = self.state().await.map_err(|err| err.to_string())?;
                let report = verify_restore(&state, self.data(), 5).map_err(|err| err.to_string())?;
                return Ok(Some(Outcome::Verified(report.summary(), report.passed())));
            }
            Command::Reset(e) => self.restart(&e, self.csv.clone())?,
            Command::UseCsv(text, e) => self.restart(&e, Some(text))?,
            Command::Apply(e) => {
                let mut state = self.state().await.map_err(|err| err.to_string())?;
                if std::mem::discriminant(&state.experiment.optimizer) != std::mem::discriminant(&e.optimizer) {
                    // A different optimizer starts fresh: its state and step.
                    state.optimizer = OptimizerState::new(&e.optimizer, state.params.len());
                }
                state.experiment = e;
                let data = self.data().clone();
                self.engine = build(&self.gpu, state, data).map_err(|err| err.to_string())?;
                self.apply_lessons()?;
            }
            Command::ZeroGrad(on) => {
                self.zero_grad = on;
                self.apply_lessons()?;
            }
            Command::Rollback(before) => {
                let saved = latest_before(&self.ring, before)
                    .ok_or_else(|| format!("No checkpoint from before step {before} is kept."))?;
                let e = saved.state.experiment.clone();
                let data = Dataset::load(&e, self.csv.as_deref().map(String::as_str)).map_err(|err| err.to_string())?;
                self.engine = build(&self.gpu, saved.state, data).map_err(|err| err.to_string())?;
                self.apply_lessons()?;
                self.last_checkpoint = saved.step;
                return Ok(Some(Outcome::RolledBack(Box::new(e), saved.step)));
            }
            Command::ExportPytorch => {
                let script = stepscope_core::export::pytorch_script(self.experiment());
                return Ok(Some(Outcome::File("stepscope_continue.py".into(), script.into_bytes())));
            }
            Command::ExportData => {
                let csv = stepscope_core::export::training_csv(&self.data().train);
                return Ok(Some(Outcome::File("stepscope-train.csv".into(), csv.into_bytes())));
            }
            Command::ActivationCheckpointing(on) => {
                self.activation_checkpointing = on;
                self.apply_lessons()?;
            }
            Command::Loader(delay_ms, prefetch) => self.set_loader(delay_ms, prefetch),
            Command::LogEvery(n) => self.set_steps_per_log(n),
            Command::CheckAccumulation(k) => {
                return self.check_accumulation(k).await.map(|r| Some(Outcome::Accumulation(r)));
            }
            Command::StepOnce | Command::StepPhase => {}
        }
        Ok(None)
    }

    /// Takes the next step twice from the current state, in separate
    /// engines of the same backend: as one batch of k·b rows, and as k
    /// micro-batches of b rows with accumulation. The rows are the same
    /// (the batcher hands them out in order either way), so the updates
    /// agree up to float32 summation order; the activations stored differ
    /// k-fold. The run itself is not touched.
    async fn check_accumulation(&mut self, k: usize) -> Result<AccumulationReport, String> {
        if !(2..=64).contains(&k) {
            return Err(format!("Micro-batches: {k} is outside 2…64."));
        }
        let state = self.state().await.map_err(|err| err.to_string())?;
        let b = state.experiment.batch_size;
        let mut one = state.clone();
        one.experiment.batch_size = k * b;
        one.experiment.grad_accumulation = 1;
        let mut accumulated = state.clone();
        accumulated.experiment.grad_accumulation = k;
        let fail = |err: Error| format!("The accumulation check did not run: {err}");
        let (one_state, one_metrics, one_memory) = self.one_step(one).await.map_err(fail)?;
        let (acc_state, acc_metrics, acc_memory) = self.one_step(accumulated).await.map_err(fail)?;
        let max_diff = one_state.params.iter().zip(&acc_state.params).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        let max_param = one_state.params.iter().map(|p| p.abs()).fold(0.0, f32::max);
        Ok(AccumulationReport {
            step: state.step(),
            k,
            micro_batch: b,
            loss: (one_metrics.loss, acc_metrics.loss),
            max_diff,
            max_param,
            activation_bytes: (one_memory.activations, acc_memory.activations),
        })
    }

    /// One step of `state` in a fresh engine of the current backend.
    async fn one_step(&self, state: TrainState) -> Result<(TrainState, StepMetrics, MemoryBytes), Error> {
        match build(&self.gpu, state, self.data().clone())? {
            PageEngine::Cpu(mut e) => {
                let metrics = e.step()?;
                Ok((e.state(), metrics, e.memory()))
            }
            PageEngine::Gpu(mut e) => {
                e.submit(1)?;
                let metrics =
                    e.collect_async().await?.pop().ok_or_else(|| Error::Gpu("a step produced no metrics".into()))?;
                Ok((e.read_state().await?, metrics, e.memory()))
            }
        }
    }

    /// A fresh run of `e`, keeping the lesson switches.
    fn restart(&mut self, e: &Experiment, csv: Option<Arc<String>>) -> Result<(), String> {
        let mut fresh = Runner::new(e, self.gpu.clone(), csv)?;
        fresh.zero_grad = self.zero_grad;
        fresh.activation_checkpointing = self.activation_checkpointing;
        fresh.loader = self.loader.take().map(|l| Loader::new(l.delay_ms, l.prefetch, now_ms()));
        fresh.steps_per_log = self.steps_per_log;
        *self = fresh;
        self.apply_lessons()
    }

    /// Engine switches kept across rebuilds. Called between frames, at a
    /// step boundary, with nothing in flight, where setting them cannot fail.
    fn apply_lessons(&mut self) -> Result<(), String> {
        let on = self.activation_checkpointing;
        let set = match &mut self.engine {
            PageEngine::Cpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(on)
            }
            PageEngine::Gpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(on)
            }
        };
        set.map_err(|err| format!("Activation checkpointing was not switched: {err}"))
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        match &self.engine {
            PageEngine::Cpu(e) => e.memory(),
            PageEngine::Gpu(e) => e.memory(),
        }
    }

    /// Trains for one frame: `single` runs exactly one step. Also returns
    /// the milliseconds spent awaiting the GPU (the page was free then).
    pub async fn train_frame(&mut self, single: bool) -> (Result<Vec<StepMetrics>, Error>, f64) {
        let mut awaited_ms = 0.0;
        let result = self.train_frame_inner(single, &mut awaited_ms).await;
        (result, awaited_ms)
    }

    async fn train_frame_inner(&mut self, single: bool, awaited_ms: &mut f64) -> Result<Vec<StepMetrics>, Error> {
        let started = Instant::now();
        if let Some(metrics) = self.finish_partial_step().await? {
            if single {
                return Ok(vec![metrics]);
            }
        }
        // Lessons: a fixed number of steps between logs; a slow loader.
        let cap = if single { 1 } else { self.steps_per_log.unwrap_or(usize::MAX) };
        match &mut self.engine {
            PageEngine::Cpu(engine) => {
                let mut out = Vec::new();
                loop {
                    let waited = wait_for_batches(&mut self.loader, 1).await;
                    *awaited_ms += waited;
                    let mut metrics = engine.step()?;
                    metrics.phases.data_ms += waited;
                    out.push(metrics);
                    let budget_spent = self.steps_per_log.is_none() && ms_since(started) >= TRAIN_BUDGET_MS;
                    if out.len() >= cap || budget_spent || out.len() >= 10_000 {
                        return Ok(out);
                    }
                }
            }
            PageEngine::Gpu(engine) => {
                let mut k = if single { 1 } else { self.steps_per_submit.min(cap) };
                if let Some(cap) = self.steps_per_log.filter(|_| !single) {
                    k = cap.min(engine.max_steps_per_submit());
                }
                if let Some(loader) = self.loader.as_ref().filter(|l| l.active()) {
                    // The loop takes the batches that are ready (at least one).
                    k = k.min(loader.ready(now_ms()).max(1));
                }
                let waited = wait_for_batches(&mut self.loader, k).await;
                *awaited_ms += waited;
                engine.submit(k)?;
                let wait = Instant::now();
                let mut out = engine.collect_async().await?;
                *awaited_ms += ms_since(wait);
                for m in &mut out {
                    m.phases.data_ms += waited / k as f64;
                }
                if !single && self.steps_per_log.is_none() {
                    // Aim for the budget: scale K by how far off this frame was.
                    let scale = (TRAIN_BUDGET_MS / ms_since(started).max(0.1)).clamp(0.5, 2.0);
                    self.steps_per_submit =
                        ((k as f64 * scale).round() as usize).clamp(1, engine.max_steps_per_submit());
                }
                Ok(out)
            }
        }
    }

    /// Lesson: a loader needing `delay_ms` per batch, `prefetch` ahead
    /// (delay 0 turns it off).
    pub fn set_loader(&mut self, delay_ms: f64, prefetch: usize) {
        self.loader = (delay_ms > 0.0).then(|| Loader::new(delay_ms, prefetch, now_ms()));
    }

    /// Lesson: log (read back and redraw) every `n` steps exactly, one
    /// submit per log; None: as often as the frame budget allows.
    pub fn set_steps_per_log(&mut self, n: Option<usize>) {
        self.steps_per_log = n.filter(|&n| n > 0);
    }

    pub fn steps_per_log(&self) -> Option<usize> {
        self.steps_per_log
    }

    /// Whether an automatic checkpoint is due (every `every` steps; 0: off).
    /// Due once a multiple of `every` was passed since the last one (a
    /// frame trains several steps, so it lands on the frame's last step).
    pub fn checkpoint_due(&self, every: u64) -> bool {
        every > 0 && self.step_count() / every > self.last_checkpoint / every
    }

    /// Starts an automatic checkpoint of the current step: the GPU copies
    /// are queued (or the CPU state cloned); `Pending::complete` does the
    /// rest, awaited now (synchronous) or in a task (background).
    pub fn begin_checkpoint(&mut self) -> Result<Pending, Error> {
        let pending = match &mut self.engine {
            PageEngine::Cpu(e) => Pending::Ready(Box::new(e.state())),
            PageEngine::Gpu(e) => Pending::Gpu(Box::new(e.begin_read_state()?)),
        };
        self.last_checkpoint = self.step_count();
        Ok(pending)
    }

    pub fn ring(&self) -> Ring {
        self.ring.clone()
    }

    pub fn csv(&self) -> Option<Arc<String>> {
        self.csv.clone()
    }

    /// After a device loss: a new device, and the run from the last good
    /// state (or from the start).
    // The engine takes an `Arc<GpuContext>` so that it is shareable
    // natively; the page is single-threaded, where the Arc costs nothing.
    #[allow(clippy::arc_with_non_send_sync)]
    pub async fn recover_device(&mut self) -> Result<String, String> {
        let ctx = GpuContext::new().await.map_err(|e| format!("no GPU after the device was lost: {e}"))?;
        self.gpu = Some(Arc::new(ctx));
        let e = self.experiment().clone();
        let state = latest_before(&self.ring, u64::MAX).map_or_else(|| fresh_state(&e), |s| s.state);
        let step = state.step();
        let data = self.data().clone();
        self.engine = build(&self.gpu, state, data).map_err(|err| err.to_string())?;
        Ok(format!("The GPU device was lost; training resumed on a new device from step {step}."))
    }

    /// Whether the views are due: at most every 50 ms, and less often when
    /// computing them is slow, so drawing never starves training.
    pub fn snapshot_due(&self) -> bool {
        match self.last_snapshot_at {
            None => true,
            Some(t) => t.elapsed().as_secs_f64() * 1e3 >= (50.0f64).max(4.0 * self.snapshot_cost_ms),
        }
    }

    /// The views, from the engine's current parameters; and the
    /// milliseconds spent awaiting the GPU's readback.
    pub async fn snapshot(&mut self) -> (Result<Arc<Snapshot>, Error>, f64) {
        let wait = Instant::now();
        let tensors = match &self.engine {
            PageEngine::Gpu(e) => Some(e.read_tensors().await),
            PageEngine::Cpu(_) => None,
        };
        let awaited_ms = wait.elapsed().as_secs_f64() * 1e3;
        let result = match tensors {
            Some(Err(err)) => Err(err),
            Some(Ok(t)) => Ok(self.views(Some(t))),
            None => Ok(self.views(None)),
        };
        (result, awaited_ms)
    }

    /// Per layer: statistics of [activations, gradients, weights,
    /// updates] of the last step, from the engine (the GPU's
    /// `tensor_stats` kernel, or its CPU twin on the CPU engine).
    pub async fn layer_stats(&mut self) -> Result<Vec<[TensorStats; 4]>, Error> {
        match &mut self.engine {
            PageEngine::Gpu(e) => e.read_layer_stats().await,
            PageEngine::Cpu(e) => Ok(e
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

    fn views(&mut self, gpu_tensors: Option<[Vec<f32>; 3]>) -> Arc<Snapshot> {
        let started = Instant::now();
        let tensors = match (&self.engine, gpu_tensors) {
            (_, Some(t)) => t,
            (PageEngine::Cpu(e), None) => [e.params().to_vec(), e.grads().to_vec(), e.updates().to_vec()],
            (PageEngine::Gpu(_), None) => unreachable!("GPU views always come with read-back tensors"),
        };
        let e = self.experiment().clone();
        let layout = Layout::new(&e);
        let data = self.data();
        let train = evaluate(&tensors[0], &layout, &e, &data.train);
        let test = evaluate(&tensors[0], &layout, &e, &data.test);
        let snap = snapshot(&e, &layout, data, self.step_count(), tensors, train, test);
        self.last_snapshot_at = Some(Instant::now());
        self.snapshot_cost_ms = started.elapsed().as_secs_f64() * 1e3;
        snap
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The page's clock in milliseconds (the loader's timeline).
fn now_ms() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

/// Waits until the loader has `n` batches for the next steps; returns the
/// milliseconds waited (0 without the lesson).
async fn wait_for_batches(loader: &mut Option<Loader>, n: usize) -> f64 {
    let Some(loader) = loader.as_mut().filter(|l| l.active()) else { return 0.0 };
    let now = now_ms();
    let ready_at = loader.take(n, now);
    if ready_at > now {
        sleep_ms(ready_at - now).await;
    }
    (now_ms() - now).max(0.0)
}

/// Resolves after `ms` milliseconds (setTimeout).
async fn sleep_ms(ms: f64) {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms.ceil() as i32);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// Resolves at the next animation frame.
pub async fn next_frame() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            let _ = w.request_animation_frame(&resolve);
        }
    });
    let _ = JsFuture::from(promise).await;
}
