//! The runs kept since the page was opened (`runs-list`), the comparison
//! of the chosen ones (`compare-runs`: their curves overlaid and what
//! differs between their experiments), and the race (`panels::race`).

use leptos::prelude::*;

use super::chart::{LineChart, Series};
use super::race::RacePanel;
use crate::model::runs::{experiment_diff, Curve, RunCurves, RunRecord};
use crate::model::words::count;
use crate::model::words::exact;
use crate::state::{AppState, RunsState};

/// One line of the runs list (no curves: the list redraws often).
#[derive(Clone, Debug, PartialEq)]
struct Row {
    id: u64,
    label: String,
    live: bool,
    setup: String,
    steps: u64,
    figures: String,
    last_loss: Option<f32>,
    engine: String,
}

fn row(r: &RunRecord, live: bool) -> Row {
    let loss = |v: Option<f32>| v.map_or("–".into(), |v| format!("{v:.4}"));
    let Some(e) = &r.experiment else {
        // A run opened from files: what they logged, read-only.
        return Row {
            id: r.id,
            label: r.label.clone(),
            live,
            setup: "opened from files, read-only: it cannot be trained here".into(),
            steps: r.steps,
            figures: format!("last logged loss {}", loss(r.curves.train_loss.last().map(|p| p.1))),
            last_loss: r.last_step_loss,
            engine: r.engine.clone(),
        };
    };
    let accuracy = r.accuracy.map(|a| format!(" · accuracy {:.1} %", a * 100.0)).unwrap_or_default();
    Row {
        id: r.id,
        label: r.label.clone(),
        live,
        setup: format!(
            "{} · lr {} · batch {} · {} · {}",
            e.optimizer.name(),
            e.optimizer.lr(),
            e.batch_size,
            crate::model::edit::model_summary(e),
            format!("{:?}", e.data.source).to_lowercase()
        ),
        steps: r.steps,
        figures: format!("train {} · test {}{accuracy}", loss(r.train_loss), loss(r.test_loss)),
        last_loss: r.last_step_loss,
        engine: r.engine.clone(),
    }
}

#[component]
pub fn RunsPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let runs = state.runs;
    // Newest first; the run training now on top.
    let rows = Memo::new(move |_| {
        let mut rows: Vec<Row> = runs.list.with(|l| l.runs().rev().map(|r| row(r, false)).collect());
        if let Some(live) = runs.live.get().filter(|r| r.steps > 0) {
            rows.insert(0, row(&live, true));
        }
        rows
    });
    let entry = move |r: Row| {
        let id = r.id;
        let checked = move || runs.selected.with(|s| s.contains(&id));
        let on_check = move |ev| runs.toggle(id, event_target_checked(&ev));
        let label = if r.live { format!("{} (training now)", r.label) } else { r.label.clone() };
        view! {
            <li data-testid="run-entry" data-run-id=id.to_string() class:live=r.live
               >
                <label class="run-name">
                    <input type="checkbox" data-testid="run-select" prop:checked=checked on:change=on_check/>
                    <b>{label}</b>
                </label>
                <span class="run-setup">{r.setup}</span>
                <span class="run-steps" data-testid="run-steps" data-value=r.steps.to_string()>
                    {format!("{} steps", count(r.steps))}
                </span>
                <span class="run-figures">{r.figures}</span>
                <span class="run-last-loss" data-testid="run-last-loss" data-value=exact(r.last_loss)
                    title="The last step's mini-batch loss">
                    {r.last_loss.map(|v| format!("last step {v:.6}")).unwrap_or_default()}
                </span>
                <span class="run-engine">{r.engine}</span>
            </li>
        }
    };
    view! {
        <section class="panel runs" aria-label="Runs">
            <h2>"Runs"</h2>
            <p class="note">"Every run in this browser, kept across reloads (at most 50). Choose two or more to compare them."</p>
            <ul class="runs-list" data-testid="runs-list" data-stored=move || runs.stored.get().to_string()>
                <For each=move || rows.get() key=|r| format!("{r:?}") children=entry/>
            </ul>
            <button data-testid="runs-clear" on:click=move |_| runs.forget(state.run.notice)
                prop:disabled=move || runs.list.with(|l| l.is_empty())>"Forget the kept runs"</button>
            <Compare runs=runs/>
            <RacePanel/>
        </section>
    }
}

/// The chosen runs' curves overlaid, and what differs between them.
#[component]
fn Compare(runs: RunsState) -> impl IntoView {
    let chosen = Memo::new(move |_| {
        let ids = runs.selected.get();
        ids.into_iter().filter_map(|id| runs.run(id)).collect::<Vec<RunRecord>>()
    });
    let series = move |curve: fn(&RunCurves) -> &Curve, scale: f64| {
        Signal::derive(move || {
            let chosen = chosen.get();
            if chosen.len() < 2 {
                return Vec::new();
            }
            chosen
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let points = curve(&r.curves).iter().map(|&(s, v)| (s, f64::from(v) * scale)).collect();
                    Series::new(r.label.clone(), format!("s{}", i % 6), points)
                })
                .collect::<Vec<Series>>()
        })
    };
    let differences = move || {
        let chosen = chosen.get();
        let first = chosen.first()?.clone();
        let lines: Vec<(String, String)> = chosen[1..]
            .iter()
            .map(|r| {
                let text = match (&first.experiment, &r.experiment) {
                    (Some(a), Some(b)) => {
                        let diff = experiment_diff(a, b);
                        if diff.is_empty() {
                            "the same experiment".to_string()
                        } else {
                            diff.join("; ")
                        }
                    }
                    _ => "an opened run: its files hold no experiment to compare, only its curves".to_string(),
                };
                (format!("{} → {}", first.label, r.label), text)
            })
            .collect();
        Some(lines.into_iter().map(|(who, what)| view! { <li><b>{who}</b>": "{what}</li> }).collect_view())
    };
    let enough = move || chosen.with(|c| c.len() >= 2);
    view! {
        <div class="compare" data-testid="compare-runs">
            <Show when=enough fallback=|| view! { <p class="note">"Choose two or more runs above to overlay their curves."</p> }>
                <ul class="compare-diff" data-testid="compare-diff">{differences}</ul>
            </Show>
            // Drawn once two runs are chosen (no four empty frames before).
            <div class="compare-charts" hidden=move || !enough()>
                <LineChart testid="compare-loss" title="Train loss" unit="loss" empty="Choose two or more runs"
                    series=series(|c| &c.train_loss, 1.0) log_switch=true/>
                <LineChart testid="compare-test-loss" title="Test loss" unit="loss" empty="Choose two or more runs"
                    series=series(|c| &c.test_loss, 1.0) log_switch=true/>
                <LineChart testid="compare-accuracy" title="Accuracy" unit="%" empty="Choose two or more runs"
                    series=series(|c| &c.accuracy, 100.0) decimals=1/>
                <LineChart testid="compare-grad-norm" title="Gradient norm" unit="‖g‖" empty="Choose two or more runs"
                    series=series(|c| &c.grad_norm, 1.0) log=true log_switch=true/>
            </div>
        </div>
    }
}
