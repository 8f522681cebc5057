//! The training loop that drives the engine (through `model::host`, in
//! the training worker or on the page) and
//! feeds the page's signals: each animation frame, commands, training,
//! spike checks, automatic checkpoints, then the views.

use leptos::prelude::*;
use leptos::task::spawn_local;
use std::sync::Arc;

use stepscope_core::checkpoint::save_checkpoint;
use stepscope_core::{Error, Experiment, StepMetrics, TrainState};
use web_time::Instant;

use super::engine::Chooser;
use super::{AppState, LayerSample, LAYER_SAMPLE_MS};
use crate::model::checkpoints::{load_autosave, CheckpointReport};
use crate::model::edit::{default_experiment, needs_reset};
use crate::model::host::protocol::Start;
use crate::model::host::Host;
use crate::model::runner::{next_frame, Command};
use crate::model::spikes::{Detector, Verdict, SMOOTH, WINDOW};
use crate::model::url;

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
            Some((state, csv)) => {
                let checkpoint = save_checkpoint(&state).ok();
                match Host::start(Start { checkpoint, csv: csv.clone(), ..start(&experiment) }).await {
                    Ok(host) => {
                        self.restored(&state, csv.is_some(), &experiment);
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
        let mut dirty = true;
        let mut was_running = false;
        let mut last_layer_sample: Option<Instant> = None;
        let mut detector = Detector::default();
        // Steps and the time since the steps-per-second figure was last set.
        let mut rate_window = (Instant::now(), 0usize);
        // When the GPU device was last re-created: a device lost again soon
        // after is not re-created in a loop.
        let mut recoveries: Vec<Instant> = Vec::new();
        loop {
            next_frame().await;
            let frame_start = Instant::now();
            let mut awaited_ms = 0.0;
            let commands: Vec<Command> =
                self.run.commands.get_value().lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
            let mut single = false;
            let had_commands = !commands.is_empty();
            for command in commands {
                single |= matches!(command, Command::StepOnce);
                if matches!(
                    command,
                    Command::Reset(_) | Command::UseCsv(..) | Command::RestoreCheckpoint(_) | Command::Rollback(_)
                ) {
                    detector.clear();
                }
                let t = Instant::now();
                let handled = host.handle(command).await;
                awaited_ms += ms(t);
                match handled {
                    Ok(Some(outcome)) => self.outcome(outcome),
                    Ok(None) => {}
                    Err(message) => self.run.alert.set(Some(message.to_string())),
                }
                dirty = true;
            }
            if had_commands {
                // A rebuilt GPU engine takes its calibrated path (cached).
                if let Err(message) = host.calibrate().await {
                    if self.run.alert.get_untracked().is_none() {
                        self.run.alert.set(Some(message.to_string()));
                    }
                }
            }
            let t = Instant::now();
            self.choose_engine(&mut host, &mut chooser).await;
            awaited_ms += ms(t);
            let running = self.run.running.get_untracked();
            if running && !was_running {
                self.run.frame_busy_ms.set((0.0, 0.0));
            }
            was_running = running;
            let mut frame_metrics = Vec::new();
            let (mut checkpoint_ms, mut logging_ms) = (0.0, 0.0);
            if running || single {
                let (result, gpu_wait_ms) = host.train_frame(single && !running).await;
                awaited_ms += gpu_wait_ms;
                match result {
                    Ok(metrics) => {
                        frame_metrics = metrics.clone();
                        if let Some(last) = metrics.last() {
                            self.run.last_metrics.set(Some(last.clone()));
                        }
                        self.run.steps_per_frame.set(metrics.len());
                        dirty = true;
                        let spiked = self.judge(&mut detector, &metrics);
                        if !spiked && host.checkpoint_due(self.checkpoints.checkpoint_every.get_untracked()) {
                            checkpoint_ms = self.checkpoint(&mut host).await;
                            awaited_ms += checkpoint_ms;
                        }
                    }
                    Err(Error::NonFinite(message)) => {
                        self.run.running.set(false);
                        self.run.alert.set(Some(format!(
                            "Training paused: {message}. Go back to the last good checkpoint, or lower the learning rate (or turn on clipping) and press reset."
                        )));
                        self.checkpoints.rollback_offer.set(Some(host.step_count() + 1));
                        dirty = true;
                    }
                    Err(Error::Gpu(message)) => {
                        // Only a lost device is re-created, at most
                        // MAX_RECOVERIES times a minute. Any other GPU error
                        // (validation, out of memory) pauses the run, which
                        // stays as it was before the failed submit.
                        recoveries.retain(|t| t.elapsed().as_secs_f64() < 60.0);
                        // The lost callback may come after the error that
                        // the loss caused; wgpu names the loss in it.
                        let lost = host.gpu_lost() || message.contains("lost");
                        if lost && recoveries.len() < MAX_RECOVERIES {
                            recoveries.push(Instant::now());
                            self.run.alert.set(Some(format!("GPU error: {message}")));
                            match host.recover_device().await {
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
                        dirty = true;
                    }
                    Err(other) => {
                        self.run.running.set(false);
                        self.run.alert.set(Some(other.to_string()));
                    }
                }
            }
            self.report_finished_checkpoints(&mut host);
            self.run.step.set(host.step_count());
            self.run.memory.set(host.memory());
            // Logging: as the frame budget allows, or (lesson) after every
            // frame of exactly N steps.
            let log_now = host.steps_per_log().is_some() && !frame_metrics.is_empty();
            if dirty && (log_now || host.snapshot_due()) {
                let t = Instant::now();
                // A lesson's log takes the views whole, at its step.
                let (snapshot, read_ms) = host.snapshot(log_now).await;
                awaited_ms += read_ms;
                match snapshot {
                    // Still being computed (a large network): next frame.
                    Ok(None) => {}
                    Ok(Some(snap)) => {
                        self.record_history(&snap);
                        self.charts.snapshot.set(Some(snap));
                        dirty = false;
                    }
                    // Never over a message already shown: after a GPU error
                    // the snapshot fails too, and the message that says what
                    // happened and what to do must stay.
                    Err(err) => {
                        if self.run.alert.get_untracked().is_none() {
                            self.run.alert.set(Some(err.to_string()));
                        }
                    }
                }
                let step = host.step_count();
                let due = log_now || last_layer_sample.is_none_or(|t: Instant| ms(t) >= LAYER_SAMPLE_MS);
                if due && self.charts.layer_history.with_untracked(|h| h.last().is_none_or(|s| s.step != step)) {
                    let t = Instant::now();
                    last_layer_sample = Some(t);
                    let stats = host.layer_stats().await;
                    awaited_ms += ms(t);
                    match stats {
                        Ok(layers) => self.record_layers(LayerSample { step, layers }),
                        Err(err) => self.run.alert.set(Some(err.to_string())),
                    }
                }
                logging_ms = ms(t);
            }
            if !frame_metrics.is_empty() {
                self.record_timeline(&frame_metrics, ms(frame_start), checkpoint_ms, logging_ms);
            }
            rate_window.1 += frame_metrics.len();
            let window_ms = ms(rate_window.0);
            if !running {
                rate_window = (Instant::now(), 0);
            } else if window_ms >= 500.0 {
                self.run.steps_per_second.set(rate_window.1 as f64 * 1e3 / window_ms);
                rate_window = (Instant::now(), 0);
            }
            if running {
                // Awaited time includes GPU readbacks and the device's own
                // work, during which the page is free; the rest blocked it.
                let busy = (ms(frame_start) - awaited_ms).max(0.0);
                self.run.frame_busy_ms.update(|(last, worst)| {
                    *last = busy;
                    *worst = worst.max(busy);
                });
            }
        }
    }

    /// Looks for loss spikes and gradient-norm jumps in a frame's steps;
    /// on a spike, pauses and offers the last good checkpoint. Returns
    /// whether a step spiked.
    fn judge(&self, detector: &mut Detector, metrics: &[StepMetrics]) -> bool {
        for m in metrics {
            match detector.observe(m.loss, m.grad_norm) {
                Verdict::Normal => {}
                Verdict::GradJump(norm, median) => self.run.notice.set(Some(format!(
                    "The gradient norm jumped to {norm:.3} at step {} (median {median:.3} over the last {WINDOW} steps): the loss often follows.",
                    m.step + 1
                ))),
                Verdict::LossSpike(loss, median, norm, norm_median) => {
                    self.run.running.set(false);
                    self.run.alert.set(Some(format!(
                        "Loss spike at step {}: the loss averaged over the last {SMOOTH} steps is {loss:.4}, against a median of {median:.4} over the {WINDOW} steps before (gradient norm {norm:.3}, median {norm_median:.3}). Training paused.",
                        m.step + 1
                    )));
                    self.checkpoints.rollback_offer.set(Some(m.step + 1));
                    return true;
                }
            }
        }
        false
    }

    /// Takes an automatic checkpoint on the engine's side; returns the
    /// milliseconds the loop waited for it (all of it when synchronous, the
    /// queuing when in the background; its report comes with a later
    /// reply, `report_finished_checkpoints`).
    async fn checkpoint(&self, host: &mut Host) -> f64 {
        let started = Instant::now();
        let background = self.checkpoints.checkpoint_background.get_untracked();
        // One background checkpoint at a time (`host::server`).
        if background && self.checkpoints.checkpoint_in_flight.get_untracked() {
            return 0.0;
        }
        let report = host.checkpoint(background).await;
        let loop_ms = ms(started);
        match report {
            Some(report) => self.report_checkpoint(report.map(|r| CheckpointReport { loop_ms, ..r })),
            None => self.checkpoints.background_loop_ms.set_value(loop_ms),
        }
        self.checkpoints.checkpoint_in_flight.set(host.status().checkpoint_in_flight);
        loop_ms
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
    async fn autosaved_run(&self, experiment: &Experiment) -> Option<(TrainState, Option<Arc<String>>)> {
        let (state, csv) = match load_autosave().await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(message) => {
                self.run.alert.set(Some(format!("The autosaved run was not restored: {message}")));
                return None;
            }
        };
        let explicit = matches!(url::experiment_from_url(), Ok(Some(_)));
        if explicit && needs_reset(&state.experiment, experiment) {
            return None;
        }
        Some((state, csv))
    }

    /// The page after the autosaved `state` was restored: the URL's
    /// hyperparameters apply to it, or its experiment becomes the page's.
    fn restored(&self, state: &TrainState, with_csv: bool, experiment: &Experiment) {
        let explicit = matches!(url::experiment_from_url(), Ok(Some(_)));
        let step = state.step();
        if explicit && state.experiment != *experiment {
            self.command(Command::Apply(experiment.clone()));
        } else {
            self.run.experiment.set(state.experiment.clone());
            url::write_url(&state.experiment);
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
