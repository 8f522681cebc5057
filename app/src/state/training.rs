//! The training loop that drives the engine (through `model::host`, in
//! the training worker or on the page) and
//! feeds the page's signals: each animation frame, commands, training,
//! spike checks, automatic checkpoints, then the views.

use leptos::prelude::*;
use leptos::task::spawn_local;

use stepscope_core::{Error, Experiment, StepMetrics};
use web_time::Instant;

use super::engine::Chooser;
use super::records::FrameParts;
use super::{AppState, LayerSample, PROFILE_LIMIT};
use crate::model::checkpoints::{load_autosave, Autosave, CheckpointReport};
use crate::model::edit::{default_experiment, needs_reset};
use crate::model::host::protocol::Start;
use crate::model::host::Host;
use crate::model::runner::{next_frame, Command, FramePlan, FrameReport};
use crate::model::spikes::{Verdict, SMOOTH, WINDOW};
use crate::model::url;
use crate::model::words::{count, value};

/// Device re-creations allowed within a minute before the page stops trying.
const MAX_RECOVERIES: usize = 2;

impl AppState {
    /// Starts the loop that owns the engine (see `model::host`).
    pub fn start_training_loop(self) {
        spawn_local(async move { self.training_loop().await });
    }

    async fn training_loop(self) {
        // Training starts on the CPU engine at once; the GPU device is
        // created meanwhile and the engines are raced (state::engine).
        let mut chooser = Chooser::default();
        let experiment = self.run.experiment.get_untracked();
        url::write_url(&experiment);
        let start = |experiment: &Experiment| Start {
            experiment: experiment.clone(),
            checkpoint: None,
            csv: None,
            fused_allowed: url::fused_allowed(),
        };
        let restored = match self.autosaved_run(&experiment).await {
            Some(saved) => {
                let (saved_experiment, step, with_csv) = (saved.experiment, saved.step, saved.csv.is_some());
                let checkpoint = Some(saved.bytes);
                match Host::start(Start { checkpoint, csv: saved.csv, ..start(&experiment) }).await {
                    Ok(host) => {
                        self.restored(&saved_experiment, step, with_csv, &experiment);
                        Some(host)
                    }
                    Err(message) => {
                        self.run.alert.set(Some(format!("The autosaved run was not restored: {message}")));
                        None
                    }
                }
            }
            None => None,
        };
        let mut host = match restored {
            Some(host) => host,
            None => match Host::start(start(&experiment)).await {
                Ok(host) => host,
                Err(_) if experiment.data.source == stepscope_core::experiment::DataSource::Text => {
                    // A link carries the experiment, not the text it trained on.
                    self.run.alert.set(Some(
                        "This link's transformer trained on an uploaded text, which a link does not carry: \
                         upload the text again (Your text). Meanwhile the same model trains on Tiny Shakespeare."
                            .into(),
                    ));
                    let mut e = experiment.clone();
                    e.data.source = stepscope_core::experiment::DataSource::Shakespeare;
                    if let Some(g) = e.model.gpt.as_mut() {
                        g.vocab_size = 65;
                    }
                    let e = if e.validate().is_ok() { e } else { default_experiment() };
                    self.run.experiment.set(e.clone());
                    url::write_url(&e);
                    Host::start(start(&e)).await.expect("the transformer on Tiny Shakespeare builds")
                }
                Err(message) => {
                    self.run.alert.set(Some(format!("{message}. Showing the default experiment.")));
                    let e = default_experiment();
                    self.run.experiment.set(e.clone());
                    url::write_url(&e);
                    Host::start(start(&e)).await.expect("the default experiment always builds")
                }
            },
        };
        if let Some(why) = host.fallback.clone() {
            self.run.notice.set(Some(why));
        }
        self.run.in_worker.set(host.in_worker());
        let mut was_running = false;
        // Steps and the time since the steps-per-second figure was last set.
        let mut rate_window = (Instant::now(), 0usize);
        // When the GPU device was last re-created: a device lost again soon
        // after is not re-created in a loop.
        let mut recoveries: Vec<Instant> = Vec::new();
        // The op breakdown is redrawn as often as the timeline.
        let mut ops_drawn: Option<Instant> = None;
        let mut layers_drawn: Option<Instant> = None;
        // The frames of a step still under way (CPU, a long step).
        let mut unfinished: Option<FrameParts> = None;
        loop {
            next_frame().await;
            let frame_start = Instant::now();
            let t = Instant::now();
            self.choose_engine(&mut host, &mut chooser).await;
            let mut awaited_ms = ms(t);
            let commands: Vec<Command> =
                self.run.commands.get_value().lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
            let had_commands = !commands.is_empty();
            let running = self.run.running.get_untracked();
            if running && !was_running {
                self.run.frame_busy_ms.set((0.0, 0.0));
            }
            was_running = running;
            // The frame itself runs on the engine's side (`Runner::frame`);
            // the page draws its report.
            let plan = FramePlan {
                commands,
                running,
                checkpoint_every: self.checkpoints.checkpoint_every.get_untracked(),
                checkpoint_background: self.checkpoints.checkpoint_background.get_untracked(),
                ranks: self.run.ranks_asked.get_untracked(),
                straggler: self.run.straggler.get_untracked(),
                ..FramePlan::default()
            };
            let clears = self.run.clears.get_value();
            let call = Instant::now();
            let (mut report, free_ms) = host.frame(plan).await;
            let call_ms = ms(call);
            let loaders = host.status().loaders.clone();
            if loaders != self.run.loaders.get_untracked() {
                self.run.loaders.set(loaders);
            }
            let ranks = host.status().ranks.clone();
            if let Some(notice) = &ranks.notice {
                self.run.notice.set(Some(notice.clone()));
            }
            if ranks != self.run.ranks.get_untracked() {
                self.run.ranks.set(ranks);
            }
            awaited_ms += free_ms;
            let parts = FrameParts {
                wall_ms: 0.0,
                checkpoint_ms: report.checkpoint_ms,
                logging_ms: report.logging_ms,
                profiling_ms: report.profiling_ms,
                // With the steps the worker trained while the page drew.
                engine_frame_ms: report.frame_ms + report.ahead_ms,
                messaging_ms: report.messaging_ms,
                page_ms: 0.0,
            };
            // Cleared while the frame ran (a reset pressed meanwhile): its
            // steps belong to the run that was cleared, and the next
            // frame, which carries the reset, reports the fresh run.
            let stale = self.run.clears.get_value() != clears;
            let passes = std::mem::take(&mut report.gpu_passes);
            if let Some(ops) = report.op_times.take().filter(|_| !stale) {
                if !running || ops_drawn.is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= super::TIMELINE_REDRAW_MS) {
                    ops_drawn = Some(Instant::now());
                    self.charts.op_times.set(Some(ops));
                }
            }
            if let Some((metrics, times)) = report.layer_step.take().filter(|_| !stale) {
                self.charts.layer_anatomy.update_value(|a| a.add(&metrics, Some(&(metrics.step, times))));
                if !running || layers_drawn.is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= super::TIMELINE_REDRAW_MS)
                {
                    layers_drawn = Some(Instant::now());
                    let checkpointing = self.lessons.activation_checkpointing.get_untracked();
                    let table = self
                        .run
                        .experiment
                        .with_untracked(|e| self.charts.layer_anatomy.with_value(|a| a.table(e, checkpointing)));
                    self.charts.layer_table.set(table);
                }
            }
            let mid_step = matches!(&report.trained, Some(Ok(m)) if m.is_empty());
            let failed = matches!(&report.trained, Some(Err(_)));
            let (frame_metrics, recovery_ms) = self.draw_frame(report, stale, &mut host, &mut recoveries).await;
            let idle = !running && !had_commands && frame_metrics.is_empty() && !mid_step && !failed;
            awaited_ms += recovery_ms;
            let wall_ms = ms(frame_start);
            let frame = FrameParts { wall_ms, page_ms: wall_ms - call_ms, ..parts };
            if !frame_metrics.is_empty() {
                // A step taken over several frames (a long one yields
                // part-way) had all of them: its wall time is theirs.
                let frame = match unfinished.take() {
                    Some(before) => before.plus(frame),
                    None => frame,
                };
                self.record_timeline(&frame_metrics, &frame);
            } else if mid_step && !stale {
                unfinished = Some(match unfinished.take() {
                    Some(before) => before.plus(frame),
                    None => frame,
                });
            } else if stale || failed {
                // Cleared, or the step was abandoned.
                unfinished = None;
            }
            if !stale && !passes.is_empty() {
                // After the steps' rows: the GPU's passes of each, for the trace.
                self.charts.metrics_log.update_value(|log| log.record_gpu_passes(&passes));
            }
            self.run
                .at_rest
                .set(idle && !self.commands_pending() && !self.checkpoints.checkpoint_in_flight.get_untracked());
            if !running {
                // Paused: the last steps' timeline at once.
                self.draw_timeline(true);
            }
            rate_window.1 += frame_metrics.len();
            let window_ms = ms(rate_window.0);
            if !running {
                rate_window = (Instant::now(), 0);
            } else if window_ms >= 500.0 && (rate_window.1 > 0 || window_ms >= 30_000.0) {
                // At least half a second, and until a step lands: a step
                // longer than the window (a large transformer's takes
                // seconds) would otherwise read 0 between steps.
                self.run.steps_per_second.set(rate_window.1 as f64 * 1e3 / window_ms);
                rate_window = (Instant::now(), 0);
            }
            if running {
                // Awaited time includes the worker's frame, GPU readbacks
                // and the device's own work, during which the page is
                // free; the rest blocked it.
                let busy = (ms(frame_start) - awaited_ms).max(0.0);
                self.run.frame_busy_ms.update(|(last, worst)| {
                    *last = busy;
                    *worst = worst.max(busy);
                });
            }
        }
    }

    /// Shows what a frame did: the commands' outcomes, the steps (a NaN or
    /// a GPU error pauses, a lost device is re-created), spikes,
    /// checkpoints, views and per-layer statistics. Returns the frame's
    /// steps and the ms spent awaiting a device re-creation. A `stale`
    /// frame (the page cleared the run while it ran) shows its outcomes
    /// and checkpoints but none of its steps, views or step count.
    async fn draw_frame(
        &self,
        mut report: FrameReport,
        stale: bool,
        host: &mut Host,
        recoveries: &mut Vec<Instant>,
    ) -> (Vec<StepMetrics>, f64) {
        let mut awaited_ms = 0.0;
        // An upload's reading ends with an outcome (loaded, or why not).
        if report.csv_progress.is_some() || self.run.csv_reading.get_untracked().is_some() {
            self.run.csv_reading.set(report.csv_progress.clone());
        }
        for outcome in report.outcomes {
            match outcome {
                Ok(Some(outcome)) => self.outcome(outcome),
                Ok(None) => {}
                Err(err) => self.run.alert.set(Some(err.to_string())),
            }
        }
        if let Some(err) = report.calibration {
            if self.run.alert.get_untracked().is_none() {
                self.run.alert.set(Some(err.to_string()));
            }
        }
        if stale {
            if let Some(Ok(_)) = report.trained {
                report.trained = None;
            }
            report.views = None;
            report.layers = None;
            report.profiles.clear();
        }
        if report.phase_clock.is_some() && report.phase_clock != self.charts.phase_clock.get_untracked() {
            self.charts.phase_clock.set(report.phase_clock);
        }
        if !report.profiles.is_empty() {
            self.charts.profiles.update(|p| {
                p.append(&mut report.profiles);
                let excess = p.len().saturating_sub(PROFILE_LIMIT);
                p.drain(..excess);
            });
        }
        let mut frame_metrics = Vec::new();
        match report.trained {
            None => {}
            Some(Ok(metrics)) => {
                if let Some(last) = metrics.last() {
                    self.run.last_metrics.set(Some(last.clone()));
                }
                self.run.steps_per_frame.set(metrics.len());
                self.judge(&report.verdicts);
                frame_metrics = metrics;
            }
            Some(Err(Error::NonFinite(message))) => {
                self.run.running.set(false);
                self.run.alert.set(Some(format!(
                    "Training paused: {message}. Go back to the last good checkpoint, or lower the learning rate (or turn on clipping) and press reset."
                )));
                self.checkpoints.rollback_offer.set(Some(host.step_count() + 1));
            }
            Some(Err(Error::Gpu(message))) => {
                // Only a lost device is re-created, at most MAX_RECOVERIES
                // times a minute. Any other GPU error (validation, out of
                // memory) pauses the run, which stays as it was before the
                // failed submit.
                recoveries.retain(|t| t.elapsed().as_secs_f64() < 60.0);
                // The lost callback may come after the error that the loss
                // caused; wgpu names the loss in it.
                let lost = host.gpu_lost() || message.contains("lost");
                if lost && recoveries.len() < MAX_RECOVERIES {
                    recoveries.push(Instant::now());
                    self.run.alert.set(Some(format!("GPU error: {message}")));
                    let t = Instant::now();
                    let recovered = host.recover_device().await;
                    awaited_ms += ms(t);
                    match recovered {
                        Ok(notice) => self.run.notice.set(Some(notice)),
                        Err(message) => {
                            self.run.running.set(false);
                            self.run.alert.set(Some(message.to_string()));
                        }
                    }
                } else {
                    self.run.running.set(false);
                    let why = if lost {
                        format!("the GPU device was lost {} times within a minute", MAX_RECOVERIES + 1)
                    } else {
                        "the GPU refused the work".to_string()
                    };
                    self.run.alert.set(Some(format!(
                        "GPU error: {message}. Training paused ({why}); choose the CPU engine to go on without the GPU."
                    )));
                }
            }
            Some(Err(other)) => {
                self.run.running.set(false);
                self.run.alert.set(Some(other.to_string()));
            }
        }
        match report.checkpoint {
            Some(awaited) => self.report_checkpoint(awaited),
            None if report.checkpoint_ms > 0.0 => self.checkpoints.background_loop_ms.set_value(report.checkpoint_ms),
            None => {}
        }
        self.report_finished_checkpoints(host);
        if !stale {
            self.run.step.set(host.step_count());
        }
        self.run.memory.set(host.memory());
        match report.views {
            Some(Ok(snap)) => {
                self.record_history(&snap);
                self.charts.snapshot.set(Some(snap));
            }
            // Never over a message already shown: after a GPU error the
            // views fail too, and the message that says what happened and
            // what to do must stay.
            Some(Err(err)) if self.run.alert.get_untracked().is_none() => self.run.alert.set(Some(err.to_string())),
            Some(Err(_)) | None => {}
        }
        match report.layers {
            Some(Ok((step, layers)))
                if self.charts.layer_history.with_untracked(|h| h.last().is_none_or(|s| s.step != step)) =>
            {
                self.record_layers(LayerSample { step, layers })
            }
            Some(Err(err)) => self.run.alert.set(Some(err.to_string())),
            Some(Ok(_)) | None => {}
        }
        self.record_runs(host.status(), report.race);
        (frame_metrics, awaited_ms)
    }

    /// Shows the loss spikes and gradient-norm jumps the engine's side
    /// found in a frame's steps. A spike is a warning that offers the last
    /// good checkpoint; it pauses training only when the user asked for
    /// that (ordinary AdamW noise can look like a spike, and a healthy run
    /// must never stop on its own).
    fn judge(&self, verdicts: &[(u64, Verdict)]) {
        for (step, verdict) in verdicts {
            match *verdict {
                Verdict::Normal => {}
                Verdict::GradJump(norm, median) => self.run.notice.set(Some(format!(
                    "The gradient norm jumped to {} at step {} (median {} over the last {WINDOW} steps): the loss often follows.",
                    value(norm as f64, 3),
                    count(step + 1),
                    value(median as f64, 3)
                ))),
                Verdict::LossSpike(loss, median, norm, norm_median) => {
                    let pause = self.run.pause_on_spike.get_untracked();
                    let message = format!(
                        "Loss spike at step {}: the loss averaged over the last {SMOOTH} steps is {}, against a median of {} over the {WINDOW} steps before (gradient norm {}, median {}).",
                        step + 1,
                        value(loss as f64, 4),
                        value(median as f64, 4),
                        value(norm as f64, 3),
                        value(norm_median as f64, 3)
                    );
                    self.checkpoints.rollback_offer.set(Some(step + 1));
                    if pause {
                        self.run.running.set(false);
                        self.run.alert.set(Some(format!("{message} Training paused.")));
                    } else {
                        self.run.spike_warning.set(Some(format!("{message} Training goes on.")));
                    }
                }
            }
        }
    }

    /// Reports the background checkpoints that finished.
    fn report_finished_checkpoints(&self, host: &mut Host) {
        let loop_ms = self.checkpoints.background_loop_ms.get_value();
        for report in host.take_finished_checkpoints() {
            self.report_checkpoint(report.map(|r| CheckpointReport { loop_ms, ..r }));
        }
        self.checkpoints.checkpoint_in_flight.set(host.status().checkpoint_in_flight);
    }

    /// Shows what a checkpoint cost; a failure (or a store that refused
    /// it) is also a warning in the alert, once until checkpoints succeed
    /// again.
    fn report_checkpoint(&self, report: Result<CheckpointReport, Error>) {
        let report = report.map_err(|err| err.to_string());
        let problem = match &report {
            Err(message) => Some(format!("Automatic checkpoint failed: {message}")),
            Ok(r) => r.stored.as_ref().err().map(|m| format!("Automatic checkpoints stay in memory only: {m}")),
        };
        let was_fine = self.checkpoints.last_checkpoint.with_untracked(|l| match l {
            Some(Ok(r)) => r.stored.is_ok(),
            Some(Err(_)) => false,
            None => true,
        });
        if let (Some(message), true) = (problem, was_fine) {
            self.run.alert.set(Some(message));
        }
        self.checkpoints.last_checkpoint.set(Some(report));
    }

    /// The run autosaved in this browser, when it fits the page's
    /// experiment (the same model, data and seed; the URL's
    /// hyperparameters then apply), and its CSV.
    async fn autosaved_run(&self, experiment: &Experiment) -> Option<Autosave> {
        let saved = match load_autosave().await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(message) => {
                self.run.alert.set(Some(format!("The autosaved run was not restored: {message}")));
                return None;
            }
        };
        let explicit = matches!(url::experiment_from_url(), Ok(Some(_)));
        if explicit && needs_reset(&saved.experiment, experiment) {
            return None;
        }
        Some(saved)
    }

    /// The page after the autosaved run (`saved`, at `step`) was restored:
    /// the URL's hyperparameters apply to it, or its experiment becomes the
    /// page's.
    fn restored(&self, saved: &Experiment, step: u64, with_csv: bool, experiment: &Experiment) {
        let explicit = matches!(url::experiment_from_url(), Ok(Some(_)));
        if explicit && saved != experiment {
            self.command(Command::Apply(experiment.clone()));
        } else {
            self.run.experiment.set(saved.clone());
            url::write_url(saved);
        }
        if with_csv {
            self.run.csv_name.set(Some("the autosaved CSV".into()));
        }
        self.run.step.set(step);
        self.run
            .notice
            .set(Some(format!("Restored the run autosaved in this browser at step {step}. Reset starts over.")));
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
