//! Anatomy of a training step: where each step's time went (a stacked bar
//! per recent step, and means that add up to the wall time), the FLOPs of
//! forward and backward against their measured times, the memory the
//! engine's buffers hold, the gradient norm, and checkpoints you can
//! download, restore and verify.

use leptos::prelude::*;
use stepscope_core::engine::{CheckpointingTrade, Timing};
use stepscope_core::model::Layout;
use wasm_bindgen_futures::JsFuture;

use super::inside::InsideStep;
use super::layers::LayerPanel;
use super::lessons::Lessons;
use super::profile::{clock_line, profile_summary, split_line, why_off, ProfileTable};
use super::steps::StepCharts;
use crate::model::runner::Command;
use crate::model::timeline::{means, part, shown_means, MEANINGS, PHASES};
use crate::model::words::{big, bytes, count, duration_ms, value};
use crate::state::AppState;

/// Steps drawn in the timeline.
const SHOWN: usize = 60;
pub const COLORS: [&str; 13] = [
    "#9e9e9e", "#0877bd", "#f59322", "#2ea043", "#5b8fb9", "#8e44ad", "#c0392b", "#e6b800", "#6d4c41", "#00897b",
    "#ad1457", "#ff5722", "#d0d0d0",
];

#[component]
pub fn AnatomyPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let recent = move || {
        let t = state.charts.timeline.get();
        let start = t.len().saturating_sub(SHOWN);
        t[start..].to_vec()
    };
    let bars = move || {
        let shown = recent();
        let max = shown.iter().fold(1e-9f64, |m, s| m.max(s.wall_ms));
        let (w, h) = (360.0, 90.0);
        let bar = w / SHOWN as f64;
        shown
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let mut y = h;
                s.parts
                    .iter()
                    .enumerate()
                    .filter_map(|(k, part)| {
                        let height = part / max * h;
                        y -= height;
                        // Parts too thin to see are left out: fewer
                        // elements for the page to lay out and paint.
                        (height >= 0.05).then(|| view! { <rect x=format!("{:.1}", i as f64 * bar) y=format!("{y:.2}") width=format!("{:.1}", bar * 0.85)
                            height=format!("{height:.2}") fill=COLORS[k]/> })
                    })
                    .collect::<Vec<_>>()
            })
            .collect_view()
    };
    let legend = move || {
        let summary = profile_summary(&state.charts.profiles.get());
        let (wall, parts, _) = shown_means(&recent(), summary.as_ref());
        let items = PHASES
            .iter()
            .enumerate()
            .map(|(k, name)| {
                view! {
                    <li title=MEANINGS[k]><span class="swatch" style=format!("background:{}", COLORS[k])></span>
                        {*name} " " <span data-testid=format!("phase-ms-{name}") data-value=parts[k].to_string()>{format!("{:.3}", parts[k])}</span>" ms"</li>
                }
            })
            .collect_view();
        view! {
            <ul class="legend">{items}</ul>
            <p>"Mean step: " <span data-testid="step-wall-ms">{format!("{wall:.3}")}</span>" ms over the last "
                {count(recent().len() as u64)}" steps"</p>
        }
    };
    let timing_note = move || {
        match state.run.last_metrics.get().map(|m| m.timing) {
        Some(Timing::GpuTimestamps) => "GPU phases from timestamp queries; data adds the CPU's preparation.",
        Some(Timing::GpuCoarse) => {
            "This adapter has no timestamp queries: each GPU step is timed whole (unsplit), and its phases cannot be timed apart."
        }
        Some(Timing::GpuTotal) => "Each GPU step is one pass, timed whole (unsplit).",
        Some(Timing::GpuFused) => {
            "Fused step: one GPU dispatch runs every phase of several steps, so its GPU time is one number (unsplit, shared evenly per step); the profiled steps below time the phases apart."
        }
        Some(Timing::Cpu) => "Each phase timed by the clock on the CPU engine.",
        None => "",
    }
    };
    // Where the timeline's forward, backward and optimizer come from, when
    // not from the clock's readings of each step.
    let split_note = move || {
        let r = state.charts.phase_clock.get().map_or(0.0, |(_, r)| r);
        split_line(&recent(), profile_summary(&state.charts.profiles.get()), r)
    };
    let clock = move || clock_line(state.charts.phase_clock.get());
    let profiled = move || profile_summary(&state.charts.profiles.get());
    let flops = move || {
        let e = state.run.experiment.get();
        let (f, b) = e.step_flops();
        let flop_ratio = b / f.max(1.0);
        let measured = match profile_summary(&state.charts.profiles.get()) {
            Some(p) if p.forward.resolved() && p.backward.resolved() => {
                let ratio = p.backward.ms / p.forward.ms;
                let verdict = if ratio / flop_ratio <= 1.5 && flop_ratio / ratio <= 1.5 {
                    "within 1.5× of the FLOP ratio".to_string()
                } else {
                    format!(
                        "{:.1}× off the FLOP ratio: {}",
                        (ratio / flop_ratio).max(flop_ratio / ratio),
                        why_off(&e, p.path, ratio < flop_ratio)
                    )
                };
                format!("; measured in the profiled steps, forward : backward 1 : {ratio:.2} ({verdict})")
            }
            Some(_) => {
                "; the profiled steps did not resolve forward and backward apart (below the clock's resolution)".into()
            }
            None => "; measured forward : backward comes with the first profiled step".into(),
        };
        format!("FLOPs per step: forward {}, backward {} (1 : {flop_ratio:.2}){measured}", big(f), big(b))
    };
    let overhead = move || {
        let (wall, parts) = means(&recent());
        let compute: f64 = parts[part::DATA..=part::UNSPLIT].iter().sum();
        (wall > 0.0 && compute < 0.5 * wall).then(|| {
            format!(
                "On this network the step's arithmetic (data, forward, backward, optimizer) is {:.0} % of the step; the rest is the loop around it (engine, messaging, page, logging). A network this small is overhead-bound: a bigger batch or wider layers raise the arithmetic's share.",
                100.0 * compute / wall
            )
        })
    };
    let memory = state.run.memory;
    let grad_norm =
        move || {
            state.run.last_metrics.get().map_or("–".into(), |m| {
                let clip =
                    state.run.experiment.get().clip_grad_norm.map_or(String::new(), |c| {
                        format!(" (clip at {c}{})", if m.clipped { ", clipped" } else { "" })
                    });
                format!("{}{clip}", value(f64::from(m.grad_norm), 4))
            })
        };
    let on_checkpointing = move |ev| {
        let on = event_target_checked(&ev);
        state.lessons.activation_checkpointing.set(on);
        state.command(Command::ActivationCheckpointing(on));
    };
    // The stored activations (and attention) each mode's buffers held, as
    // last measured for this model and batch: the trade's memory side from
    // the run itself. A report counts only once its buffers are the
    // current experiment's in that mode (a reset's first frames may still
    // report the last run's).
    let stored_by_mode = RwSignal::new((String::new(), [None::<u64>; 2]));
    Effect::new(move |_| {
        let (e, m) = (state.run.experiment.get(), memory.get());
        let on = state.lessons.activation_checkpointing.get();
        let key = format!("{:?} {}", e.model, e.batch_size);
        let current = crate::model::gpt_lessons::buffers_are_current(&e, on, &m);
        stored_by_mode.update(|(k, s)| {
            if *k != key {
                (*k, *s) = (key, [None; 2]);
            }
            if current && m.activations > 0 {
                s[usize::from(on)] = Some(m.activations + m.attention);
            }
        });
    });
    let trade = move || {
        let e = state.run.experiment.get();
        let t = CheckpointingTrade::new(&Layout::new(&e), e.batch_size);
        let mean = |v: &Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let [off, on] = state.charts.backward_by_mode.get();
        let measured = match (mean(&off), mean(&on)) {
            (Some(a), Some(b)) => {
                format!("backward measured {a:.3} ms without, {b:.3} ms with ({:+.0} %)", 100.0 * (b - a) / a.max(1e-9))
            }
            _ => "train with it off and on to measure the time it adds to backward".into(),
        };
        if e.gpt().is_some() {
            let buffers = match stored_by_mode.get().1 {
                [Some(a), Some(b)] => format!("; the buffers held {} without, {} with", bytes(a), bytes(b)),
                _ => String::new(),
            };
            return format!(
                "Keeping only each block's input saves {} B ({}) of stored activations and attention probabilities per micro-batch{buffers}, for one more forward of every block in backward: {} FLOPs per micro-batch (+{:.0} % of the step's); {measured}. The op breakdown's recompute line is that forward, block by block.",
                t.bytes_saved,
                bytes(t.bytes_saved),
                big(t.extra_flops as f64),
                100.0 * t.flops_added()
            );
        }
        format!(
            "Recomputing z saves {} B ({}) of stored activations per micro-batch (4·B·(ΣO − max O)) for {} extra FLOPs per micro-batch (+{:.0} % of the step's matmuls); {measured}.",
            t.bytes_saved,
            bytes(t.bytes_saved),
            big(t.extra_flops as f64),
            100.0 * t.flops_added()
        )
    };
    let download = move |_| state.command(Command::SaveCheckpoint);
    let on_every = move |ev| match event_target_value(&ev).trim().parse::<u64>() {
        Ok(n) => {
            state.run.alert.set(None);
            state.checkpoints.checkpoint_every.set(n);
        }
        Err(_) => state.run.alert.set(Some(format!(
            "Checkpoint every: `{}` is not a whole number of steps (0 turns automatic checkpoints off).",
            event_target_value(&ev)
        ))),
    };
    let checkpoint_status = move || match state.checkpoints.last_checkpoint.get() {
        None => "No automatic checkpoint yet.".to_string(),
        Some(Err(message)) => format!("Automatic checkpoint failed: {message}"),
        Some(Ok(r)) => {
            let stored = match &r.stored {
                Ok(()) => "kept in memory and in this browser (IndexedDB)".to_string(),
                Err(m) => format!("kept in memory only ({m})"),
            };
            let how = if r.background {
                format!(
                    "in the background: the loop waited {}; readback, serialization and storage took {} beside training",
                    duration_ms(r.loop_ms),
                    duration_ms(r.total_ms)
                )
            } else {
                format!(
                    "synchronously: the loop stalled {} for readback, serialization and storage",
                    duration_ms(r.loop_ms)
                )
            };
            format!("Step {}: {}, {stored}; taken {how}.", count(r.step), bytes(r.bytes as u64))
        }
    };
    let verify = move |_| {
        state.checkpoints.verify_result.set(None);
        state.command(Command::VerifyRestore);
    };
    let restore = move |ev: web_sys::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let Some(file) = input.files().and_then(|f| f.get(0)) else { return };
        let name = file.name();
        if file.size() > 512.0 * 1024.0 * 1024.0 {
            state.run.alert.set(Some(format!("`{name}` is larger than 512 MiB: not a Stepscope checkpoint.")));
            return;
        }
        leptos::task::spawn_local(async move {
            match JsFuture::from(file.array_buffer()).await {
                Ok(buffer) => {
                    let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
                    let (locked, current) = (state.run.locked.get_untracked(), state.run.experiment.get_untracked());
                    if let Err(message) = crate::model::classroom::check_restore(locked, &current, &bytes) {
                        state.run.alert.set(Some(message));
                        return;
                    }
                    // Checked whole on the engine's side before the run is
                    // replaced (parsing a large file here would hold the
                    // page): a refused file changes nothing, not even the
                    // play state; a restored run is paused.
                    state.command(Command::RestoreCheckpoint(std::sync::Arc::new(bytes)));
                }
                Err(_) => state.run.alert.set(Some(format!("Could not read `{name}`."))),
            }
        });
    };
    let is_gpt = move || state.run.experiment.get().gpt().is_some();
    // What each buffer would take at twice the context, from the shape
    // (`MemoryBytes::estimate`): the attention probabilities grow four
    // times, the other activations twice, parameters by the position
    // embedding alone.
    let doubled = move |pick: fn(&stepscope_core::engine::MemoryBytes) -> u64| {
        move || {
            let mut e = state.run.experiment.get();
            let g = e.model.gpt.as_mut()?;
            g.context *= 2;
            let m = stepscope_core::engine::MemoryBytes::estimate(&e, state.lessons.activation_checkpointing.get());
            Some(view! { <td class="doubled" data-testid="memory-doubled">{bytes(pick(&m))}</td> })
        }
    };
    view! {
        <section class="panel anatomy" aria-label="Anatomy of a training step">
            <h2>"Anatomy of a step"</h2>
            <div class="anatomy-grid">
            <details class="section wide" data-testid="section-timeline" open>
                <summary>"Timeline" <span class="hint">"where each step's time goes"</span></summary>
                <div class="body">
            <div class="timeline">
                <svg data-testid="phase-timeline" viewBox="0 0 360 90" width="360" height="90" role="img"
                    aria-label="Time per phase of the recent steps">{bars}</svg>
                <div>{legend}</div>
            </div>
            <p class="note">{timing_note}" Every part is measured (hover a name for what it holds); overlapping time is assigned by a fixed priority (forward, backward, optimizer, unsplit, data, then the rest), so the parts add up to the step."</p>
            <super::ranks::RanksPanel/>
            <p class="note" data-testid="timeline-split">{split_note}</p>
            <p class="note" data-testid="clock-resolution">{clock}</p>
            {move || profiled().map(|p| view! { <ProfileTable p/> })}
            <Show when=is_gpt>
                <super::gpt::OpBreakdown/>
            </Show>
            <Show when=move || !is_gpt()>
                <super::layer_table::LayerTablePanel/>
            </Show>
            <p class="note" data-testid="flops">{flops}</p>
            <p class="note" data-testid="overhead-note">{overhead}</p>
                </div>
            </details>
            <details class="section" data-testid="section-memory" open>
                <summary>"Memory" <span class="hint">"the engine's buffers"</span></summary>
                <div class="body">
            <table class="memory">
                <Show when=is_gpt>
                    <tr class="head"><td></td><td></td><td>"now"</td><td title="Computed from the shape (MemoryBytes::estimate); double the context to see the buffers confirm it">"context ×2"</td></tr>
                </Show>
                <tr><td>"Parameters"</td><td data-testid="memory-params-bytes">{move || memory.get().params}</td><td>{move || bytes(memory.get().params)}</td>{doubled(|m| m.params)}</tr>
                <tr><td>"Gradients"</td><td data-testid="memory-grads-bytes">{move || memory.get().grads}</td><td>{move || bytes(memory.get().grads)}</td>{doubled(|m| m.grads)}</tr>
                <tr><td>"Optimizer state"</td><td data-testid="memory-optimizer-bytes">{move || memory.get().optimizer}</td><td>{move || bytes(memory.get().optimizer)}</td>{doubled(|m| m.optimizer)}</tr>
                <tr><td>"Stored activations"</td><td data-testid="memory-activations-bytes">{move || memory.get().activations}</td><td>{move || bytes(memory.get().activations)}</td>{doubled(|m| m.activations)}</tr>
                <Show when=is_gpt>
                    <tr title="B·H·T² per block kept: the part that grows with the square of the context"><td>"Attention probabilities"</td>
                        <td data-testid="memory-attention-bytes">{move || memory.get().attention}</td><td>{move || bytes(memory.get().attention)}</td>{doubled(|m| m.attention)}</tr>
                </Show>
                <tr><td>"Peak during backward"</td><td data-testid="memory-peak-bytes">{move || memory.get().peak_backward()}</td><td>{move || bytes(memory.get().peak_backward())}</td>{doubled(|m| m.peak_backward())}</tr>
            </table>
            {move || {
                let e = state.run.experiment.get();
                (e.shards > 1).then(|| view! { <p class="note" data-testid="memory-shard-note">{format!(
                    "A sharded run's activations, attention probabilities and backward buffers are one shard's: {} of the batch's {} rows, which each rank holds for the shard it computes.",
                    e.batch_size / e.shards, e.batch_size)}</p> })
            }}
            <label class="field check">
                <input type="checkbox" data-testid="activation-checkpointing" prop:checked=move || state.lessons.activation_checkpointing.get() on:change=on_checkpointing/>
                <span>{move || if is_gpt() {
                    "Activation checkpointing: keep each block's input and recompute the block in backward"
                } else {
                    "Activation checkpointing: recompute pre-activations in backward instead of storing them"
                }}</span>
            </label>
            <p class="note" data-testid="checkpointing-trade">{trade}</p>
                </div>
            </details>
            <details class="section" data-testid="section-gradients" open>
                <summary>"Gradients" <span class="hint">"the norm warns before the loss explodes"</span></summary>
                <div class="body">
            <p>"Gradient norm: " <span data-testid="grad-norm">{grad_norm}</span></p>
            <StepCharts/>
                </div>
            </details>
            <details class="section wide" data-testid="section-inside" open>
                <summary>"Inside a step" <span class="hint">"one phase at a time"</span></summary>
                <div class="body">
            <InsideStep/>
                </div>
            </details>
            <details class="section wide" data-testid="section-layers" open>
                <summary>"Layers over time" <span class="hint">"distributions per layer"</span></summary>
                <div class="body">
            <LayerPanel/>
                </div>
            </details>
            <details class="section wide" data-testid="section-lessons" open>
                <summary>"Lessons" <span class="hint">"break the run on purpose"</span></summary>
                <div class="body">
            <Lessons/>
                </div>
            </details>
            <details class="section wide" data-testid="section-checkpoints" open>
                <summary>"Checkpoints" <span class="hint">"save, restore, verify, continue in PyTorch"</span></summary>
                <div class="body">
            <div class="checkpoints">
                <button data-testid="download-checkpoint" aria-label="Download a checkpoint" on:click=download>"Download .safetensors"</button>
                <label class="field">
                    <span>"Restore from a file"</span>
                    <input type="file" accept=".safetensors" data-testid="restore-checkpoint" aria-label="Restore a checkpoint" on:change=restore/>
                </label>
                <button data-testid="verify-restore" aria-label="Verify that a checkpoint restores exactly" on:click=verify>"Verify restore"</button>
            </div>
            <div class="checkpoints">
                <button data-testid="export-pytorch" aria-label="Export a PyTorch script" on:click=move |_| state.command(Command::ExportPytorch)>"Export PyTorch script"</button>
                <button data-testid="export-data" aria-label="Download the training rows as CSV" on:click=move |_| state.command(Command::ExportData)>"Training rows (.csv)"</button>
            </div>
            <p class="note">"Continue this run outside the browser: download a checkpoint, the script and the training rows, then "<code>"python stepscope_continue.py stepscope-stepN.safetensors --data stepscope-train.csv --out next.safetensors"</code>" (add "<code>"--device cuda"</code>" for a GPU, or start it with "<code>"torchrun --standalone --nproc_per_node N"</code>" for several). The script rebuilds the same model, optimizer and schedule in PyTorch, loads the checkpoint, feeds the rows in Stepscope's order, and writes a checkpoint this page restores (docs/export.md)."</p>
            <div class="row autosave">
                <label class="field">
                    <span>"Automatic checkpoint every (steps, 0 = off)"</span>
                    <input type="number" min="0" data-testid="checkpoint-every" prop:value=move || state.checkpoints.checkpoint_every.get().to_string() on:change=on_every/>
                </label>
                <label class="field check">
                    <input type="checkbox" data-testid="checkpoint-background" prop:checked=move || state.checkpoints.checkpoint_background.get()
                        on:change=move |ev| state.checkpoints.checkpoint_background.set(event_target_checked(&ev))/>
                    <span>"In the background"</span>
                </label>
            </div>
            <p data-testid="checkpoint-status">{checkpoint_status}</p>
            <p class="note">"Lesson: turn the background off and watch the checkpoint part of the timeline: a synchronous checkpoint stalls training while the state is read back, serialized and stored. A reload restores the newest automatic checkpoint; a loss spike or NaN offers the newest one from before it."</p>
            <p data-testid="verify-result" class=move || match state.checkpoints.verify_result.get() { Some((_, true)) => "verified", Some((_, false)) => "failed", None => "" }>
                {move || state.checkpoints.verify_result.get().map(|(s, _)| s).unwrap_or_default()}
            </p>
                </div>
            </details>
            </div>
        </section>
    }
}
