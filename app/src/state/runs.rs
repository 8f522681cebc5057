//! The runs list and the race on the page: after every frame the loop
//! hands over the loop's status and the race's report; the run training now
//! is kept up to date as a record (from the curves the page already draws),
//! and becomes a kept run when a fresh one begins (the runner's `run_id`
//! changes: Reset, a rebuilt model, new data, a restored checkpoint).

use leptos::prelude::*;
use leptos::task::spawn_local;
use stepscope_core::engine::Evaluation;
use stepscope_core::Experiment;
use web_time::Instant;

use super::AppState;
use crate::model::host::protocol::Status;
use crate::model::opened::OpenedView;
use crate::model::race::{RaceReport, RaceSpec};
use crate::model::runs::{downsample, Curve, RunCurves, RunRecord, RunsList, MAX_POINTS};
use crate::model::runs_store;

/// The live record is refreshed at most this often (ms): it copies the
/// curves, and the list redraws.
const LIVE_REFRESH_MS: f64 = 250.0;

/// One lane of the race as the page draws it.
#[derive(Clone, Debug, PartialEq)]
pub struct LaneView {
    pub label: String,
    pub experiment: Experiment,
    pub step: u64,
    /// Every step's mini-batch loss (thinned), for the live chart.
    pub step_loss: Curve,
    /// Full-set evaluations and gradient norms, as a kept run's.
    pub curves: RunCurves,
    pub last_loss: Option<f32>,
    pub train: Option<Evaluation>,
    pub test: Option<Evaluation>,
    pub done: bool,
    pub error: Option<String>,
}

/// The race under way, or the last one (kept on screen once it ended).
#[derive(Clone, Debug, PartialEq)]
pub struct RaceView {
    pub spec: RaceSpec,
    pub lanes: Vec<LaneView>,
    pub on_gpu: bool,
    pub ended: bool,
    pub error: Option<String>,
}

/// The runs list, the selection compared, and the race.
#[derive(Clone, Copy)]
pub struct RunsState {
    /// Runs that ended, oldest first (bounded: `model::runs`).
    pub list: RwSignal<RunsList>,
    /// The run training now, as it would be kept.
    pub live: RwSignal<Option<RunRecord>>,
    /// Ids of the runs chosen for comparison (the live one's included).
    pub selected: RwSignal<Vec<u64>>,
    pub race: RwSignal<Option<RaceView>>,
    /// The run opened from files last (`open-run`), shown read-only.
    pub opened: RwSignal<Option<OpenedView>>,
    /// The runner's run the live record is of.
    live_run_id: StoredValue<Option<u64>>,
    /// The live run's accuracy over steps (the loss curves keep none).
    live_accuracy: StoredValue<Curve>,
    refreshed_at: StoredValue<Option<Instant>>,
    /// IndexedDB (`model::runs_store`): whether an earlier visit's runs
    /// were read, a save is in flight, and another is due after it.
    store: StoredValue<StoreState>,
    /// Whether the browser's storage holds the list as shown: an earlier
    /// visit's runs were read and no write is pending or in flight (the
    /// runs list says so, `data-stored`; a reload before then may lose
    /// the newest change).
    pub stored: RwSignal<bool>,
}

#[derive(Clone, Copy, Debug, Default)]
struct StoreState {
    loaded: bool,
    saving: bool,
    dirty: bool,
    /// A failure was shown (once a visit).
    warned: bool,
}

impl RunsState {
    pub fn new() -> RunsState {
        RunsState {
            list: RwSignal::new(RunsList::default()),
            live: RwSignal::new(None),
            selected: RwSignal::new(Vec::new()),
            race: RwSignal::new(None),
            opened: RwSignal::new(None),
            live_run_id: StoredValue::new(None),
            live_accuracy: StoredValue::new(Vec::new()),
            refreshed_at: StoredValue::new(None),
            store: StoredValue::new(StoreState::default()),
            stored: RwSignal::new(false),
        }
    }

    /// Shows a run opened from files and keeps it in the runs list (it can
    /// be compared with the others, not trained).
    pub fn keep_opened(&self, view: OpenedView, notice: RwSignal<Option<String>>) {
        self.list.update(|l| {
            let id = l.next_id();
            l.push(RunRecord {
                id,
                label: format!("Opened: {}", view.describe()),
                experiment: None,
                curves: view.curves(),
                steps: view.steps as u64,
                last_step_loss: view.loss.last().map(|p| p.1),
                train_loss: None,
                test_loss: None,
                accuracy: None,
                engine: "opened from files".into(),
            });
        });
        self.opened.set(Some(view));
        self.save(notice);
    }

    /// Forgets every kept run, here and in the browser's storage.
    pub fn forget(&self, notice: RwSignal<Option<String>>) {
        self.list.update(RunsList::clear);
        self.selected.set(Vec::new());
        self.save(notice);
    }

    /// Writes the kept runs to IndexedDB, one write at a time (a change
    /// during a write is written after it), never before an earlier
    /// visit's runs were read (they would be overwritten).
    fn save(&self, notice: RwSignal<Option<String>>) {
        let runs = *self;
        let state = runs.store.get_value();
        runs.stored.set(false);
        if !state.loaded || state.saving {
            runs.store.update_value(|s| s.dirty = true);
            return;
        }
        runs.store.update_value(|s| (s.saving, s.dirty) = (true, false));
        let records = runs.list.with_untracked(RunsList::to_vec);
        spawn_local(async move {
            let result = runs_store::save(&records).await;
            runs.store.update_value(|s| s.saving = false);
            let ok = result.is_ok();
            runs.warn(result, notice);
            if runs.store.get_value().dirty {
                runs.save(notice);
            } else {
                runs.stored.set(ok);
            }
        });
    }

    /// Reads an earlier visit's runs into the list (once).
    fn load(&self, notice: RwSignal<Option<String>>) {
        let runs = *self;
        spawn_local(async move {
            let result = runs_store::load().await;
            if let Ok(earlier) = &result {
                if !earlier.is_empty() {
                    runs.list.update(|l| l.restore(earlier.clone()));
                }
            }
            runs.store.update_value(|s| s.loaded = true);
            let ok = result.is_ok();
            runs.warn(result.map(drop), notice);
            if runs.store.get_value().dirty {
                runs.save(notice);
            } else {
                runs.stored.set(ok);
            }
        });
    }

    /// A storage failure is a notice, once a visit: the runs stay kept
    /// for this visit.
    fn warn(&self, result: Result<(), String>, notice: RwSignal<Option<String>>) {
        if let Err(why) = result {
            if !self.store.get_value().warned {
                self.store.update_value(|s| s.warned = true);
                notice.set(Some(format!("The runs list is kept for this visit only: {why}.")));
            }
        }
    }

    /// A run to compare: a kept one or the live one.
    pub fn run(&self, id: u64) -> Option<RunRecord> {
        self.list.with(|l| l.get(id).cloned()).or_else(|| self.live.get().filter(|r| r.id == id))
    }

    pub fn toggle(&self, id: u64, on: bool) {
        self.selected.update(|s| {
            s.retain(|&x| x != id);
            if on {
                s.push(id);
            }
        });
    }
}

impl Default for RunsState {
    fn default() -> Self {
        RunsState::new()
    }
}

impl AppState {
    /// After each frame: the live record, a kept run when a fresh one
    /// began, and the race's report.
    pub(super) fn record_runs(&self, status: &Status, race: Option<RaceReport>) {
        let runs = self.runs;
        if runs.live_run_id.get_value().is_none() {
            runs.load(self.run.notice);
        }
        if runs.live_run_id.get_value() != Some(status.run_id) {
            // The run that ended is kept as last refreshed: the page has
            // cleared its curves by now.
            if let Some(done) = runs.live.get_untracked().filter(|r| r.steps > 0) {
                runs.list.update(|l| l.push(done));
                runs.save(self.run.notice);
            }
            let id = runs.list.try_update(|l| l.next_id()).unwrap_or_default();
            runs.live_run_id.set_value(Some(status.run_id));
            runs.live_accuracy.set_value(Vec::new());
            runs.refreshed_at.set_value(Some(Instant::now()));
            runs.live.set(Some(self.live_record(id, status)));
        } else {
            self.record_accuracy(status.step);
            let due = runs.refreshed_at.get_value().is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= LIVE_REFRESH_MS);
            // Once paused, the record catches up with the run's last steps
            // at once: a Reset right after Pause keeps the run as it ended,
            // not as last refreshed while it trained.
            let behind = runs.live.with_untracked(|r| r.as_ref().is_some_and(|r| r.steps != status.step));
            if due || (behind && !self.run.running.get_untracked()) {
                self.refresh_live(status);
            }
        }
        if let Some(report) = race {
            self.draw_race(report);
        }
    }

    /// The views' accuracy at their step, for the live run's curve (the
    /// page's loss curves keep none).
    fn record_accuracy(&self, step: u64) {
        let Some(snap) = self.charts.snapshot.get_untracked().filter(|s| s.step <= step) else { return };
        let Some(a) = snap.test.or(snap.train).and_then(|t| t.accuracy) else { return };
        self.runs.live_accuracy.update_value(|c| {
            if c.last().is_none_or(|&(s, _)| s < snap.step) {
                c.push((snap.step, a));
                if c.len() > 2 * MAX_POINTS {
                    *c = downsample(c, MAX_POINTS);
                }
            }
        });
    }

    fn refresh_live(&self, status: &Status) {
        let runs = self.runs;
        let old = runs.live.get_untracked();
        let mut record = self.live_record(old.as_ref().map_or(0, |r| r.id), status);
        // Reset clears the page's curves before the loop starts the fresh
        // run: until then the record keeps the curves it had.
        if let Some(old) = old {
            let kept = |new: &mut Curve, old: Curve| {
                if new.is_empty() {
                    *new = old;
                }
            };
            kept(&mut record.curves.train_loss, old.curves.train_loss);
            kept(&mut record.curves.test_loss, old.curves.test_loss);
            kept(&mut record.curves.grad_norm, old.curves.grad_norm);
            record.last_step_loss = record.last_step_loss.or(old.last_step_loss);
            record.train_loss = record.train_loss.or(old.train_loss);
            record.test_loss = record.test_loss.or(old.test_loss);
            record.accuracy = record.accuracy.or(old.accuracy);
        }
        runs.refreshed_at.set_value(Some(Instant::now()));
        runs.live.set(Some(record));
    }

    /// The live run as a record, from the page's curves at or before the
    /// loop's step (a frame in flight at a Reset can add stale points).
    fn live_record(&self, id: u64, status: &Status) -> RunRecord {
        let step = status.step;
        let snapshot = self.charts.snapshot.get_untracked().filter(|s| s.step <= step);
        let history = self.charts.history.get_untracked();
        let steps = self.charts.step_history.get_untracked();
        let curves = RunCurves {
            train_loss: history.iter().filter(|p| p.step <= step).map(|p| (p.step, p.train)).collect(),
            test_loss: history.iter().filter(|p| p.step <= step).filter_map(|p| Some((p.step, p.test?))).collect(),
            accuracy: self.runs.live_accuracy.get_value(),
            grad_norm: steps.iter().filter(|p| p.step < step).map(|p| (p.step + 1, p.grad_norm)).collect(),
        };
        let last = self.run.last_metrics.get_untracked().filter(|m| m.step < step);
        RunRecord {
            id,
            label: format!("Run {id}"),
            experiment: Some(status.experiment.clone().unwrap_or_else(|| self.run.experiment.get_untracked())),
            curves,
            steps: step,
            last_step_loss: last.map(|m| m.loss),
            train_loss: snapshot.as_ref().and_then(|s| s.train.map(|t| t.loss)),
            test_loss: snapshot.as_ref().and_then(|s| s.test.map(|t| t.loss)),
            accuracy: snapshot.as_ref().and_then(|s| s.test.or(s.train)).and_then(|t| t.accuracy),
            engine: engine_name(status.on_gpu),
        }
    }

    /// Draws a frame's race report; an ended race's lanes become kept runs.
    fn draw_race(&self, report: RaceReport) {
        let mut view = match self.runs.race.get_untracked() {
            Some(view) if !report.started && !view.ended => view,
            _ => RaceView {
                spec: report.spec.clone(),
                lanes: Vec::new(),
                on_gpu: report.on_gpu,
                ended: false,
                error: None,
            },
        };
        for (i, lane) in report.lanes.into_iter().enumerate() {
            if view.lanes.len() <= i {
                view.lanes.push(LaneView {
                    label: lane.label.clone(),
                    experiment: lane.experiment.clone(),
                    step: 0,
                    step_loss: Vec::new(),
                    curves: RunCurves::default(),
                    last_loss: None,
                    train: None,
                    test: None,
                    done: false,
                    error: None,
                });
            }
            let shown = &mut view.lanes[i];
            // Step s's metrics are drawn at s + 1, the steps taken then.
            shown.step_loss.extend(lane.points.iter().map(|&(s, loss, _)| (s + 1, loss)));
            shown.curves.grad_norm.extend(lane.points.iter().map(|&(s, _, norm)| (s + 1, norm)));
            if let Some((step, train, test)) = lane.evaluation {
                if let Some(t) = train {
                    shown.curves.train_loss.push((step, t.loss));
                }
                if let Some(t) = test {
                    shown.curves.test_loss.push((step, t.loss));
                }
                if let Some(a) = test.or(train).and_then(|t| t.accuracy) {
                    shown.curves.accuracy.push((step, a));
                }
                (shown.train, shown.test) = (train, test);
            }
            for curve in [&mut shown.step_loss, &mut shown.curves.grad_norm] {
                if curve.len() > 2 * MAX_POINTS {
                    *curve = downsample(curve, MAX_POINTS);
                }
            }
            (shown.step, shown.last_loss, shown.done, shown.error) = (lane.step, lane.last_loss, lane.done, lane.error);
            shown.experiment = lane.experiment;
        }
        view.on_gpu = report.on_gpu;
        if report.error.is_some() {
            view.error = report.error.clone();
            self.run.alert.set(report.error);
        }
        if report.ended && !view.ended {
            view.ended = true;
            // The run waits as it was when the race began.
            self.run.running.set(false);
            let engine = engine_name(view.on_gpu);
            for lane in view.lanes.iter().filter(|l| l.step > 0) {
                self.runs.list.update(|l| {
                    let id = l.next_id();
                    l.push(RunRecord {
                        id,
                        label: format!("Race: {}", lane.label),
                        experiment: Some(lane.experiment.clone()),
                        curves: lane.curves.clone(),
                        steps: lane.step,
                        last_step_loss: lane.last_loss,
                        train_loss: lane.train.map(|t| t.loss),
                        test_loss: lane.test.map(|t| t.loss),
                        accuracy: lane.test.or(lane.train).and_then(|t| t.accuracy),
                        engine: engine.clone(),
                    })
                });
            }
            self.runs.save(self.run.notice);
        }
        self.runs.race.set(Some(view));
    }
}

fn engine_name(on_gpu: bool) -> String {
    if on_gpu { "WebGPU" } else { "CPU (WebAssembly)" }.to_string()
}
