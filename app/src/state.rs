//! The page's shared state: a small typed context of signals, and the
//! training loop that feeds them.

use std::sync::{Arc, Mutex};

use leptos::prelude::*;
use leptos::task::spawn_local;
use stepscope_core::engine::{MemoryBytes, PhaseReport};
use stepscope_core::gpu::GpuContext;
use stepscope_core::stats::TensorStats;
use stepscope_core::{Error, Experiment, StepMetrics};
use web_time::Instant;

use crate::model::checkpoints::{clear_autosave, load_autosave, CheckpointReport};
use crate::model::edit::{default_experiment, edited, needs_reset};
use crate::model::runner::{next_frame, push, AccumulationReport, BackendInfo, Command, Commands, Outcome, Runner};
use crate::model::spikes::{Detector, Verdict, WINDOW};
use crate::model::timeline::{assign, StepTiming};
use crate::model::url;
use crate::model::views::Snapshot;

/// One point of the loss curves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HistoryPoint {
    pub step: u64,
    pub train: f32,
    pub test: Option<f32>,
}

/// One optimizer step for the gradient-norm and learning-rate charts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepPoint {
    pub step: u64,
    pub loss: f32,
    pub grad_norm: f32,
    pub lr: f64,
    pub clipped: bool,
}

/// Per-layer statistics of [activations, gradients, weights, updates] at
/// one step, for the distributions over time.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSample {
    pub step: u64,
    pub layers: Vec<[TensorStats; 4]>,
}

/// What the network diagram's links show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMode {
    Weight,
    Gradient,
    Update,
}

#[derive(Clone, Copy)]
pub struct AppState {
    pub experiment: RwSignal<Experiment>,
    pub running: RwSignal<bool>,
    pub step: RwSignal<u64>,
    pub last_metrics: RwSignal<Option<StepMetrics>>,
    pub history: RwSignal<Vec<HistoryPoint>>,
    pub snapshot: RwSignal<Option<Arc<Snapshot>>>,
    pub backend: RwSignal<BackendInfo>,
    /// Errors and warnings for the user (shown with role="alert").
    pub alert: RwSignal<Option<String>>,
    /// Informational notices (device recovered, …).
    pub notice: RwSignal<Option<String>>,
    pub link_mode: RwSignal<LinkMode>,
    pub steps_per_frame: RwSignal<usize>,
    pub csv_name: RwSignal<Option<String>>,
    /// Main-thread time the training loop spent per frame (its own work,
    /// not the time it awaited the GPU): the latest and the worst since
    /// training last started, in ms.
    pub frame_busy_ms: RwSignal<(f64, f64)>,
    /// Where the recent steps' time went (model::timeline).
    pub timeline: RwSignal<Vec<StepTiming>>,
    pub memory: RwSignal<MemoryBytes>,
    /// The last "verify restore" result: summary and pass.
    pub verify_result: RwSignal<Option<(String, bool)>>,
    /// Per step: gradient norm, learning rate, clipped.
    pub step_history: RwSignal<Vec<StepPoint>>,
    /// Lesson: gradients are zeroed between steps (the correct loop).
    pub zero_grad: RwSignal<bool>,
    /// Step-by-phase mode: what the last phase produced.
    pub phase_report: RwSignal<Option<Arc<PhaseReport>>>,
    /// Per-layer statistics over time (thinned like the curves).
    pub layer_history: RwSignal<Vec<LayerSample>>,
    /// Automatic checkpoints every N steps (0: off).
    pub checkpoint_every: RwSignal<u64>,
    /// Automatic checkpoints in the background (true) or synchronously.
    pub checkpoint_background: RwSignal<bool>,
    /// What the last automatic checkpoint cost, or why it failed.
    pub last_checkpoint: RwSignal<Option<Result<CheckpointReport, String>>>,
    /// After a loss spike or NaN at this step: offer the newest checkpoint
    /// from before it.
    pub rollback_offer: RwSignal<Option<u64>>,
    /// Recompute pre-activations in backward instead of storing them.
    pub activation_checkpointing: RwSignal<bool>,
    /// Backward ms of recent steps without and with activation
    /// checkpointing (at most 60 each), for the time it adds.
    pub backward_by_mode: RwSignal<[Vec<f64>; 2]>,
    /// The last gradient-accumulation comparison.
    pub accumulation: RwSignal<Option<AccumulationReport>>,
    pub commands: StoredValue<Commands>,
}

/// Steps kept for the timeline.
const TIMELINE_LIMIT: usize = 240;

/// Most points kept for the curves; older ones are thinned by half.
const HISTORY_LIMIT: usize = 600;

/// Most per-layer samples kept (columns of the distributions over time).
const LAYER_HISTORY_LIMIT: usize = 120;

/// Least time between per-layer samples: each costs a GPU pass and a
/// readback, counted under logging in the timeline.
const LAYER_SAMPLE_MS: f64 = 250.0;

impl AppState {
    pub fn new() -> AppState {
        let (experiment, alert) = match url::experiment_from_url() {
            Ok(Some(e)) => (e, None),
            Ok(None) => (default_experiment(), None),
            Err(message) => (default_experiment(), Some(message)),
        };
        AppState {
            experiment: RwSignal::new(experiment),
            running: RwSignal::new(false),
            step: RwSignal::new(0),
            last_metrics: RwSignal::new(None),
            history: RwSignal::new(Vec::new()),
            snapshot: RwSignal::new(None),
            backend: RwSignal::new(BackendInfo { name: "starting…".into(), ..BackendInfo::default() }),
            alert: RwSignal::new(alert),
            notice: RwSignal::new(None),
            link_mode: RwSignal::new(LinkMode::Weight),
            steps_per_frame: RwSignal::new(0),
            csv_name: RwSignal::new(None),
            frame_busy_ms: RwSignal::new((0.0, 0.0)),
            timeline: RwSignal::new(Vec::new()),
            memory: RwSignal::new(MemoryBytes::default()),
            verify_result: RwSignal::new(None),
            step_history: RwSignal::new(Vec::new()),
            zero_grad: RwSignal::new(true),
            phase_report: RwSignal::new(None),
            layer_history: RwSignal::new(Vec::new()),
            checkpoint_every: RwSignal::new(100),
            checkpoint_background: RwSignal::new(true),
            last_checkpoint: RwSignal::new(None),
            rollback_offer: RwSignal::new(None),
            accumulation: RwSignal::new(None),
            activation_checkpointing: RwSignal::new(false),
            backward_by_mode: RwSignal::new(Default::default()),
            commands: StoredValue::new(Arc::new(Mutex::new(Default::default()))),
        }
    }

    pub fn command(&self, command: Command) {
        push(&self.commands.get_value(), command);
    }

    /// Applies a control's edit: validated, written to the URL, and sent to
    /// the loop as a reset (model, data, seed) or a live change. A refused
    /// edit shows its message and changes nothing.
    pub fn edit(&self, f: impl FnOnce(&mut Experiment) -> Result<(), String>) {
        let old = self.experiment.get_untracked();
        match edited(&old, f) {
            Ok(new) if new == old => {}
            Ok(new) => {
                self.alert.set(None);
                self.backward_by_mode.set(Default::default());
                url::write_url(&new);
                if needs_reset(&old, &new) {
                    self.clear_run();
                    self.command(Command::Reset(new.clone()));
                } else {
                    self.command(Command::Apply(new.clone()));
                }
                self.experiment.set(new);
            }
            Err(message) => self.alert.set(Some(message)),
        }
    }

    pub fn reset(&self) {
        self.alert.set(None);
        self.clear_run();
        // A reset starts over for good: the autosaved run is forgotten.
        let last_checkpoint = self.last_checkpoint;
        spawn_local(async move {
            if let Err(message) = clear_autosave().await {
                last_checkpoint.set(Some(Err(message)));
            }
        });
        self.command(Command::Reset(self.experiment.get_untracked()));
    }

    fn clear_run(&self) {
        self.history.set(Vec::new());
        self.step_history.set(Vec::new());
        self.timeline.set(Vec::new());
        self.layer_history.set(Vec::new());
        self.backward_by_mode.set(Default::default());
        self.phase_report.set(None);
        self.rollback_offer.set(None);
        self.step.set(0);
        self.last_metrics.set(None);
    }

    /// Starts the loop that owns the engine (see `model::runner`).
    pub fn start_training_loop(self) {
        spawn_local(async move { self.training_loop().await });
    }

    async fn training_loop(self) {
        let gpu = if url::cpu_forced() {
            Err("the CPU engine was asked for (?backend=cpu)".to_string())
        } else if !webgpu_available() {
            Err("this browser has no WebGPU (navigator.gpu is missing)".to_string())
        } else {
            GpuContext::new().await.map(Arc::new).map_err(|e| format!("WebGPU is present but unusable: {e}"))
        };
        let (gpu, info) = match gpu {
            Ok(ctx) => {
                let info =
                    BackendInfo { gpu: true, name: "WebGPU".into(), adapter: ctx.describe(), fallback_reason: None };
                (Some(ctx), info)
            }
            Err(reason) => {
                let info = BackendInfo {
                    gpu: false,
                    name: "CPU (WebAssembly)".into(),
                    adapter: String::new(),
                    fallback_reason: Some(reason),
                };
                (None, info)
            }
        };
        self.backend.set(info);
        let experiment = self.experiment.get_untracked();
        url::write_url(&experiment);
        let restored = self.restore_autosave(&experiment, &gpu).await;
        let mut runner = match restored.map_or_else(|| Runner::new(&experiment, gpu.clone(), None), Ok) {
            Ok(r) => r,
            Err(message) => {
                self.alert.set(Some(format!("{message}. Showing the default experiment.")));
                let e = default_experiment();
                self.experiment.set(e.clone());
                url::write_url(&e);
                Runner::new(&e, gpu, None).expect("the default experiment always builds")
            }
        };
        let mut dirty = true;
        let mut was_running = false;
        let mut last_layer_sample: Option<Instant> = None;
        let mut detector = Detector::default();
        loop {
            next_frame().await;
            let frame_start = Instant::now();
            let mut awaited_ms = 0.0;
            let commands: Vec<Command> =
                self.commands.get_value().lock().unwrap_or_else(|p| p.into_inner()).drain(..).collect();
            let mut single = false;
            for command in commands {
                single |= matches!(command, Command::StepOnce);
                if matches!(
                    command,
                    Command::Reset(_) | Command::UseCsv(..) | Command::RestoreCheckpoint(_) | Command::Rollback(_)
                ) {
                    detector.clear();
                }
                let t = Instant::now();
                let handled = runner.handle(command).await;
                awaited_ms += ms(t);
                match handled {
                    Ok(Some(outcome)) => self.outcome(outcome),
                    Ok(None) => {}
                    Err(message) => self.alert.set(Some(message)),
                }
                dirty = true;
            }
            let running = self.running.get_untracked();
            if running && !was_running {
                self.frame_busy_ms.set((0.0, 0.0));
            }
            was_running = running;
            let mut frame_metrics = Vec::new();
            let (mut checkpoint_ms, mut logging_ms) = (0.0, 0.0);
            if running || single {
                let (result, gpu_wait_ms) = runner.train_frame(single && !running).await;
                awaited_ms += gpu_wait_ms;
                match result {
                    Ok(metrics) => {
                        frame_metrics = metrics.clone();
                        if let Some(last) = metrics.last() {
                            self.last_metrics.set(Some(last.clone()));
                        }
                        self.steps_per_frame.set(metrics.len());
                        dirty = true;
                        let spiked = self.judge(&mut detector, &metrics);
                        if !spiked && runner.checkpoint_due(self.checkpoint_every.get_untracked()) {
                            checkpoint_ms = self.checkpoint(&mut runner).await;
                            awaited_ms += checkpoint_ms;
                        }
                    }
                    Err(Error::NonFinite(message)) => {
                        self.running.set(false);
                        self.alert.set(Some(format!(
                            "Training paused: {message}. Go back to the last good checkpoint, or lower the learning rate (or turn on clipping) and press reset."
                        )));
                        self.rollback_offer.set(Some(runner.step_count() + 1));
                        dirty = true;
                    }
                    Err(Error::Gpu(message)) => {
                        self.alert.set(Some(format!("GPU error: {message}")));
                        match runner.recover_device().await {
                            Ok(notice) => self.notice.set(Some(notice)),
                            Err(message) => {
                                self.running.set(false);
                                self.alert.set(Some(message));
                            }
                        }
                        dirty = true;
                    }
                    Err(other) => {
                        self.running.set(false);
                        self.alert.set(Some(other.to_string()));
                    }
                }
            }
            self.step.set(runner.step_count());
            self.memory.set(runner.memory());
            // Logging: as the frame budget allows, or (lesson) after every
            // frame of exactly N steps.
            let log_now = runner.steps_per_log().is_some() && !frame_metrics.is_empty();
            if dirty && (log_now || runner.snapshot_due()) {
                let t = Instant::now();
                let (snapshot, read_ms) = runner.snapshot().await;
                awaited_ms += read_ms;
                match snapshot {
                    Ok(snap) => {
                        self.record_history(&snap);
                        self.snapshot.set(Some(snap));
                        dirty = false;
                    }
                    Err(err) => self.alert.set(Some(err.to_string())),
                }
                let step = runner.step_count();
                let due = log_now || last_layer_sample.is_none_or(|t: Instant| ms(t) >= LAYER_SAMPLE_MS);
                if due && self.layer_history.with_untracked(|h| h.last().is_none_or(|s| s.step != step)) {
                    let t = Instant::now();
                    last_layer_sample = Some(t);
                    let stats = runner.layer_stats().await;
                    awaited_ms += ms(t);
                    match stats {
                        Ok(layers) => self.record_layers(LayerSample { step, layers }),
                        Err(err) => self.alert.set(Some(err.to_string())),
                    }
                }
                logging_ms = ms(t);
            }
            if !frame_metrics.is_empty() {
                self.record_timeline(&frame_metrics, ms(frame_start), checkpoint_ms, logging_ms);
            }
            if running {
                // Awaited time includes GPU readbacks and the device's own
                // work, during which the page is free; the rest blocked it.
                let busy = (ms(frame_start) - awaited_ms).max(0.0);
                self.frame_busy_ms.update(|(last, worst)| {
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
                Verdict::GradJump(norm, median) => self.notice.set(Some(format!(
                    "The gradient norm jumped to {norm:.3} at step {} (median {median:.3} over the last {WINDOW} steps): the loss often follows.",
                    m.step + 1
                ))),
                Verdict::LossSpike(loss, median, norm, norm_median) => {
                    self.running.set(false);
                    self.alert.set(Some(format!(
                        "Loss spike at step {}: {loss:.4} against a median of {median:.4} over the last {WINDOW} steps (gradient norm {norm:.3}, median {norm_median:.3}). Training paused.",
                        m.step + 1
                    )));
                    self.rollback_offer.set(Some(m.step + 1));
                    return true;
                }
            }
        }
        false
    }

    /// Takes an automatic checkpoint; returns the milliseconds the loop
    /// waited for it (all of it when synchronous, the queuing when in the
    /// background).
    async fn checkpoint(&self, runner: &mut Runner) -> f64 {
        let started = Instant::now();
        let background = self.checkpoint_background.get_untracked();
        let pending = match runner.begin_checkpoint() {
            Ok(p) => p,
            Err(err) => {
                self.last_checkpoint.set(Some(Err(err.to_string())));
                return ms(started);
            }
        };
        let (ring, csv) = (runner.ring(), runner.csv());
        let last = self.last_checkpoint;
        if background {
            let loop_ms = ms(started);
            spawn_local(async move {
                let report = pending.complete(ring, csv, started, true).await;
                last.set(Some(report.map(|r| CheckpointReport { loop_ms, ..r })));
            });
            loop_ms
        } else {
            let report = pending.complete(ring, csv, started, false).await;
            let loop_ms = ms(started);
            last.set(Some(report.map(|r| CheckpointReport { loop_ms, ..r })));
            loop_ms
        }
    }

    /// The run autosaved in this browser, when it fits the page's
    /// experiment (the same model, data and seed; the URL's
    /// hyperparameters then apply).
    async fn restore_autosave(&self, experiment: &Experiment, gpu: &Option<Arc<GpuContext>>) -> Option<Runner> {
        let (state, csv) = match load_autosave().await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(message) => {
                self.last_checkpoint.set(Some(Err(message)));
                return None;
            }
        };
        let explicit = matches!(url::experiment_from_url(), Ok(Some(_)));
        if explicit && needs_reset(&state.experiment, experiment) {
            return None;
        }
        let step = state.step();
        let saved = state.experiment.clone();
        match Runner::from_state(state, gpu.clone(), csv.clone()) {
            Ok(runner) => {
                if explicit && saved != *experiment {
                    self.command(Command::Apply(experiment.clone()));
                } else {
                    self.experiment.set(saved.clone());
                    url::write_url(&saved);
                }
                if csv.is_some() {
                    self.csv_name.set(Some("the autosaved CSV".into()));
                }
                self.step.set(step);
                self.notice.set(Some(format!(
                    "Restored the run autosaved in this browser at step {step}. Reset starts over."
                )));
                Some(runner)
            }
            Err(message) => {
                self.last_checkpoint.set(Some(Err(format!("the autosaved run did not restore: {message}"))));
                None
            }
        }
    }

    /// Spreads a frame's wall time over its steps and records each step's
    /// parts (model::timeline).
    fn record_timeline(&self, metrics: &[StepMetrics], frame_ms: f64, checkpoint_ms: f64, logging_ms: f64) {
        self.step_history.update(|h| {
            h.extend(metrics.iter().map(|m| StepPoint {
                step: m.step,
                loss: m.loss,
                grad_norm: m.grad_norm,
                lr: m.lr,
                clipped: m.clipped,
            }));
            if h.len() > HISTORY_LIMIT {
                // Thin by half, keeping every clipped step visible.
                let thinned: Vec<StepPoint> =
                    h.iter().enumerate().filter(|(i, p)| i % 2 == 0 || p.clipped).map(|(_, p)| *p).collect();
                *h = thinned;
            }
        });
        let k = metrics.len() as f64;
        self.timeline.update(|t| {
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
        let mode = usize::from(self.activation_checkpointing.get_untracked());
        self.backward_by_mode.update(|b| {
            let recent = &mut b[mode];
            recent.extend(metrics.iter().map(|m| m.phases.backward_ms));
            let excess = recent.len().saturating_sub(60);
            recent.drain(..excess);
        });
    }

    fn outcome(&self, outcome: Outcome) {
        match outcome {
            Outcome::Checkpoint(bytes, step) => {
                if let Err(message) = download(&bytes, &format!("stepscope-step{step}.safetensors")) {
                    self.alert.set(Some(message));
                }
            }
            Outcome::Restored(e, step) => {
                self.alert.set(None);
                self.notice.set(Some(format!("Restored the uploaded checkpoint: step {step}.")));
                self.history.set(Vec::new());
                url::write_url(&e);
                self.experiment.set(*e);
            }
            Outcome::Verified(summary, passed) => self.verify_result.set(Some((summary, passed))),
            Outcome::Accumulation(report) => self.accumulation.set(Some(report)),
            Outcome::File(name, bytes) => {
                if let Err(message) = download(&bytes, &name) {
                    self.alert.set(Some(message));
                }
            }
            Outcome::RolledBack(e, step) => {
                self.alert.set(None);
                self.rollback_offer.set(None);
                self.notice.set(Some(format!(
                    "Back at the checkpoint of step {step}, with the hyperparameters it was saved with."
                )));
                self.history.update(|h| h.retain(|p| p.step <= step));
                self.step_history.update(|h| h.retain(|p| p.step < step));
                url::write_url(&e);
                self.experiment.set(*e);
            }
            Outcome::Phase(report) => {
                if let Some(m) = &report.metrics {
                    self.step_history.update(|h| {
                        h.push(StepPoint {
                            step: m.step,
                            loss: m.loss,
                            grad_norm: m.grad_norm,
                            lr: m.lr,
                            clipped: m.clipped,
                        })
                    });
                    self.last_metrics.set(Some(m.clone()));
                }
                self.phase_report.set(Some(Arc::from(report)));
            }
        }
    }

    fn record_layers(&self, sample: LayerSample) {
        self.layer_history.update(|h| {
            h.push(sample);
            if h.len() > LAYER_HISTORY_LIMIT {
                let thinned: Vec<LayerSample> = h.iter().step_by(2).cloned().collect();
                *h = thinned;
            }
        });
    }

    fn record_history(&self, snap: &Snapshot) {
        let Some(train) = snap.train else { return };
        let point = HistoryPoint { step: snap.step, train: train.loss, test: snap.test.map(|t| t.loss) };
        self.history.update(|h| {
            if h.last().is_some_and(|p| p.step == point.step) {
                h.pop();
            }
            h.push(point);
            if h.len() > HISTORY_LIMIT {
                let thinned: Vec<HistoryPoint> = h.iter().step_by(2).copied().collect();
                *h = thinned;
            }
        });
    }
}

impl Default for AppState {
    fn default() -> Self {
        AppState::new()
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

/// Whether `navigator.gpu` exists.
fn webgpu_available() -> bool {
    let Some(window) = web_sys::window() else { return false };
    js_sys::Reflect::get(&window.navigator(), &"gpu".into()).is_ok_and(|g| !g.is_undefined() && !g.is_null())
}

/// Offers `bytes` as a file download.
fn download(bytes: &[u8], name: &str) -> Result<(), String> {
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
