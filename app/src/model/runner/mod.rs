//! The training loop. One async task owns the engine; controls talk to it
//! through a command queue, so nothing else ever holds the engine across
//! an await. Each animation frame: apply commands, train for a time budget
//! (CPU: steps until the budget is spent; GPU: one submit of K steps, K
//! adapted to the budget, awaited without blocking), then refresh the
//! views from the engine's real parameters.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint, verify_restore};
use stepscope_core::data::Dataset;
use stepscope_core::engine::MemoryBytes;
use stepscope_core::gpu::GpuContext;
use stepscope_core::limits::Limits;
use stepscope_core::{Error, Experiment, StepMetrics, TrainState, Trainer};
use web_time::Instant;

use super::checkpoints::{self, latest_before, remember, CheckpointReport, Ring};
use super::loader::Loader;
use super::race::{RaceLanes, RaceReport};
use super::spikes::Detector;
use super::views::ViewJob;

mod accumulation;
mod autosave;
mod commands;
mod csv_job;
mod engine_choice;
mod frame;
#[cfg(test)]
mod gpt_tests;
mod profiler;
mod race;
mod report;

pub use commands::{push, AccumulationReport, BackendInfo, Command, Commands, Outcome};
pub use csv_job::{load_data, CsvData, CsvProgress, Read};
pub use engine_choice::{shape_key, Pin, Race};
pub use frame::{next_frame, now_ms, yield_now};
pub use report::{FramePlan, FrameReport};

pub struct Runner {
    /// The run, on whichever engine (the core's one trainer).
    trainer: Trainer,
    /// The GPU device, once created (asynchronously, after the page
    /// started training on the CPU), whichever engine runs.
    ctx: Option<Arc<GpuContext>>,
    /// Engine races measured so far, by shape (`engine_choice`).
    races: Vec<(String, Race)>,
    csv: Option<CsvData>,
    /// An uploaded CSV being read (`csv_job`).
    csv_job: Option<csv_job::CsvJob>,
    /// An upload's bytes received so far, before its `ReadCsv`.
    csv_upload: Option<csv_job::Upload>,
    /// Files to open as a run, received so far (`Command::RunPart`).
    run_parts: crate::model::opened::RunParts,
    /// The CSV the autosave holds (`checkpoints::StoredCsv`); unknown
    /// after each fresh run (a reset forgets the autosave).
    stored_csv: checkpoints::StoredCsv,
    /// Moved on when the page forgets the autosave (`ForgetAutosave`);
    /// shared by every run of this loop.
    autosave_generation: checkpoints::AutosaveGeneration,
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
    /// What the last views cost to compute, in ms of work.
    snapshot_cost_ms: f64,
    /// Views being computed in parts (`views`).
    view_job: Option<ViewJob>,
    /// Whether the run changed since the last views, when they were
    /// finished, and when and at which step the per-layer statistics were
    /// last read (`frame`).
    views_dirty: bool,
    last_views_at: Option<Instant>,
    last_layers_at: Option<Instant>,
    last_layers_step: Option<u64>,
    /// Loss spikes and gradient-norm jumps over the recent steps.
    detector: Detector,
    /// Background checkpoints finished and not yet reported, and whether
    /// one is being stored.
    finished: Rc<RefCell<Vec<Result<CheckpointReport, Error>>>>,
    in_flight: Rc<Cell<bool>>,
    /// Whether the GPU may run the fused step (`set_fused_allowed`).
    fused_allowed: bool,
    /// CPU: loader waits of the step in progress (its data time).
    loader_wait_ms: f64,
    /// CPU: a frame ends part-way through a step that ran this long.
    yield_after_ms: f64,
    /// Counts the fresh runs (the first, each Reset, new data, a restored
    /// checkpoint): the page's runs list starts a record when it changes.
    run_id: u64,
    /// A race of variants of the run's experiment, trained instead of the
    /// run while it lasts (`race`), and its last report once it ended.
    race: Option<RaceLanes>,
    race_final: Option<RaceReport>,
    /// Profiled steps: when, and what they found (`profiler`).
    profiler: profiler::Profiler,
    /// What the diagram's links show (the views draw it).
    link_mode: super::views::LinkMode,
    /// A transformer's sample and attention window (`frame::GptViewState`).
    gpt_views: frame::GptViewState,
    /// The page's automatic checkpoint cadence (steps; 0: off), as the
    /// last frame's plan gave it: a CPU frame ends at the step boundary
    /// where one falls due.
    checkpoint_every: u64,
}

/// A CPU step taking longer than this is taken in parts over several
/// frames (`train_frame`), so that commands wait at most about this long.
pub const YIELD_AFTER_MS: f64 = 50.0;

/// Time for training per animation frame on the page's own thread,
/// leaving room for drawing.
pub const PAGE_TRAIN_BUDGET_MS: f64 = 8.0;
/// In the worker, training takes nothing from drawing: a frame's worth.
pub const WORKER_TRAIN_BUDGET_MS: f64 = 15.0;

/// Time for the views per request, while a large network's are computed
/// in parts: in the worker, and on the page's own thread.
pub const WORKER_VIEWS_BUDGET_MS: f64 = 10.0;
pub const PAGE_VIEWS_BUDGET_MS: f64 = 4.0;

/// Wall time a GPU submit aims for: the page awaits it without blocking,
/// and its readback refreshes the numbers on screen (about 30 times a
/// second). Where a submit's fixed cost is larger, K grows past this
/// (`SubmitCost::steps_for`).
const GPU_SUBMIT_MS: f64 = 30.0;

impl Runner {
    pub fn new(e: &Experiment, gpu: Option<Arc<GpuContext>>, csv: Option<CsvData>) -> Result<Runner, Error> {
        Runner::from_state(TrainState::fresh(e), gpu, csv)
    }

    /// Continues `state` (an autosaved run).
    pub fn from_state(state: TrainState, gpu: Option<Arc<GpuContext>>, csv: Option<CsvData>) -> Result<Runner, Error> {
        let data = load_data(&state.experiment, csv.as_ref())?;
        let ring = Ring::default();
        remember(&ring, state.clone());
        let last_checkpoint = state.step();
        let trainer = Trainer::new(state, data, gpu.clone())?;
        Ok(Runner {
            trainer,
            ctx: gpu,
            races: Vec::new(),
            csv,
            csv_job: None,
            csv_upload: None,
            run_parts: Default::default(),
            stored_csv: Rc::default(),
            autosave_generation: Rc::default(),
            steps_per_submit: 1,
            ring,
            last_checkpoint,
            loader: None,
            steps_per_log: None,
            snapshot_cost_ms: 0.0,
            view_job: None,
            views_dirty: true,
            last_views_at: None,
            last_layers_at: None,
            last_layers_step: None,
            detector: Detector::default(),
            finished: Rc::default(),
            in_flight: Rc::default(),
            fused_allowed: true,
            loader_wait_ms: 0.0,
            yield_after_ms: YIELD_AFTER_MS,
            run_id: 0,
            race: None,
            race_final: None,
            profiler: profiler::Profiler::default(),
            link_mode: Default::default(),
            gpt_views: Default::default(),
            checkpoint_every: 0,
        })
    }

    /// Whether the GPU may run the fused step (the page's `?fused=off`
    /// keeps the phased kernels and their per-phase timestamps).
    pub fn set_fused_allowed(&mut self, allowed: bool) {
        self.fused_allowed = allowed;
        self.trainer.allow_fused(allowed);
    }

    /// CPU: how long a step may run before a frame ends part-way through
    /// it (`YIELD_AFTER_MS`; 0 in a test: after every part).
    pub fn set_yield_after_ms(&mut self, ms: f64) {
        self.yield_after_ms = ms;
    }

    /// Whether a step is part-way through (a long CPU step, or step by phase).
    pub fn mid_step(&self) -> bool {
        self.trainer.mid_step()
    }

    /// Which fresh run this is (see `run_id`).
    pub fn run_id(&self) -> u64 {
        self.run_id
    }

    /// The step of the newest automatic checkpoint.
    pub fn last_checkpoint(&self) -> u64 {
        self.last_checkpoint
    }

    pub fn experiment(&self) -> &Experiment {
        self.trainer.experiment()
    }

    /// The data of `e`, built in or from the run's uploaded file.
    fn load_data(&self, e: &Experiment) -> Result<Dataset, Error> {
        load_data(e, self.csv.as_ref())
    }

    fn data(&self) -> &Dataset {
        self.trainer.data()
    }

    pub fn step_count(&self) -> u64 {
        self.trainer.step_count()
    }

    /// The GPU device has been created: the engine may switch to it.
    pub fn set_context(&mut self, ctx: Arc<GpuContext>) {
        self.ctx = Some(ctx);
    }

    pub fn steps_per_submit(&self) -> usize {
        self.steps_per_submit
    }

    async fn state(&mut self) -> Result<TrainState, Error> {
        self.trainer.read_state().await
    }

    /// Finishes a step begun phase by phase, so that state reads and whole
    /// steps start at a step boundary.
    pub async fn finish_partial_step(&mut self) -> Result<Option<StepMetrics>, Error> {
        self.trainer.finish_partial_step().await
    }

    /// Applies a command. On error the current run is left as it was.
    pub async fn handle(&mut self, command: Command) -> Result<Option<Outcome>, Error> {
        if let Command::StepPhase = command {
            let report = self.trainer.step_phase().await;
            return report.map(|r| Some(Outcome::Phase(Box::new(r))));
        }
        if let Command::LinkMode(mode) = command {
            self.link_mode = mode;
            return Ok(None);
        }
        if let Command::GptViews(spec) = command {
            return self.set_gpt_views(spec).map(|()| None);
        }
        match command {
            Command::RunPart(index, name, part) => return self.run_parts.receive(index, name, part).map(|()| None),
            Command::DropRunParts => {
                self.run_parts = Default::default();
                return Ok(None);
            }
            Command::OpenRun => {
                let files = std::mem::take(&mut self.run_parts).into_files();
                let view = crate::model::opened::OpenedView::open(&files)?;
                return Ok(Some(Outcome::Opened(Box::new(view))));
            }
            _ => {}
        }
        self.finish_partial_step().await?;
        match command {
            Command::SaveCheckpoint => {
                let state = self.state().await?;
                let bytes = save_checkpoint(&state)?;
                return Ok(Some(Outcome::Checkpoint(bytes, state.step())));
            }
            Command::RestoreCheckpoint(bytes) => {
                // Everything is checked before the current run is replaced.
                let not_loaded = |err: Error| err.context("The checkpoint was not loaded");
                let state = load_checkpoint(&bytes).map_err(not_loaded)?;
                let e = state.experiment.clone();
                let data = self.load_data(&e).map_err(not_loaded)?;
                Limits::PAGE.check(&e, Some((data.train.rows(), data.test.rows()))).map_err(not_loaded)?;
                let step = state.step();
                let kept = state.clone();
                self.trainer.replace(state, data).map_err(not_loaded)?;
                // The restored run starts its own checkpoint ring: a later
                // rollback or device-loss recovery must not resume the run
                // that was replaced.
                self.ring.borrow_mut().clear();
                remember(&self.ring, kept);
                self.last_checkpoint = step;
                self.run_id += 1;
                return Ok(Some(Outcome::Restored(Box::new(e), step)));
            }
            Command::VerifyRestore => {
                let state = self.state().await?;
                let report = verify_restore(&state, self.data(), 5)?;
                return Ok(Some(Outcome::Verified(report.summary(), report.passed())));
            }
            Command::Reset(e) => self.restart_with_race(&e, self.csv.clone()).await?,
            Command::CsvBytes(name, total, part) => self.receive_csv(name, total, part),
            Command::DropCsvBytes => self.csv_upload = None,
            Command::ForgetAutosave => {
                // Moved on first: a checkpoint of the forgotten run still
                // being stored is not written after the clear.
                self.autosave_generation.set(self.autosave_generation.get() + 1);
                *self.stored_csv.borrow_mut() = None;
                checkpoints::clear_autosave()
                    .await
                    .map_err(|m| Error::Other(format!("The autosaved run could not be forgotten: {m}")))?;
            }
            Command::ReadCsv(name, bytes, base) => self.begin_csv(name, bytes, base)?,
            Command::ReadText(name, bytes, base) => return self.read_text(name, bytes, base).await,
            Command::StartRace(spec) => self.start_race(spec).await?,
            Command::EndRace => self.end_race().await,
            Command::Apply(e) => {
                // Hyperparameters in place; a different optimizer starts
                // fresh (its state and step), SGD's momentum buffer comes
                // and goes with its momentum (`Trainer::apply`).
                self.trainer.apply(&e).await?;
            }
            Command::ZeroGrad(on) => self.trainer.set_zero_grad(on),
            Command::Rollback(before) => {
                let saved = latest_before(&self.ring, before)
                    .ok_or_else(|| Error::Checkpoint(format!("no checkpoint from before step {before} is kept")))?;
                let e = saved.state.experiment.clone();
                let data = self.load_data(&e)?;
                self.trainer.replace(saved.state, data)?;
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
            Command::ActivationCheckpointing(on) => self
                .trainer
                .set_activation_checkpointing(on)
                .map_err(|err| err.context("Activation checkpointing was not switched"))?,
            Command::Loader(delay_ms, prefetch) => self.set_loader(delay_ms, prefetch),
            Command::LogEvery(n) => self.set_steps_per_log(n),
            Command::CheckAccumulation(k) => {
                return self.check_accumulation(k).await.map(|r| Some(Outcome::Accumulation(r)));
            }
            Command::LoseDevice => match self.trainer.gpu_context() {
                Some(ctx) => ctx.device.destroy(),
                None => return Err(Error::Gpu("no GPU device is in use to lose (pin the WebGPU engine)".into())),
            },
            Command::RefuseGpuWork => match self.trainer.gpu_context() {
                Some(ctx) => {
                    let device = &ctx.device;
                    // An uncaptured validation error; the engine's next
                    // check reports it.
                    let _ = device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("test hook: a buffer past the device's limit"),
                        size: device.limits().max_buffer_size.saturating_add(4) & !3,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    });
                }
                None => return Err(Error::Gpu("no GPU device is in use (pin the WebGPU engine)".into())),
            },
            Command::StepOnce
            | Command::StepPhase
            | Command::LinkMode(_)
            | Command::GptViews(_)
            | Command::RunPart(..)
            | Command::OpenRun
            | Command::DropRunParts => {}
        }
        Ok(None)
    }

    /// A fresh run of `e`, keeping the lesson switches.
    fn restart(&mut self, e: &Experiment, csv: Option<CsvData>) -> Result<(), Error> {
        let mut fresh = Runner::new(e, self.trainer.gpu_context().cloned(), csv)?;
        fresh.ctx = self.ctx.clone();
        fresh.races = std::mem::take(&mut self.races);
        fresh.trainer.set_zero_grad(self.trainer.zero_grad());
        fresh
            .trainer
            .set_activation_checkpointing(self.trainer.activation_checkpointing())
            .map_err(|err| err.context("Activation checkpointing was not switched"))?;
        fresh.loader = self.loader.take().map(|l| Loader::new(l.delay_ms, l.prefetch, now_ms()));
        fresh.steps_per_log = self.steps_per_log;
        fresh.set_fused_allowed(self.fused_allowed);
        fresh.yield_after_ms = self.yield_after_ms;
        fresh.link_mode = self.link_mode;
        fresh.checkpoint_every = self.checkpoint_every;
        fresh.gpt_views.spec = std::mem::take(&mut self.gpt_views.spec);
        fresh.run_id = self.run_id + 1;
        fresh.race_final = self.race_final.take();
        // An upload being read goes on being read.
        fresh.csv_job = self.csv_job.take();
        fresh.csv_upload = self.csv_upload.take();
        fresh.run_parts = std::mem::take(&mut self.run_parts);
        // A background checkpoint of the old run still reports when done.
        fresh.finished = self.finished.clone();
        fresh.in_flight = self.in_flight.clone();
        fresh.autosave_generation = self.autosave_generation.clone();
        *self = fresh;
        Ok(())
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        self.trainer.memory()
    }

    /// Whether the GPU device of this run was lost (not merely an error).
    pub fn gpu_lost(&self) -> bool {
        self.trainer.gpu_context().is_some_and(|ctx| ctx.is_lost())
    }

    /// After a device loss: a new device, and the run from the last good
    /// state (or from the start).
    // The engine takes an `Arc<GpuContext>` so that it is shareable
    // natively; the page is single-threaded, where the Arc costs nothing.
    #[allow(clippy::arc_with_non_send_sync)]
    pub async fn recover_device(&mut self) -> Result<String, Error> {
        let ctx = Arc::new(GpuContext::new().await.map_err(|e| e.context("no GPU after the device was lost"))?);
        self.ctx = Some(ctx.clone());
        let e = self.experiment().clone();
        let state = latest_before(&self.ring, u64::MAX).map_or_else(|| TrainState::fresh(&e), |s| s.state);
        let step = state.step();
        let data = self.data().clone();
        self.trainer.rebuild(state, data, Some(ctx))?;
        Ok(format!("The GPU device was lost; training resumed on a new device from step {step}."))
    }
}
