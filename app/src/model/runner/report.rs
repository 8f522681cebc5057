//! The loop, one frame at a time: the page sends what it wants of a frame
//! (its commands, whether it is training, its checkpoint settings) and the
//! runner does the frame — commands, training, spike checks, automatic
//! checkpoints, views and per-layer statistics when due — and returns one
//! typed report. The page only draws the report; no second loop lives in
//! `state/`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::engine::profile::PhaseProfile;
use stepscope_core::stats::TensorStats;
use stepscope_core::trainer::PhaseClock;
use stepscope_core::{Error, StepMetrics};
use web_time::Instant;

use super::{Command, CsvProgress, Outcome, Runner};
use crate::model::checkpoints::CheckpointReport;
use crate::model::clock::ms_since;
use crate::model::op_table::OpStep;
use crate::model::race::RaceReport;
use crate::model::spikes::Verdict;
use crate::model::views::Snapshot;

/// The views' time in a frame is at least its training time over this
/// (beside the plan's budget): at most about an eighth more per frame.
const VIEWS_SHARE_OF_TRAINING: f64 = 8.0;

/// Least time between per-layer samples (ms; and one at every log of a
/// lesson's fixed steps per log): each costs a GPU pass and a readback,
/// counted under logging in the timeline.
pub const LAYER_SAMPLE_MS: f64 = 250.0;

/// Per layer: statistics of [activations, gradients, weights, updates].
pub type LayerStats = Vec<[TensorStats; 4]>;

/// What the page asks of one frame.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FramePlan {
    /// The controls' commands since the last frame, in order.
    pub commands: Vec<Command>,
    /// Whether the run is training (Train pressed); a `StepOnce` command
    /// takes one step when it is not.
    pub running: bool,
    /// Training time of the frame (the CPU engine), and time for views
    /// computed in parts.
    pub budget_ms: f64,
    pub views_budget_ms: f64,
    /// Automatic checkpoints every this many steps (0: off), in the
    /// background or awaited.
    pub checkpoint_every: u64,
    pub checkpoint_background: bool,
    /// Ranks the learner asks for (workers sharing a sharded run's steps;
    /// `host::ranks`); 0 or 1: one.
    pub ranks: usize,
    /// The straggler lesson: extra passes of the last rank's work (0: off).
    pub straggler: u32,
}

/// What one frame did.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FrameReport {
    /// Each command's result, in order.
    pub outcomes: Vec<Result<Option<Outcome>, Error>>,
    /// Choosing the GPU's path after the commands failed.
    pub calibration: Option<Error>,
    /// The frame's steps, or why training stopped; None when it did not train.
    pub trained: Option<Result<Vec<StepMetrics>, Error>>,
    /// Steps that looked wrong against the recent ones (step, verdict); a
    /// loss spike ends the list and skips the frame's checkpoint.
    pub verdicts: Vec<(u64, Verdict)>,
    /// An automatic checkpoint awaited in this frame: its report.
    pub checkpoint: Option<Result<CheckpointReport, Error>>,
    /// The loop's wait for an automatic checkpoint (all of it when awaited,
    /// the queuing when in the background); 0 when none was due.
    pub checkpoint_ms: f64,
    /// The views, when a set was finished in this frame.
    pub views: Option<Result<Arc<Snapshot>, Error>>,
    /// Per-layer statistics at a step, when read in this frame.
    pub layers: Option<Result<(u64, LayerStats), Error>>,
    /// A conv net's feature maps and filters between the views, with the
    /// step they are of (`maps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maps: Option<(u64, crate::model::views::ConvViews)>,
    /// Time for views and statistics (the timeline's logging part).
    pub logging_ms: f64,
    /// Time awaiting the GPU (its readbacks and work): the thread was free.
    pub gpu_wait_ms: f64,
    /// The race, while one is under way or in the frame it ended.
    pub race: Option<RaceReport>,
    /// An uploaded CSV still being read: how far (its end is an outcome).
    pub csv_progress: Option<CsvProgress>,
    /// The frame's profiled steps (`profiler`), the time their bursts took
    /// beyond the steps' own phases, and what times the engine's phases
    /// (with its resolution, ms).
    pub profiles: Vec<PhaseProfile>,
    pub profiling_ms: f64,
    pub phase_clock: Option<(PhaseClock, f64)>,
    /// The whole frame on the engine's side, and its training part (ms,
    /// the engine's clock).
    pub frame_ms: f64,
    pub train_ms: f64,
    /// The GPU's timed passes of the steps collected in this frame (for
    /// the trace's GPU track; empty on the CPU and without timestamps).
    pub gpu_passes: Vec<stepscope_core::gpu::StepPass>,
    /// A transformer's last whole step on the CPU engine, by op kind and
    /// block, with that step's phases (one of this frame's steps).
    pub op_times: Option<OpStep>,
    /// An MLP's or conv net's last whole step on the CPU engine, layer by
    /// layer, with that step's metrics (one of this frame's steps): the
    /// layer table's sample (`engine::anatomy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_step: Option<(StepMetrics, stepscope_core::engine::LayerTimes)>,
    /// The page's wait for the report beyond `frame_ms`: the messages to
    /// and from the worker, their encoding and the worker's scheduling
    /// (set by `Host::frame`; 0 when the engine runs on the page).
    #[serde(skip)]
    pub messaging_ms: f64,
    /// The worker's training between the last request and this one
    /// (`ahead`), whose steps lead `trained`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ahead_ms: f64,
}

fn is_zero(ms: &f64) -> bool {
    *ms == 0.0
}

impl Runner {
    /// Runs one frame of the loop for `plan`.
    pub async fn frame(&mut self, plan: FramePlan) -> FrameReport {
        let frame_started = Instant::now();
        let mut report = FrameReport::default();
        let single = plan.commands.iter().any(|c| matches!(c, Command::StepOnce));
        self.checkpoint_every = plan.checkpoint_every;
        let had_commands = !plan.commands.is_empty();
        // Steps trained since the last report (`ahead`) come first.
        let ahead = self.take_ahead(&plan.commands);
        // A restored or rolled-back run waits for the page's next word.
        let mut replaced = false;
        for command in plan.commands {
            if matches!(command, Command::Reset(_) | Command::RestoreCheckpoint(_) | Command::Rollback(_)) {
                self.detector.clear();
            }
            let outcome = self.handle(command).await;
            replaced |=
                matches!(outcome, Ok(Some(Outcome::Restored(..) | Outcome::RolledBack(..) | Outcome::CsvLoaded(..))));
            report.outcomes.push(outcome);
            self.views_dirty = true;
        }
        // An upload arriving or being read takes the frame's training
        // time; the run waits, as it was, until the file is read whole.
        let mut reading = false;
        if let Some(read) = self.read_csv_part(plan.budget_ms).await {
            replaced |= matches!(read, Ok(Some(_)));
            report.outcomes.push(read);
            self.views_dirty = true;
        } else {
            reading = self.csv_job.is_some() || self.csv_upload.is_some();
        }
        report.csv_progress = self.reading_csv();
        if had_commands || replaced {
            // A rebuilt GPU engine takes its calibrated path (cached).
            report.calibration = self.calibrate().await.err();
        }
        let replaced = replaced || reading;
        let mut ahead_steps = Vec::new();
        let ahead_count = ahead.as_ref().map_or(0, |a| a.result.as_ref().map_or(0, Vec::len));
        if let Some(taken) = ahead {
            report.ahead_ms = taken.ms;
            match taken.result {
                Ok(steps) => ahead_steps = steps,
                // A step ahead failed (a NaN): the frame reports it and
                // trains no further.
                Err(err) => report.trained = Some(Err(err)),
            }
        }
        let trains = (plan.running || single) && !replaced && report.trained.is_none();
        if trains && self.racing() {
            // A race trains instead of the run (Train and Pause act on it).
            self.race_frame(single && !plan.running, plan.budget_ms, &mut report).await;
        } else if trains {
            let train_started = Instant::now();
            let (result, waited) = self.train_frame(single && !plan.running, plan.budget_ms).await;
            report.train_ms = ms_since(train_started);
            report.gpu_wait_ms += waited;
            self.views_dirty = true;
            report.trained = Some(result.map(|steps| {
                let mut all = std::mem::take(&mut ahead_steps);
                all.extend(steps);
                all
            }));
        }
        if !ahead_steps.is_empty() && report.trained.is_none() {
            report.trained = Some(Ok(ahead_steps));
        }
        let mut spiked = false;
        if let Some(Ok(metrics)) = &report.trained {
            for m in metrics {
                let verdict = self.detector.observe(m.loss, m.grad_norm);
                spiked |= matches!(verdict, Verdict::LossSpike(..));
                if verdict != Verdict::Normal {
                    report.verdicts.push((m.step, verdict));
                }
                if spiked {
                    break;
                }
            }
            if !spiked && self.checkpoint_due(plan.checkpoint_every) {
                let started = Instant::now();
                let awaited = self.auto_checkpoint(plan.checkpoint_background).await;
                report.checkpoint_ms = ms_since(started);
                report.gpu_wait_ms += report.checkpoint_ms;
                let loop_ms = report.checkpoint_ms;
                report.checkpoint = awaited.map(|r| r.map(|r| CheckpointReport { loop_ms, ..r }));
            }
        }
        // The worker goes on training while the page draws this report
        // (`ahead`), after a frame that trained the run and went well.
        let whole_steps = match &report.trained {
            Some(Ok(m)) if !m.is_empty() => m.len() - ahead_count,
            _ => 0,
        };
        let mean_step_ms = if whole_steps > 0 { report.train_ms / whole_steps as f64 } else { f64::INFINITY };
        self.allow_ahead(
            plan.running && !single && trains && !spiked && matches!(&report.trained, Some(Ok(m)) if !m.is_empty()),
            mean_step_ms,
        );
        // Logging: as the views' cost allows, or (lesson) after every frame
        // of exactly N steps, whole, at that step.
        let log_now = self.steps_per_log.is_some() && matches!(&report.trained, Some(Ok(m)) if !m.is_empty());
        if self.views_dirty && (log_now || self.views_due()) {
            let started = Instant::now();
            // A frame whose training was one long step (a sharded step is
            // taken whole) gives the views an eighth of that, so they keep
            // coming every few steps, not every hundred.
            let budget = plan.views_budget_ms.max(report.train_ms / VIEWS_SHARE_OF_TRAINING);
            let (views, waited) = self.views(budget, log_now).await;
            report.gpu_wait_ms += waited;
            match views {
                Ok(Some(snap)) => {
                    self.views_dirty = false;
                    self.last_views_at = Some(Instant::now());
                    report.views = Some(Ok(snap));
                }
                // Still being computed (a large network): next frame.
                Ok(None) => {}
                Err(err) => report.views = Some(Err(err)),
            }
            let step = self.step_count();
            let due = log_now || self.last_layers_at.is_none_or(|t| ms_since(t) >= LAYER_SAMPLE_MS);
            if due && self.last_layers_step != Some(step) {
                self.last_layers_at = Some(Instant::now());
                let wait = Instant::now();
                let stats = self.layer_stats().await;
                report.gpu_wait_ms += ms_since(wait);
                if stats.is_ok() {
                    self.last_layers_step = Some(step);
                }
                report.layers = Some(stats.map(|layers| (step, layers)));
            }
            report.logging_ms = ms_since(started);
        }
        // A conv net's maps: with finished views, of this step; else
        // between them, when due.
        let started = Instant::now();
        match report.views.as_mut() {
            Some(Ok(snap)) => self.refresh_maps_in(snap).await,
            _ => report.maps = self.live_maps().await,
        }
        report.logging_ms += ms_since(started);
        report.race = self.race_report();
        report.profiles = std::mem::take(&mut self.profiler.found);
        report.profiling_ms = std::mem::take(&mut self.profiler.extra_ms);
        report.phase_clock = Some(self.trainer.phase_clock());
        report.gpu_passes = self.trainer.take_gpu_passes();
        // The op times with the phases of the same step, from this frame.
        if let (Some(Ok(metrics)), Some((step, forward, backward))) = (&report.trained, self.trainer.op_times()) {
            if let Some(m) = metrics.iter().find(|m| m.step == step) {
                report.op_times = Some(OpStep { step, forward, backward, phases: m.phases });
            }
        }
        if let (Some(Ok(metrics)), Some((step, times))) = (&report.trained, self.trainer.layer_times()) {
            if let Some(m) = metrics.iter().find(|m| m.step == step) {
                report.layer_step = Some((m.clone(), times));
            }
        }
        report.frame_ms = ms_since(frame_started);
        report
    }

    /// Whether the views are due: while they are being computed in parts,
    /// at every frame; else at most every 50 ms, and less often when
    /// computing them is slow (4 times their cost apart), so that they
    /// take at most about a fifth of the engine's time.
    fn views_due(&self) -> bool {
        self.view_job.is_some()
            || self.last_views_at.is_none_or(|t| ms_since(t) >= (50.0f64).max(4.0 * self.snapshot_cost_ms))
    }
}
