//! Open a run from outside (`open-run`): metrics logs from `stepscope
//! train` or the exported PyTorch script (one file per rank), Stepscope
//! traces, PyTorch profiler traces. The files are read in the training
//! worker (`model::opened`), never on this thread; the live run goes on.
//! The opened run is drawn with the page's own views: its curves, its
//! steps' timeline by phase, the share spent waiting for data with the
//! slow-loader verdict, the GPU's idle share, each rank against the median.

use leptos::prelude::*;
use stepscope_core::runs::RunLimits;

use super::anatomy::COLORS;
use super::chart::{LineChart, Series};
use super::data::{file_part, UPLOAD_PART_BYTES};
use crate::model::opened::{OpenedView, StepBar};
use crate::model::runner::Command;
use crate::model::timeline::PHASES;
use crate::model::words::{bytes, count};
use crate::state::AppState;

/// The timeline's colour of a phase: the live anatomy's where it has the
/// phase, its own for what only runs elsewhere have.
fn color(phase: &str) -> &'static str {
    match phase {
        "communication" => "#d81b60",
        "gpu wait" => "#7b1fa2",
        _ => PHASES.iter().position(|p| *p == phase).map_or(COLORS[11], |k| COLORS[k]),
    }
}

fn percent(share: f64) -> String {
    format!("{:.1} %", 100.0 * share)
}

#[component]
pub fn OpenRunPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let opened = state.runs.opened;
    let reading = RwSignal::new(false);
    // Which choice of files is being sent: a newer one stops an older one.
    let choice = StoredValue::new(0u64);
    let on_open = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(list) = input.files() else { return };
        let files: Vec<web_sys::File> = (0..list.length()).filter_map(|i| list.get(i)).collect();
        input.set_value("");
        if files.is_empty() {
            return;
        }
        // The core's limits, checked on the files' sizes before a byte is
        // read (and on the bytes as they arrive, `RunParts`).
        let names: Vec<String> = files.iter().map(|f| format!("`{}`", f.name())).collect();
        let sizes = names.iter().zip(&files).map(|(name, f)| (name.as_str(), f.size() as u64));
        if let Err(e) = RunLimits::PAGE.check_sizes(sizes) {
            state.run.alert.set(Some(format!(
                "The run was not opened: {e} (on the page; `stepscope open` reads up to {}).",
                bytes(RunLimits::CLI.total_bytes as u64)
            )));
            return;
        }
        reading.set(true);
        choice.update_value(|c| *c += 1);
        let mine = choice.get_value();
        leptos::task::spawn_local(async move {
            // Each file a part a frame, as an upload is sent: no one
            // message copies a large trace whole on this thread. The
            // engine's side gathers the parts and reads them; parts of an
            // earlier choice still there are dropped first.
            state.command(Command::DropRunParts);
            for (index, file) in files.iter().enumerate() {
                let (name, size) = (file.name(), file.size());
                let mut start = 0.0;
                loop {
                    let end = (start + UPLOAD_PART_BYTES).min(size);
                    let part = file_part(file, start, end).await;
                    if choice.get_value() != mine {
                        return; // files chosen since: they are sent instead
                    }
                    let Some(part) = part else {
                        state.command(Command::DropRunParts);
                        reading.set(false);
                        state.run.alert.set(Some(format!("The run was not opened: could not read `{name}`.")));
                        return;
                    };
                    state.command(Command::RunPart(index, name.clone(), part));
                    while state.commands_pending() {
                        crate::model::runner::next_frame().await;
                    }
                    if end >= size {
                        break;
                    }
                    start = end;
                }
            }
            if choice.get_value() == mine {
                state.command(Command::OpenRun);
                reading.set(false);
            }
        });
    };
    view! {
        <section class="panel opened" aria-label="Open a run">
            <h2>"Open a run"</h2>
            <p class="note">
                "A metrics log from " <code>"stepscope train --metrics"</code> " or the exported PyTorch script (under torchrun, choose every rank's file together), a Stepscope trace, or a PyTorch profiler trace ("
                <code>".json"</code> ", " <code>".json.gz"</code> "). Read in the training worker; the run training here goes on."
            </p>
            <label class="field">
                <span>"Files"</span>
                <input type="file" multiple data-testid="open-run" aria-label="Open a run from files"
                    accept=".json,.jsonl,.gz,application/json" on:change=on_open/>
            </label>
            <Show when=move || reading.get()>
                <p class="note">"Reading…"</p>
            </Show>
            {move || opened.get().map(|view| view! { <OpenedRun view=view/> })}
        </section>
    }
}

#[component]
fn OpenedRun(view: OpenedView) -> impl IntoView {
    let series = |name: &str, curve: &[(u64, f32)], class: &str| {
        let points: Vec<(u64, f64)> = curve.iter().map(|&(s, v)| (s, f64::from(v))).collect();
        let shown =
            if points.is_empty() { Vec::new() } else { vec![Series::new(name.to_string(), class.to_string(), points)] };
        Signal::derive(move || shown.clone())
    };
    let (loss, grad_norm, lr) = (
        series("loss", &view.loss, "s0"),
        series("gradient norm", &view.grad_norm, "s1"),
        series("learning rate", &view.lr, "s2"),
    );
    let step_ms: f64 = view.mean_phases.iter().map(|(_, ms)| ms).sum();
    let means = view
        .mean_phases
        .iter()
        .map(|(name, ms)| {
            view! {
                <li><span class="swatch" style=format!("background:{}", color(name))></span>
                    {name.clone()} " " {format!("{ms:.3} ms · {}", percent(ms / step_ms.max(f64::MIN_POSITIVE)))}</li>
            }
        })
        .collect_view();
    let longest = view.timeline.iter().fold(1e-9f64, |m, s| m.max(s.wall_ms));
    let bars = view.timeline.iter().map(|s| step_bar(s, longest)).collect_view();
    let gap = view
        .gpu_longest_gap_ms
        .map_or(String::new(), |ms| format!(" The longest gap with nothing on the GPU: {ms:.3} ms."));
    let gpu = view.gpu.map(|[compute, communication, memory, idle]| {
        view! {
            <p data-testid="opened-run-gpu-idle" data-value=idle.to_string()>
                "GPU idle: " <b>{percent(idle)}</b> " of the span from its first event to its last; compute "
                {percent(compute)} ", communication " {percent(communication)} ", memory " {percent(memory)}
                " (Holistic Trace Analysis's temporal breakdown: compute first, then NCCL kernels, then copies, sets and syncs)."
                {gap.clone()}
            </p>
        }
    });
    let ranks = view
        .ranks
        .iter()
        .map(|r| {
            view! {
                <tr data-rank=r.rank.to_string() data-step-ms=r.step_ms.to_string() data-compute-ms=r.compute_ms.to_string()
                    class:straggler=r.straggler>
                    <td>{format!("rank {}", r.rank)}</td>
                    <td class="num">{count(r.steps as u64)}</td>
                    <td class="num">{format!("{:.3} ms", r.step_ms)}</td>
                    <td class="num">{format!("{:.3} ms", r.compute_ms)}</td>
                    <td class="num">{format!("{:.2}×", r.ratio)}</td>
                    <td class="num">{percent(r.communication_share)}</td>
                    <td>{if r.straggler { "straggler" } else { "" }}</td>
                </tr>
            }
        })
        .collect_view();
    let no_curves = view.loss.is_empty() && view.grad_norm.is_empty();
    view! {
        <div class="opened-run" data-testid="opened-run" data-kind=view.kind.clone() data-steps=view.steps.to_string()>
            <h3>{view.describe()}</h3>
            <p class="note">"Read-only: an opened run cannot be trained. It joins the runs list, where it can be compared with the runs trained here."</p>
            <Show when=move || !no_curves fallback=|| view! { <p class="note">"This file logs no loss or gradient norm (a PyTorch profiler trace has only times)."</p> }>
                <div class="opened-charts">
                    <LineChart testid="opened-run-loss" title="Loss (as logged, per step)" unit="loss" empty="The file logs no loss over steps"
                        series=loss log_switch=true/>
                    <LineChart testid="opened-run-grad-norm" title="Gradient norm" unit="‖g‖" empty="The file logs no gradient norm over steps"
                        series=grad_norm log_switch=true/>
                    <LineChart testid="opened-run-lr" title="Learning rate" unit="lr" empty="The file logs no learning rate over steps"
                        series=lr decimals=6/>
                </div>
            </Show>
            <h4>{format!("Mean step: {step_ms:.3} ms")}</h4>
            <ul class="legend">{means}</ul>
            <h4>{
                let rank = view.ranks.first().map_or(0, |r| r.rank);
                match view.timeline.len() {
                    1 => format!("Its step on rank {rank}"),
                    n => format!("The last {n} steps of rank {rank}"),
                }
            }</h4>
            <div class="opened-timeline" data-testid="opened-run-timeline">{bars}</div>
            <p data-testid="opened-run-data-share" data-value=view.data_share.to_string()>
                "Waiting for data: " <b>{percent(view.data_share)}</b> " of step time: " {view.verdict.clone()} "."
            </p>
            {gpu}
            <table class="memory opened-ranks" data-testid="opened-run-ranks">
                <thead><tr><th>"rank"</th><th>"steps"</th><th>"median step"</th><th title="data, forward and backward: what a rank does before the others can reduce with it">"before the all-reduce"</th><th>"against the median"</th><th>"communication"</th><th></th></tr></thead>
                <tbody>{ranks}</tbody>
            </table>
        </div>
    }
}

/// One step as a bar of its phases, as wide as its wall time against the
/// longest shown.
fn step_bar(s: &StepBar, longest: f64) -> impl IntoView {
    let parts = s
        .phases
        .iter()
        .map(|(name, ms)| {
            let style = format!("width:{:.3}%;background:{}", 100.0 * ms / longest, color(name));
            view! {
                <span class="opened-phase" data-phase=name.clone() data-ms=ms.to_string() style=style
                    title=format!("{name}: {ms:.3} ms")></span>
            }
        })
        .collect_view();
    view! {
        <div class="opened-step" data-step=s.step.to_string() data-ms=s.wall_ms.to_string()
            title=format!("step {}: {:.3} ms", s.step, s.wall_ms)>{parts}</div>
    }
}
