//! What the loop records for the views: the timeline, the curves, the
//! per-layer samples, and what commands produced.

use std::sync::Arc;

use leptos::prelude::*;
use stepscope_core::StepMetrics;

use super::{AppState, HistoryPoint, LayerSample, StepPoint, HISTORY_LIMIT, LAYER_HISTORY_LIMIT, TIMELINE_LIMIT};
use crate::model::chart_lines::{cut_from, halve};
use crate::model::metrics_csv::FrameShare;
use crate::model::runner::Outcome;
use crate::model::timeline::{assign, StepTiming};
use crate::model::url;
use crate::model::views::Snapshot;

impl AppState {
    /// Spreads a frame's wall time over its steps and records each step's
    /// parts (model::timeline).
    pub(super) fn record_timeline(&self, metrics: &[StepMetrics], frame_ms: f64, checkpoint_ms: f64, logging_ms: f64) {
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
        let share = FrameShare { wall_ms: frame_ms / k, checkpoint_ms: checkpoint_ms / k, logging_ms: logging_ms / k };
        self.charts.metrics_log.update_value(|log| log.record_steps(metrics, Some(share)));
        self.charts.timeline.update(|t| {
            for m in metrics {
                let p = &m.phases;
                let measured =
                    [p.data_ms, p.forward_ms, p.backward_ms, p.optimizer_ms, checkpoint_ms / k, logging_ms / k];
                let wall_ms = frame_ms / k;
                t.push(StepTiming { step: m.step, wall_ms, parts: assign(wall_ms, measured) });
            }
            let excess = t.len().saturating_sub(TIMELINE_LIMIT);
            t.drain(..excess);
        });
        let mode = usize::from(self.lessons.activation_checkpointing.get_untracked());
        self.charts.backward_by_mode.update(|b| {
            let recent = &mut b[mode];
            recent.extend(metrics.iter().map(|m| m.phases.backward_ms));
            let excess = recent.len().saturating_sub(60);
            recent.drain(..excess);
        });
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
            Outcome::Verified(summary, passed) => self.checkpoints.verify_result.set(Some((summary, passed))),
            Outcome::Accumulation(report) => self.lessons.accumulation.set(Some(report)),
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
