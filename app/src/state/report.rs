//! What a frame's report shows: the commands' outcomes, the steps (a NaN
//! or a GPU error pauses, a lost device is re-created), spikes,
//! checkpoints, views and per-layer statistics; and `Spread`, which
//! shows a report's heavy parts a task apiece.

use leptos::prelude::*;

use stepscope_core::{Error, StepMetrics};
use web_time::Instant;

use super::{AppState, LayerSample, PROFILE_LIMIT};
use crate::model::checkpoints::CheckpointReport;
use crate::model::host::Host;
use crate::model::runner::{yield_now, FrameReport};
use crate::model::spikes::{Verdict, SMOOTH, WINDOW};
use crate::model::words::{count, value};

/// Device re-creations allowed within a minute before the page stops trying.
const MAX_RECOVERIES: usize = 2;

/// A report's heavy parts (the op breakdown, the layer table, the views,
/// the per-layer statistics) each make or remake many elements. Shown in
/// the one task the worker's answer arrived in, the first report after
/// Train blocked the page for 50-80 ms (a profile of the MNIST conv net);
/// so each part after the first waits for a task of its own, in which the
/// effects of the one before have run. A part whose run was cleared while
/// it waited (a reset pressed meanwhile) is not shown: it belongs to the
/// run that was cleared.
pub(super) struct Spread {
    clears: u64,
    shown: bool,
    /// Time spent waiting for the tasks, in which the page is free.
    pub(super) waited_ms: f64,
}

impl Spread {
    /// For a report of the run whose clear count is `clears`.
    pub(super) fn new(clears: u64) -> Spread {
        Spread { clears, shown: false, waited_ms: 0.0 }
    }

    /// Waits for a task of its own when a part was shown in this one;
    /// whether the part may be shown (its run was not cleared).
    pub(super) async fn turn(&mut self, state: &AppState) -> bool {
        if std::mem::replace(&mut self.shown, true) {
            let t = Instant::now();
            yield_now().await;
            self.waited_ms += ms(t);
        }
        self.current(state)
    }

    /// Whether the run the report is of is still the page's.
    pub(super) fn current(&self, state: &AppState) -> bool {
        state.run.clears.get_value() == self.clears
    }
}

impl AppState {
    /// Shows what a frame did: the commands' outcomes, the steps (a NaN or
    /// a GPU error pauses, a lost device is re-created), spikes,
    /// checkpoints, views and per-layer statistics. Returns the frame's
    /// steps and the ms spent awaiting a device re-creation. A `stale`
    /// frame (the page cleared the run while it ran) shows its outcomes
    /// and checkpoints but none of its steps, views or step count.
    pub(super) async fn draw_frame(
        &self,
        mut report: FrameReport,
        stale: bool,
        host: &mut Host,
        recoveries: &mut Vec<Instant>,
        spread: &mut Spread,
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
            report.maps = None;
            report.layers = None;
            report.profiles.clear();
        }
        if report.phase_clock.is_some() && report.phase_clock != self.charts.phase_clock.get_untracked() {
            self.charts.phase_clock.set(report.phase_clock);
        }
        if !report.profiles.is_empty() && spread.turn(self).await {
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
        let memory = host.memory();
        if memory != self.run.memory.get_untracked() && spread.turn(self).await {
            self.run.memory.set(memory);
        }
        match report.views {
            Some(Ok(snap)) => {
                if spread.turn(self).await {
                    self.record_history(&snap);
                    self.charts.snapshot.set(Some(snap));
                }
            }
            // Never over a message already shown: after a GPU error the
            // views fail too, and the message that says what happened and
            // what to do must stay.
            Some(Err(err)) if self.run.alert.get_untracked().is_none() => self.run.alert.set(Some(err.to_string())),
            Some(Err(_)) | None => {}
        }
        // A conv net's maps between the views replace those shown (the
        // views' other parts stay as they were).
        if let Some((_, conv)) = report.maps {
            if self.charts.snapshot.with_untracked(|s| s.as_ref().is_some_and(|s| s.images.is_some()))
                && spread.turn(self).await
            {
                self.charts.snapshot.update(|s| {
                    if let Some(images) = s.as_mut().and_then(|s| std::sync::Arc::make_mut(s).images.as_mut()) {
                        images.conv = Some(conv);
                    }
                });
            }
        }
        match report.layers {
            Some(Ok((step, layers)))
                if self.charts.layer_history.with_untracked(|h| h.last().is_none_or(|s| s.step != step)) =>
            {
                if spread.turn(self).await {
                    self.record_layers(LayerSample { step, layers })
                }
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
}

/// Milliseconds since `since`.
pub(super) fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
