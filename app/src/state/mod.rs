//! The page's shared state in four small typed contexts (the run, the
//! charts, checkpoints, lessons), and the training loop that feeds them.

use std::sync::{Arc, Mutex};
use stepscope_core::engine::anatomy::{LayerAnatomy, LayerTable};

use leptos::prelude::*;
use stepscope_core::engine::profile::PhaseProfile;
use stepscope_core::engine::{MemoryBytes, PhaseReport};
use stepscope_core::stats::TensorStats;
use stepscope_core::trainer::PhaseClock;
use stepscope_core::{Experiment, StepMetrics};

use crate::model::checkpoints::CheckpointReport;
use crate::model::classroom::check_lock;
use crate::model::edit::{default_experiment, edited, needs_reset};
use crate::model::metrics_csv::MetricsLog;
use crate::model::op_table::OpStep;
use crate::model::runner::{push, AccumulationReport, BackendInfo, Command, Commands, CsvProgress, Pin};
use crate::model::timeline::StepTiming;
use crate::model::url;
use crate::model::views::Snapshot;

mod engine;
mod records;
mod report;
mod runs;
mod training;

pub use runs::{LaneView, RaceView, RunsState};

pub(crate) use records::download;

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

/// First steps where the gradient norm passed 3× and the loss 2× their
/// starting level (median of the first 4 steps).
pub fn first_warnings(h: &[StepPoint]) -> Option<(Option<u64>, Option<u64>)> {
    if h.len() < 5 || h[0].step != 0 {
        return None;
    }
    let median = |mut v: Vec<f32>| {
        v.sort_by(f32::total_cmp);
        (v[1] + v[2]) / 2.0
    };
    let norm0 = median(h[..4].iter().map(|p| p.grad_norm).collect());
    let loss0 = median(h[..4].iter().map(|p| p.loss).collect());
    let norm = h.iter().find(|p| p.grad_norm > 3.0 * norm0).map(|p| p.step + 1);
    let loss = h.iter().find(|p| p.loss.is_nan() || p.loss > 2.0 * loss0).map(|p| p.step + 1);
    Some((norm, loss))
}

/// Per-layer statistics of [activations, gradients, weights, updates] at
/// one step, for the distributions over time.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSample {
    pub step: u64,
    pub layers: Vec<[TensorStats; 4]>,
}

/// What the network diagram's links show (drawn on the engine's side).
pub use crate::model::views::LinkMode;

/// The run: its experiment, whether it trains, the engine, and the
/// messages for the user.
#[derive(Clone, Copy)]
pub struct Run {
    pub experiment: RwSignal<Experiment>,
    pub running: RwSignal<bool>,
    /// Paused, and the last frame did nothing: no step landed or was
    /// under way, no command waited and no background checkpoint was
    /// being written. What the step counter shows is then final (tests
    /// and scripts wait for it instead of for a quiet interval).
    pub at_rest: RwSignal<bool>,
    pub step: RwSignal<u64>,
    pub last_metrics: RwSignal<Option<StepMetrics>>,
    pub backend: RwSignal<BackendInfo>,
    /// The engine the user pinned (the URL's `?engine=`), or auto.
    pub engine_pin: RwSignal<Pin>,
    /// Optimizer steps per second over the last second or so of training.
    pub steps_per_second: RwSignal<f64>,
    /// Errors and warnings for the user (shown with role="alert").
    pub alert: RwSignal<Option<String>>,
    /// Informational notices (device recovered, …).
    pub notice: RwSignal<Option<String>>,
    /// A loss spike seen while training went on (shown as a warning).
    pub spike_warning: RwSignal<Option<String>>,
    /// Whether a loss spike pauses training (opt-in; else it warns).
    pub pause_on_spike: RwSignal<bool>,
    pub steps_per_frame: RwSignal<usize>,
    pub csv_name: RwSignal<Option<String>>,
    /// An uploaded CSV being read by the engine's side: how far.
    pub csv_reading: RwSignal<Option<CsvProgress>>,
    /// Main-thread time the training loop spent per frame (its own work,
    /// not the time it awaited the GPU): the latest and the worst since
    /// training last started, in ms.
    pub frame_busy_ms: RwSignal<(f64, f64)>,
    pub memory: RwSignal<MemoryBytes>,
    /// Whether the engine trains in the worker (else on the page's thread).
    pub in_worker: RwSignal<bool>,
    /// Ranks asked for (`host::ranks`: workers sharing a sharded run's
    /// steps) and what the engine's side made of it.
    pub ranks_asked: RwSignal<usize>,
    pub ranks: RwSignal<crate::model::host::protocol::RankStatus>,
    /// The run's loader workers (`host::loaders`), as the engine's side
    /// last said.
    pub loaders: RwSignal<crate::model::host::protocol::LoaderStatus>,
    /// The straggler lesson: extra passes of the last rank's work.
    pub straggler: RwSignal<u32>,
    pub commands: StoredValue<Commands>,
    /// Counts the page's clears of the run (reset, new data, a restore):
    /// a frame planned before a clear reports steps of the run that was
    /// cleared, which the charts must not show.
    pub clears: StoredValue<u64>,
    /// The link's `lock=1`: the network is read-only (`model::classroom`).
    pub locked: RwSignal<bool>,
    /// A transformer's sample prompt, temperature and attention window.
    pub gpt_spec: RwSignal<crate::model::views::gpt::GptViewSpec>,
}

pub use crate::model::gpt_lessons::GptPoint;

/// What the charts and views draw.
#[derive(Clone, Copy)]
pub struct Charts {
    pub history: RwSignal<Vec<HistoryPoint>>,
    pub snapshot: RwSignal<Option<Arc<Snapshot>>>,
    pub link_mode: RwSignal<LinkMode>,
    /// Where the recent steps' time went (model::timeline), as drawn: at
    /// most `TIMELINE_REDRAW_MS` apart while training (the eye cannot
    /// follow 60 redraws a second of 60 bars, and each cost the page
    /// thousands of attribute writes), and at once when training pauses.
    pub timeline: RwSignal<Vec<StepTiming>>,
    /// … and as recorded, with when it was last drawn.
    pub timeline_recorded: StoredValue<(Vec<StepTiming>, Option<web_time::Instant>, bool)>,
    /// Per step: gradient norm, learning rate, clipped.
    pub step_history: RwSignal<Vec<StepPoint>>,
    /// Per-layer statistics over time (thinned like the curves).
    pub layer_history: RwSignal<Vec<LayerSample>>,
    /// Backward ms of recent steps without and with activation
    /// checkpointing (at most 60 each), for the time it adds.
    pub backward_by_mode: RwSignal<[Vec<f64>; 2]>,
    /// Every recorded step's metrics, for the metrics download.
    pub metrics_log: StoredValue<MetricsLog>,
    /// The recent profiled steps (at most `PROFILE_LIMIT`), and what times
    /// the engine's phases with its resolution (ms).
    pub profiles: RwSignal<Vec<PhaseProfile>>,
    pub phase_clock: RwSignal<Option<(PhaseClock, f64)>>,
    /// A transformer's window statistics over steps (thinned like the
    /// curves).
    pub gpt_history: RwSignal<Vec<GptPoint>>,
    /// A transformer's last step by op kind and block (the CPU engine's
    /// clock around each op), with that step's phases.
    pub op_times: RwSignal<Option<OpStep>>,
    /// An MLP's or conv net's steps layer by layer (a sample a frame, the
    /// last `LAYER_TABLE_STEPS`), and the table drawn from them.
    pub layer_anatomy: StoredValue<LayerAnatomy>,
    pub layer_table: RwSignal<Option<LayerTable>>,
}

/// Steps the live layer table is the mean of.
pub const LAYER_TABLE_STEPS: usize = 50;

/// Least time between two redraws of the timeline while training.
pub const TIMELINE_REDRAW_MS: f64 = 250.0;

/// Profiled steps the anatomy keeps.
pub const PROFILE_LIMIT: usize = 20;

/// Automatic and manual checkpoints.
#[derive(Clone, Copy)]
pub struct Checkpoints {
    /// The last "verify restore" result: summary and pass.
    pub verify_result: RwSignal<Option<(String, bool)>>,
    /// Automatic checkpoints every N steps (0: off).
    pub checkpoint_every: RwSignal<u64>,
    /// Automatic checkpoints in the background (true) or synchronously.
    pub checkpoint_background: RwSignal<bool>,
    /// A background checkpoint is still being serialized and stored.
    pub checkpoint_in_flight: RwSignal<bool>,
    /// What the last automatic checkpoint cost, or why it failed.
    pub last_checkpoint: RwSignal<Option<Result<CheckpointReport, String>>>,
    /// After a loss spike or NaN at this step: offer the newest checkpoint
    /// from before it.
    pub rollback_offer: RwSignal<Option<u64>>,
    /// What queuing the background checkpoint in flight cost the loop.
    pub background_loop_ms: StoredValue<f64>,
}

/// The lessons' switches and results.
#[derive(Clone, Copy)]
pub struct Lessons {
    /// Lesson: gradients are zeroed between steps (the correct loop).
    pub zero_grad: RwSignal<bool>,
    /// Step-by-phase mode: what the last phase produced.
    pub phase_report: RwSignal<Option<Arc<PhaseReport>>>,
    /// Recompute pre-activations in backward instead of storing them.
    pub activation_checkpointing: RwSignal<bool>,
    /// The last gradient-accumulation comparison.
    pub accumulation: RwSignal<Option<AccumulationReport>>,
}

/// The page's state: four small typed contexts (each also provided on its
/// own, for the panels that need only it), and the training loop that
/// feeds them.
#[derive(Clone, Copy)]
pub struct AppState {
    pub run: Run,
    pub charts: Charts,
    pub checkpoints: Checkpoints,
    pub lessons: Lessons,
    /// The runs list, the comparison and the race (`runs`).
    pub runs: RunsState,
}

/// Steps kept for the timeline.
const TIMELINE_LIMIT: usize = 240;

/// Most points kept for the curves; older ones are thinned by half.
const HISTORY_LIMIT: usize = 600;

/// Most per-layer samples kept (columns of the distributions over time).
const LAYER_HISTORY_LIMIT: usize = 120;

impl AppState {
    pub fn new() -> AppState {
        let (experiment, alert) = match url::experiment_from_url() {
            Ok(Some(e)) => (e, None),
            Ok(None) => (default_experiment(), None),
            Err(message) => (default_experiment(), Some(message)),
        };
        AppState {
            run: Run {
                experiment: RwSignal::new(experiment),
                running: RwSignal::new(false),
                at_rest: RwSignal::new(false),
                step: RwSignal::new(0),
                last_metrics: RwSignal::new(None),
                backend: RwSignal::new(BackendInfo { name: "starting…".into(), ..BackendInfo::default() }),
                engine_pin: RwSignal::new(url::engine_pin()),
                steps_per_second: RwSignal::new(0.0),
                alert: RwSignal::new(alert),
                notice: RwSignal::new(None),
                spike_warning: RwSignal::new(None),
                pause_on_spike: RwSignal::new(false),
                steps_per_frame: RwSignal::new(0),
                csv_name: RwSignal::new(None),
                csv_reading: RwSignal::new(None),
                frame_busy_ms: RwSignal::new((0.0, 0.0)),
                memory: RwSignal::new(MemoryBytes::default()),
                in_worker: RwSignal::new(false),
                ranks_asked: RwSignal::new(url::ranks().unwrap_or_else(default_ranks)),
                ranks: RwSignal::new(Default::default()),
                loaders: RwSignal::new(Default::default()),
                straggler: RwSignal::new(0),
                commands: StoredValue::new(Arc::new(Mutex::new(Default::default()))),
                clears: StoredValue::new(0),
                locked: RwSignal::new(url::classroom().lock.locked),
                gpt_spec: RwSignal::new(Default::default()),
            },
            charts: Charts {
                history: RwSignal::new(Vec::new()),
                snapshot: RwSignal::new(None),
                link_mode: RwSignal::new(LinkMode::Weight),
                timeline: RwSignal::new(Vec::new()),
                timeline_recorded: StoredValue::new((Vec::new(), None, false)),
                step_history: RwSignal::new(Vec::new()),
                layer_history: RwSignal::new(Vec::new()),
                backward_by_mode: RwSignal::new(Default::default()),
                metrics_log: StoredValue::new(MetricsLog::default()),
                profiles: RwSignal::new(Vec::new()),
                phase_clock: RwSignal::new(None),
                gpt_history: RwSignal::new(Vec::new()),
                op_times: RwSignal::new(None),
                layer_anatomy: StoredValue::new(LayerAnatomy::window(LAYER_TABLE_STEPS)),
                layer_table: RwSignal::new(None),
            },
            checkpoints: Checkpoints {
                verify_result: RwSignal::new(None),
                checkpoint_every: RwSignal::new(100),
                checkpoint_background: RwSignal::new(true),
                checkpoint_in_flight: RwSignal::new(false),
                last_checkpoint: RwSignal::new(None),
                rollback_offer: RwSignal::new(None),
                background_loop_ms: StoredValue::new(0.0),
            },
            lessons: Lessons {
                zero_grad: RwSignal::new(true),
                phase_report: RwSignal::new(None),
                activation_checkpointing: RwSignal::new(false),
                accumulation: RwSignal::new(None),
            },
            runs: RunsState::new(),
        }
    }

    pub fn command(&self, command: Command) {
        self.run.at_rest.set(false);
        push(&self.run.commands.get_value(), command);
    }

    /// Sends the person's transformer-view spec (prompt, temperature,
    /// attention window) to the engine's side and keeps it.
    pub fn send_gpt_spec(&self, spec: crate::model::views::gpt::GptViewSpec) {
        self.run.gpt_spec.set(spec.clone());
        self.command(Command::GptViews(spec));
    }

    /// Whether commands wait for the loop's next frame.
    pub fn commands_pending(&self) -> bool {
        !self.run.commands.get_value().lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Applies a control's edit: validated, written to the URL, and sent to
    /// the loop as a reset (model, data, seed) or a live change. A refused
    /// edit shows its message and changes nothing.
    pub fn edit(&self, f: impl FnOnce(&mut Experiment) -> Result<(), String>) {
        let old = self.run.experiment.get_untracked();
        let locked = self.run.locked.get_untracked();
        match edited(&old, f).and_then(|new| check_lock(locked, &old, &new).map(|()| new)) {
            Ok(new) if new == old => {}
            Ok(new) => {
                self.run.alert.set(None);
                self.charts.backward_by_mode.set(Default::default());
                url::write_url(&new);
                if needs_reset(&old, &new) {
                    self.clear_run();
                    self.command(Command::Reset(new.clone()));
                } else {
                    self.command(Command::Apply(new.clone()));
                }
                self.run.experiment.set(new);
            }
            Err(message) => self.run.alert.set(Some(message)),
        }
    }

    pub fn reset(&self) {
        self.run.alert.set(None);
        self.clear_run();
        // A reset starts over for good: the loop forgets the autosaved run
        // (it also writes the autosaves, so it orders the two).
        self.command(Command::ForgetAutosave);
        self.command(Command::Reset(self.run.experiment.get_untracked()));
    }

    fn clear_run(&self) {
        self.run.clears.update_value(|n| *n += 1);
        self.charts.history.set(Vec::new());
        self.charts.step_history.set(Vec::new());
        self.charts.timeline.set(Vec::new());
        self.charts.timeline_recorded.set_value((Vec::new(), None, false));
        self.charts.profiles.set(Vec::new());
        self.charts.layer_history.set(Vec::new());
        self.charts.gpt_history.set(Vec::new());
        self.charts.op_times.set(None);
        self.charts.layer_anatomy.set_value(LayerAnatomy::window(LAYER_TABLE_STEPS));
        self.charts.layer_table.set(None);
        self.charts.metrics_log.update_value(MetricsLog::clear);
        self.charts.backward_by_mode.set(Default::default());
        self.lessons.phase_report.set(None);
        self.checkpoints.rollback_offer.set(None);
        self.run.spike_warning.set(None);
        self.run.step.set(0);
        self.run.last_metrics.set(None);
    }
}

impl Default for AppState {
    fn default() -> Self {
        AppState::new()
    }
}

/// Ranks by default: the cores the browser reports, up to 8 (past that a
/// rank's share of the page's networks is too small to pay for the
/// all-reduce); 1 where it reports none.
pub fn default_ranks() -> usize {
    reported_cores().clamp(1, 8)
}

/// The logical cores the browser reports (`navigator.hardwareConcurrency`;
/// 1 where it reports none).
pub fn reported_cores() -> usize {
    web_sys::window().map_or(1, |w| w.navigator().hardware_concurrency() as usize).max(1)
}
