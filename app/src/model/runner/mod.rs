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
use super::race::{RaceLanes, RaceReport};
use super::spikes::Detector;
use super::views::ViewJob;

mod accumulation;
mod ahead;
mod autosave;
mod commands;
mod csv_job;
mod engine_choice;
mod frame;
#[cfg(test)]
mod gpt_tests;
mod handle;
mod maps;
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
    /// Loader workers making the batches ahead (`data.num_workers`;
    /// `host::loaders`), and why the last ones were dropped.
    loaders: Option<Box<dyn BatchLoaders>>,
    loader_notice: Option<String>,
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
    /// The test image of a conv net's feature maps (`Command::MapsImage`),
    /// and when they were last made (`maps`).
    maps_row: usize,
    maps: maps::LiveMaps,
    /// A transformer's sample and attention window (`frame::GptViewState`).
    gpt_views: frame::GptViewState,
    /// The page's automatic checkpoint cadence (steps; 0: off), as the
    /// last frame's plan gave it: a CPU frame ends at the step boundary
    /// where one falls due.
    checkpoint_every: u64,
    /// Steps trained since the last frame's report, while allowed
    /// (`ahead`: in the worker, between requests).
    ahead: Option<ahead::Ahead>,
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

/// Loader workers making the run's micro-batches ahead of the loop (on
/// the page, `host::loaders`): the loop feeds what they made to the engine
/// and waits for a step's batches; the wait is the step's data time.
pub trait BatchLoaders {
    /// Whether they were given this experiment and these training rows.
    fn serves(&self, e: &Experiment, rows: usize) -> bool;
    fn count(&self) -> usize;
    /// Milliseconds a loader takes to make a batch, lately.
    fn make_ms(&self) -> f64;
    /// Before a step of `micro` micro-batches: the ms waited for them, or
    /// why the loaders failed (the loop then makes its batches itself).
    fn before_step<'a>(
        &'a mut self,
        trainer: &'a mut Trainer,
        micro: usize,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<f64, String>> + 'a>>;
}

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
            loaders: None,
            maps_row: 0,
            maps: maps::LiveMaps::default(),
            loader_notice: None,
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
            ahead: None,
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

    /// Floats per row of the run's inputs and targets (what a rank worker's
    /// share of a micro-batch holds).
    pub fn row_widths(&self) -> (usize, usize) {
        let train = &self.trainer.data().train;
        (train.input_width, train.target_width)
    }

    /// The run's ranks (`host::ranks`): in use, each one's part of the last
    /// step, and why one was dropped (taken once).
    pub fn ranks_used(&self) -> usize {
        self.trainer.ranks_used()
    }
    pub fn rank_times(&self) -> Vec<stepscope_core::engine::RankTimes> {
        self.trainer.rank_times().to_vec()
    }
    pub fn take_rank_notice(&mut self) -> Option<String> {
        self.trainer.take_rank_notice()
    }
    pub fn set_straggler(&mut self, extra: u32) -> bool {
        self.trainer.set_straggler(extra)
    }
    /// Loader workers for the run's batches (or none: the loop makes them).
    pub fn set_loaders(&mut self, loaders: Option<Box<dyn BatchLoaders>>) {
        self.loaders = loaders;
    }
    /// The loaders in use (0: none), a batch's mean making time (ms), and
    /// why loaders were dropped (taken once).
    pub fn loader_status(&mut self) -> (usize, f64, Option<String>) {
        let (n, ms) = self.loaders.as_ref().map_or((0, 0.0), |l| (l.count(), l.make_ms()));
        (n, ms, self.loader_notice.take())
    }
    /// Whether the loaders serve the run as it is now.
    pub fn loaders_serve(&self) -> bool {
        let rows = self.trainer.data().train.rows();
        self.loaders.as_ref().is_some_and(|l| l.serves(self.trainer.experiment(), rows))
    }
    /// The training rows (what loader workers are given).
    pub fn training_table(&self) -> &stepscope_core::data::Table {
        &self.trainer.data().train
    }
    /// Where the run's data stands (CPU engine).
    pub fn data_position(&self) -> Option<stepscope_core::data::DataPosition> {
        self.trainer.data_position()
    }
    pub fn set_remote_ranks(&mut self, remote: Option<Box<dyn stepscope_core::engine::RemoteRanks>>) {
        self.trainer.set_remote_ranks(remote);
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
