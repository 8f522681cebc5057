//! What the loop records for the views: the timeline, the curves, the
//! per-layer samples, and what commands produced.

use std::sync::Arc;

use leptos::prelude::*;
use stepscope_core::engine::profile::clock_resolution_ms;
use stepscope_core::engine::Timing;
use stepscope_core::StepMetrics;

use super::{
    AppState, HistoryPoint, LayerSample, StepPoint, HISTORY_LIMIT, LAYER_HISTORY_LIMIT, TIMELINE_LIMIT,
    TIMELINE_REDRAW_MS,
};
use crate::model::chart_lines::{cut_from, halve};
use crate::model::metrics_csv::FrameShare;
use crate::model::runner::Outcome;
use crate::model::timeline::{assign, profile_summary, split_cpu_frame, Split, StepTiming};
use crate::model::url;
use crate::model::views::Snapshot;

/// A frame's measured intervals (ms), spread over its steps by
/// `record_timeline` (model::timeline).
pub(super) struct FrameParts {
    /// The page's frame, from the animation frame to the report taken in.
    pub wall_ms: f64,
    pub checkpoint_ms: f64,
    pub logging_ms: f64,
    pub profiling_ms: f64,
    /// The whole frame on the engine's side.
    pub engine_frame_ms: f64,
    pub messaging_ms: f64,
    /// The page's frame less its wait for the report.
    pub page_ms: f64,
}

impl FrameParts {
    /// This frame and `next` as one (a step that took both).
    pub(super) fn plus(self, next: FrameParts) -> FrameParts {
        FrameParts {
            wall_ms: self.wall_ms + next.wall_ms,
            checkpoint_ms: self.checkpoint_ms + next.checkpoint_ms,
            logging_ms: self.logging_ms + next.logging_ms,
            profiling_ms: self.profiling_ms + next.profiling_ms,
            engine_frame_ms: self.engine_frame_ms + next.engine_frame_ms,
            messaging_ms: self.messaging_ms + next.messaging_ms,
            page_ms: self.page_ms + next.page_ms,
        }
    }
}

/// A step's data, forward, backward, optimizer and unsplit GPU time: a
/// GPU step timed only whole is unsplit, never shown as one phase.
fn step_compute(m: &StepMetrics) -> [f64; 5] {
    let p = &m.phases;
    match m.timing {
        Timing::Cpu | Timing::GpuTimestamps => [p.data_ms, p.forward_ms, p.backward_ms, p.optimizer_ms, 0.0],
        // The submit's wall time, which `forward_ms` holds.
        Timing::GpuCoarse => [p.data_ms, 0.0, 0.0, 0.0, p.forward_ms + p.backward_ms + p.optimizer_ms],
        Timing::GpuTotal | Timing::GpuFused => [p.data_ms, 0.0, 0.0, 0.0, m.gpu_ms.unwrap_or(0.0)],
    }
}

impl AppState {
    /// Spreads a frame's wall time over its steps and records each step's
    /// parts (model::timeline).
    pub(super) fn record_timeline(&self, metrics: &[StepMetrics], frame: &FrameParts) {
        self.charts.step_history.update(|h| {
            if let Some(first) = metrics.first() {
                cut_from(h, first.step, |p| p.step);
            }
            h.extend(metrics.iter().map(|m| StepPoint {
                step: m.step,
                loss: m.loss,
                grad_norm: m.grad_norm,
                lr: m.lr,
                clipped: m.clipped,
            }));
            if h.len() > HISTORY_LIMIT {
                // Thin by half, keeping the larger gradient norm of each
                // two steps: spikes and clipped steps stay visible, and
                // the history stays bounded even when every step clips.
                halve(h, |p| f64::from(p.grad_norm));
            }
        });
        let k = metrics.len() as f64;
        let share = FrameShare {
            wall_ms: frame.wall_ms / k,
            checkpoint_ms: frame.checkpoint_ms / k,
            logging_ms: frame.logging_ms / k,
        };
        self.charts.metrics_log.update_value(|log| log.record_steps(metrics, Some(share)));
        let mut computed: Vec<[f64; 5]> = metrics.iter().map(step_compute).collect();
        // CPU phases below the clock's resolution: split as profiled.
        let split = if metrics.iter().all(|m| m.timing == Timing::Cpu) {
            let summary = self.charts.profiles.with_untracked(|p| profile_summary(p)).filter(|s| s.on_cpu());
            let r = self.charts.phase_clock.get_untracked().map_or_else(clock_resolution_ms, |(_, r)| r);
            split_cpu_frame(&mut computed, summary.map(|s| s.profile()).as_ref(), r)
        } else {
            Split::Readings
        };
        let communication_ms: f64 = metrics.iter().map(|m| m.phases.communication_ms).sum();
        let compute_ms: f64 = computed.iter().flatten().sum::<f64>() + communication_ms;
        // The worker's frame less what its steps, checkpoint, views and
        // profiles took: the engine's own part.
        let claimed = compute_ms + frame.checkpoint_ms + frame.logging_ms + frame.profiling_ms;
        let engine_ms = (frame.engine_frame_ms - claimed).max(0.0);
        // A step's wall time is its own compute plus an even share of the
        // frame's rest, so a slow step shows as slow and the steps' walls
        // sum to the frame's. (Where the compute measured more than the
        // frame, as overlapping GPU time may, the frame is shared in
        // proportion to each step's compute.)
        let rest_ms = (frame.wall_ms - compute_ms).max(0.0);
        let wall_of = |c: &[f64; 5], m: &StepMetrics| {
            let own = c.iter().sum::<f64>() + m.phases.communication_ms;
            if compute_ms > frame.wall_ms {
                frame.wall_ms * own / compute_ms
            } else {
                own + rest_ms / k
            }
        };
        self.charts.timeline_recorded.update_value(|(t, _, dirty)| {
            *dirty = true;
            for (m, c) in metrics.iter().zip(&computed) {
                let measured = [
                    c[0],
                    c[1],
                    c[2],
                    c[3],
                    c[4],
                    frame.checkpoint_ms / k,
                    frame.logging_ms / k,
                    frame.profiling_ms / k,
                    engine_ms / k,
                    frame.messaging_ms / k,
                    frame.page_ms / k,
                    m.phases.communication_ms,
                ];
                let wall_ms = wall_of(c, m);
                t.push(StepTiming { step: m.step, wall_ms, parts: assign(wall_ms, measured), split });
            }
            let excess = t.len().saturating_sub(TIMELINE_LIMIT);
            t.drain(..excess);
        });
        self.draw_timeline(false);
        let mode = usize::from(self.lessons.activation_checkpointing.get_untracked());
        self.charts.backward_by_mode.update(|b| {
            let recent = &mut b[mode];
            recent.extend(metrics.iter().map(|m| m.phases.backward_ms));
            let excess = recent.len().saturating_sub(60);
            recent.drain(..excess);
        });
    }

    /// Shows the recorded timeline when it changed and, unless `now`, the
    /// last redraw is `TIMELINE_REDRAW_MS` old.
    pub(super) fn draw_timeline(&self, now: bool) {
        let due = self.charts.timeline_recorded.with_value(|(_, drawn, dirty)| {
            *dirty && (now || drawn.is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= TIMELINE_REDRAW_MS))
        });
        if due {
            let recorded = self.charts.timeline_recorded.with_value(|(t, _, _)| t.clone());
            self.charts.timeline_recorded.update_value(|(_, drawn, dirty)| {
                *drawn = Some(web_time::Instant::now());
                *dirty = false;
            });
            self.charts.timeline.set(recorded);
        }
    }

    pub(super) fn outcome(&self, outcome: Outcome) {
        match outcome {
            Outcome::Checkpoint(bytes, step) => {
                if let Err(message) = download(&bytes, &format!("stepscope-step{step}.safetensors")) {
                    self.run.alert.set(Some(message));
                }
            }
            Outcome::Restored(e, step) => {
                self.run.running.set(false);
                self.run.alert.set(None);
                self.run.notice.set(Some(format!("Restored the uploaded checkpoint: step {step}.")));
                self.charts.history.set(Vec::new());
                self.charts.metrics_log.update_value(|log| log.clear());
                url::write_url(&e);
                self.run.experiment.set(*e);
            }
            Outcome::Refused(why, kept) => {
                self.run.alert.set(Some(why));
                url::write_url(&kept);
                self.run.experiment.set(*kept);
            }
            Outcome::CsvLoaded(name, e) => {
                self.run.csv_reading.set(None);
                self.run.alert.set(None);
                self.run.csv_name.set(Some(name));
                self.charts.history.set(Vec::new());
                url::write_url(&e);
                self.run.experiment.set(*e);
            }
            Outcome::Verified(summary, passed) => self.checkpoints.verify_result.set(Some((summary, passed))),
            Outcome::Accumulation(report) => self.lessons.accumulation.set(Some(report)),
            Outcome::Opened(view) => {
                self.run.alert.set(None);
                self.runs.keep_opened(*view, self.run.notice);
            }
            Outcome::File(name, bytes) => {
                if let Err(message) = download(&bytes, &name) {
                    self.run.alert.set(Some(message));
                }
            }
            Outcome::RolledBack(e, step) => {
                self.run.alert.set(None);
                self.run.spike_warning.set(None);
                self.checkpoints.rollback_offer.set(None);
                self.run.notice.set(Some(format!(
                    "Back at the checkpoint of step {step}, with the hyperparameters it was saved with."
                )));
                self.charts.history.update(|h| h.retain(|p| p.step <= step));
                self.charts.step_history.update(|h| h.retain(|p| p.step < step));
                self.charts.metrics_log.update_value(|log| log.forget_from(step + 1));
                url::write_url(&e);
                self.run.experiment.set(*e);
            }
            Outcome::Phase(report) => {
                if let Some(m) = &report.metrics {
                    self.charts.metrics_log.update_value(|log| log.record_steps(std::slice::from_ref(m), None));
                    self.charts.step_history.update(|h| {
                        cut_from(h, m.step, |p| p.step);
                        h.push(StepPoint {
                            step: m.step,
                            loss: m.loss,
                            grad_norm: m.grad_norm,
                            lr: m.lr,
                            clipped: m.clipped,
                        })
                    });
                    self.run.last_metrics.set(Some(m.clone()));
                }
                self.lessons.phase_report.set(Some(Arc::from(report)));
            }
        }
    }

    pub(super) fn record_layers(&self, sample: LayerSample) {
        self.charts.layer_history.update(|h| {
            cut_from(h, sample.step, |s| s.step);
            h.push(sample);
            if h.len() > LAYER_HISTORY_LIMIT {
                let thinned: Vec<LayerSample> = h.iter().step_by(2).cloned().collect();
                *h = thinned;
            }
        });
    }

    pub(super) fn record_history(&self, snap: &Snapshot) {
        if let Some((seen, views)) = snap.gpt.as_ref().and_then(|g| Some((&g.attention.as_ref()?.seen, g))) {
            let point = super::GptPoint {
                update_ratios: views.update_ratios.clone(),
                step: snap.step,
                entropy: seen.entropy.clone(),
                max_logit: seen.max_logit.clone(),
                residual_norm: seen.residual_norm.clone(),
                lse: seen.lse,
            };
            self.charts.gpt_history.update(|h| {
                cut_from(h, point.step, |p| p.step);
                h.push(point);
                if h.len() > HISTORY_LIMIT {
                    // Every other point (the newest stays).
                    let n = h.len();
                    let mut i = 0;
                    h.retain(|_| {
                        i += 1;
                        (n - i) % 2 == 0
                    });
                }
            });
        }
        let Some(train) = snap.train else { return };
        self.charts.metrics_log.update_value(|log| log.record_evaluation(snap.step, snap.train, snap.test));
        let point = HistoryPoint { step: snap.step, train: train.loss, test: snap.test.map(|t| t.loss) };
        self.charts.history.update(|h| {
            // A step at or before the last one (the same step evaluated
            // again, or a reset whose first views come after a frame of
            // the old run) replaces what follows it: the curve never runs
            // back across the chart.
            cut_from(h, point.step, |p| p.step);
            h.push(point);
            if h.len() > HISTORY_LIMIT {
                halve(h, |p| f64::from(p.train));
            }
        });
    }
}

/// Offers `bytes` as a file download.
pub(crate) fn download(bytes: &[u8], name: &str) -> Result<(), String> {
    use wasm_bindgen::JsCast;
    let fail = |_| format!("The browser refused the download of {name}.");
    let array = js_sys::Uint8Array::from(bytes);
    let parts = js_sys::Array::of1(&array);
    let blob = web_sys::Blob::new_with_u8_array_sequence(&parts).map_err(fail)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(fail)?;
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let anchor: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(fail)?.dyn_into().map_err(|_| "no anchor")?;
    anchor.set_href(&url);
    anchor.set_download(name);
    anchor.click();
    let _ = web_sys::Url::revoke_object_url(&url);
    Ok(())
}
