//! The race: 2–4 runs of the page's experiment that differ in one setting,
//! from the same seed and initial weights, trained side by side on the
//! page's engine (`model::race`), with their curves overlaid live. Train,
//! Pause and Reset act on the race while it lasts; its runs join the runs
//! list when it ends.

use leptos::prelude::*;

use super::chart::{LineChart, Series};
use crate::model::race::{RaceSetting, RaceSpec};
use crate::model::runner::Command;
use crate::model::words::count;
use crate::model::words::exact;
use crate::state::{AppState, LaneView};

#[component]
pub fn RacePanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let race = state.runs.race;
    let setting = RwSignal::new("optimizer".to_string());
    let values = RwSignal::new(RaceSetting::Optimizer.suggested().to_string());
    let steps = RwSignal::new("2000".to_string());
    let on_setting = move |ev| {
        let key = event_target_value(&ev);
        if let Some(s) = RaceSetting::parse(&key) {
            values.set(s.suggested().to_string());
        }
        setting.set(key);
    };
    let on_start = move |_| {
        let spec = RaceSpec::parse(&setting.get_untracked(), &values.get_untracked(), &steps.get_untracked());
        // Checked here for a message at once; the runner checks again.
        let checked = spec.and_then(|spec| spec.variants(&state.run.experiment.get_untracked()).map(|_| spec));
        match checked {
            Ok(spec) => {
                state.run.alert.set(None);
                // The last race's view goes at once: what shows next is the new one's.
                race.set(None);
                state.command(Command::StartRace(spec));
                state.run.running.set(true);
            }
            Err(message) => state.run.alert.set(Some(message)),
        }
    };
    let on_end = move |_| state.command(Command::EndRace);
    let under_way = move || race.with(|r| r.as_ref().is_some_and(|r| !r.ended));
    let status = move || {
        race.with(|r| match r {
            None => String::new(),
            Some(r) => {
                let engine = if r.on_gpu { "WebGPU" } else { "the CPU (WebAssembly)" };
                let steps = r.spec.steps.map_or("until ended".into(), |s| format!("{} steps each", count(s)));
                let state = match (&r.error, r.ended) {
                    (Some(why), _) => format!("stopped: {why}"),
                    (None, true) => "finished; its runs are in the list".into(),
                    (None, false) => "under way".into(),
                };
                format!("Race of {} on {engine}, {steps}: {state}.", r.spec.setting.key())
            }
        })
    };
    let series = move |pick: fn(&LaneView) -> Vec<(u64, f64)>| {
        Signal::derive(move || {
            race.with(|r| {
                r.as_ref().map_or_else(Vec::new, |r| {
                    let lanes = r.lanes.iter().enumerate();
                    lanes.map(|(i, lane)| Series::new(lane.label.clone(), format!("s{}", i % 6), pick(lane))).collect()
                })
            })
        })
    };
    let lanes = move || race.with(|r| r.as_ref().map(|r| r.lanes.clone()).unwrap_or_default());
    view! {
        <div class="race">
            <h3>"Race"</h3>
            <p class="note">
                "Runs of this experiment from the same seed and initial weights, differing in one setting, trained side by side on this page's engine."
            </p>
            <div class="race-form">
                <label class="field">
                    <span>"Setting"</span>
                    <select data-testid="race-setting" prop:value=move || setting.get() on:change=on_setting>
                        <option value="optimizer">"optimizer"</option>
                        <option value="lr">"learning rate"</option>
                        <option value="batch">"batch size"</option>
                        <option value="qk_layernorm" disabled=move || state.run.experiment.get().gpt().is_none()>"q/k LayerNorm (transformer)"</option>
                        <option value="tie_embeddings" disabled=move || state.run.experiment.get().gpt().is_none()>"tied head (transformer)"</option>
                        <option value="z_loss" disabled=move || state.run.experiment.get().gpt().is_none()>"z-loss (transformer)"</option>
                    </select>
                </label>
                <label class="field">
                    <span>"Values (2–4)"</span>
                    <input type="text" data-testid="race-values" prop:value=move || values.get()
                        on:change=move |ev| values.set(event_target_value(&ev))/>
                </label>
                <label class="field">
                    <span>"Steps"</span>
                    <span class="with-unit">
                        <input type="text" inputmode="numeric" data-testid="race-steps" prop:value=move || steps.get()
                            on:change=move |ev| steps.set(event_target_value(&ev))/>
                        <span class="unit">"each (0: until ended)"</span>
                    </span>
                </label>
                <button data-testid="race-start" on:click=on_start>"Start race"</button>
                <button data-testid="race-end" on:click=on_end prop:disabled=move || !under_way()>"End race"</button>
            </div>
            <p class="race-status" data-testid="race-status">{status}</p>
            // The lanes and their curves, once a race has started.
            <table class="race-lanes" data-testid="race-view" hidden=move || race.with(|r| r.is_none())>
                <thead><tr><th>"run"</th><th>"steps"</th><th>"last step loss"</th><th>"train / test loss"</th><th>"accuracy"</th></tr></thead>
                <tbody>
                    <For each=lanes key=|l| (l.label.clone(), l.step, l.done, l.train.map(|t| t.loss.to_bits())) children=move |lane: LaneView| {
                        let loss = |e: Option<stepscope_core::engine::Evaluation>| e.map_or("–".into(), |e| format!("{:.4}", e.loss));
                        let accuracy = lane.test.or(lane.train).and_then(|t| t.accuracy);
                        view! {
                            <tr data-testid="race-lane" class:done=lane.done>
                                <td class="race-label">{lane.label.clone()}{lane.error.clone().map(|e| format!(" ({e})"))}</td>
                                <td data-testid="race-lane-step" data-value=lane.step.to_string()>{count(lane.step)}</td>
                                <td data-testid="race-lane-loss" data-value=exact(lane.last_loss)>
                                    {lane.last_loss.map(|v| format!("{v:.6}")).unwrap_or("–".into())}
                                </td>
                                <td>{format!("{} / {}", loss(lane.train), loss(lane.test))}</td>
                                <td>{accuracy.map_or("–".into(), |a| format!("{:.1} %", a * 100.0))}</td>
                            </tr>
                        }
                    }/>
                </tbody>
            </table>
            <div class="race-charts" hidden=move || race.with(|r| r.is_none())>
                <LineChart testid="race-loss" title="Loss (each step's batch)" unit="loss" empty="Start a race"
                    series=series(|l| to_f64(&l.step_loss)) log_switch=true smoothing=0.6/>
                <LineChart testid="race-test-loss" title="Test loss" unit="loss" empty="Start a race"
                    series=series(|l| to_f64(&l.curves.test_loss)) log_switch=true/>
                <LineChart testid="race-grad-norm" title="Gradient norm" unit="‖g‖" empty="Start a race"
                    series=series(|l| to_f64(&l.curves.grad_norm)) log=true log_switch=true/>
            </div>
        </div>
    }
}

fn to_f64(curve: &[(u64, f32)]) -> Vec<(u64, f64)> {
    curve.iter().map(|&(s, v)| (s, f64::from(v))).collect()
}
