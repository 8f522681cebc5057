//! The training loop that drives the engine (through `model::host`, in
//! the training worker or on the page) and
//! feeds the page's signals: each animation frame, commands, training,
//! spike checks, automatic checkpoints, then the views.

use leptos::prelude::*;
use leptos::task::spawn_local;

use stepscope_core::Experiment;
use web_time::Instant;

use super::engine::Chooser;
use super::records::FrameParts;
use super::report::{ms, Spread};
use super::AppState;
use crate::model::checkpoints::{load_autosave, Autosave};
use crate::model::edit::{default_experiment, needs_reset};
use crate::model::host::protocol::Start;
use crate::model::host::Host;
use crate::model::runner::{next_frame, Command, FramePlan};
use crate::model::url;

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
            // The report's heavy parts are shown a task apiece (`Spread`).
            let mut spread = Spread::new(clears);
            let due = |drawn: Option<Instant>| {
                !running || drawn.is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= super::TIMELINE_REDRAW_MS)
            };
            if let Some(ops) = report.op_times.take().filter(|_| !stale) {
                if due(ops_drawn) && spread.turn(&self).await {
                    ops_drawn = Some(Instant::now());
                    self.charts.op_times.set(Some(ops));
                }
            }
            if let Some((metrics, times)) = report.layer_step.take().filter(|_| !stale) {
                self.charts.layer_anatomy.update_value(|a| a.add(&metrics, Some(&(metrics.step, times))));
                if due(layers_drawn) && spread.turn(&self).await {
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
            let (frame_metrics, recovery_ms) =
                self.draw_frame(report, stale, &mut host, &mut recoveries, &mut spread).await;
            let idle = !running && !had_commands && frame_metrics.is_empty() && !mid_step && !failed;
            awaited_ms += recovery_ms;
            // Cleared while the parts were shown: the steps are the old run's.
            let stale = stale || !spread.current(&self);
            let wall_ms = ms(frame_start);
            let frame = FrameParts { wall_ms, page_ms: wall_ms - call_ms, ..parts };
            if !frame_metrics.is_empty() && !stale {
                // A step taken over several frames (a long one yields
                // part-way) had all of them: its wall time is theirs.
                let frame = match unfinished.take() {
                    Some(before) => before.plus(frame),
                    None => frame,
                };
                if spread.turn(&self).await {
                    self.record_timeline(&frame_metrics, &frame);
                }
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
                // The waits between the report's parts too (`Spread`).
                let busy = (ms(frame_start) - awaited_ms - spread.waited_ms).max(0.0);
                self.run.frame_busy_ms.update(|(last, worst)| {
                    *last = busy;
                    *worst = worst.max(busy);
                });
            }
        }
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
