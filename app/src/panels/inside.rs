//! Inside a step: advance forward → backward → optimizer one phase at a
//! time and see, per layer, the tensors that phase produced (activations,
//! gradients, updates and the optimizer's moments, with the
//! update-to-weight ratio), summarised from the engine's own buffers.

use leptos::prelude::*;
use stepscope_core::engine::phases::{LayerPhase, NamedStats};
use stepscope_core::engine::StepPhase;
use stepscope_core::stats::TensorStats;

use crate::model::runner::Command;
use crate::model::words::{significant, value};
use crate::state::AppState;

/// A histogram as a small bar chart (32 bins over [min, max]).
pub fn histogram_svg(stats: &TensorStats, label: String) -> impl IntoView {
    let peak = stats.histogram.iter().copied().max().unwrap_or(0).max(1) as f64;
    let (w, h) = (96.0, 24.0);
    let bin = w / stats.histogram.len() as f64;
    let bars = stats
        .histogram
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(i, &c)| {
            let height = (c as f64 / peak * h).max(1.0);
            view! { <rect x=format!("{:.1}", i as f64 * bin) y=format!("{:.1}", h - height)
            width=format!("{:.1}", bin * 0.9) height=format!("{height:.1}")/> }
        })
        .collect_view();
    view! {
        <svg class="hist" viewBox=format!("0 0 {w} {h}") width=w height=h role="img" aria-label=label>{bars}</svg>
    }
}

fn stats_cell(t: &NamedStats, layer: usize) -> impl IntoView {
    let s = t.stats;
    let sig = |x: f32| significant(f64::from(x), 3);
    let label = format!("layer {layer} {}: histogram over [{}, {}]", t.name, sig(s.min), sig(s.max));
    let bad = (s.non_finite > 0).then(|| view! { <span class="bad">{format!(" {} NaN/Inf", s.non_finite)}</span> });
    view! {
        <td>
            {histogram_svg(&s, label)}
            <div class="num">{format!("μ {} σ {}", sig(s.mean), sig(s.std))}</div>
            <div class="num">{format!("[{}, {}] ‖·‖ {}", sig(s.min), sig(s.max), significant(t.norm, 3))}</div>
            {bad}
        </td>
    }
}

/// A row of the table; `fresh` marks what the last part produced.
fn layer_row(layer: &LayerPhase, fresh: bool) -> impl IntoView {
    let cells = layer.tensors.iter().map(|t| stats_cell(t, layer.layer)).collect_view();
    let ratio = layer.update_ratio.map(|r| {
        let verdict = match r {
            r if r > 1e-2 => "large",
            r if r < 1e-4 => "small",
            _ => "typical",
        };
        view! { <td data-testid=format!("update-ratio-{}", layer.layer) class=verdict>{significant(r, 3)}</td> }
    });
    let name = layer.label.clone().unwrap_or_else(|| format!("layer {}", layer.layer));
    view! { <tr class:fresh=fresh><th>{name}</th>{cells}{ratio}</tr> }
}

const HINTS: [(&str, &str); 3] = [
    (
        "forward",
        "Forward stored each layer's activation a for backward, and its pre-activation z unless activation checkpointing is on (then backward recomputes z). Watch for saturation: tanh/sigmoid outputs piled at ±1, or ReLU outputs all 0 (dead units).",
    ),
    (
        "backward",
        "Backward turned the loss into a gradient for every parameter, layer by layer from the output. Gradients that shrink towards the input layers vanish; ones that grow explode.",
    ),
    (
        "optimizer",
        "The optimizer clipped (if set) and applied the update. ‖Δθ‖/‖θ‖ near 1e-3 is typical; far above, the learning rate is too high for that layer; far below, the layer barely learns. Adam's exp_avg and exp_avg_sq are the two extra copies of the parameters it keeps.",
    ),
];

/// What a transformer's stop ran, for the note above its table.
fn part_hint(phase: &str, part: &str) -> String {
    let op = part.rsplit(" · ").next().unwrap_or(part);
    if phase == "backward" {
        return format!(
            "Backward through {part}: the highlighted rows are the gradients it reached (a tied embedding gathers the head's part first, then the embedding's). The first row is the residual stream's gradient where backward stands: follow its norm from block to block."
        );
    }
    let what = match op {
        "embedding" => "the token and position embeddings, added: the residual stream starts here",
        "ln_1" | "ln_2" => "LayerNorm: each position's vector to mean 0 and variance 1, then scaled and shifted, whatever the stream's size",
        "attention" => "q, k and v from one matmul; P = softmax(q·kᵀ/√hs) under the causal mask, each row summing to 1; the heads' outputs merged, projected and added back into the stream",
        "MLP" => "c_fc widens each position fourfold, GELU, c_proj narrows it back; added into the stream",
        _ => "ln_f, then the logits over the vocabulary; the loss is their cross-entropy with the next characters",
    };
    format!("Forward ran {part}: {what}. Its outputs are the highlighted rows.")
}

#[component]
pub fn InsideStep() -> impl IntoView {
    let state = expect_context::<AppState>();
    let on_phase = move |_| {
        state.run.running.set(false);
        state.command(Command::StepPhase);
    };
    let current = move || match state.lessons.phase_report.get() {
        Some(r) => format!("{} of step {}", r.label(), r.step + 1),
        None => "none yet".into(),
    };
    let next = move || {
        let r = state.lessons.phase_report.get();
        format!("next: {}", r.map_or(StepPhase::Forward { micro: 0 }.to_string(), |r| r.next_label()))
    };
    let body = move || {
        state.lessons.phase_report.get().map(|r| {
            let headers = r
                .layers
                .first()
                .map(|l| l.tensors.iter().map(|t| view! { <th>{t.name.to_string()}</th> }).collect_view());
            let ratio_header = r.layers.first().and_then(|l| l.update_ratio).map(|_| view! { <th>"‖Δθ‖/‖θ‖"</th> });
            let fresh_from = r.part.as_ref().map_or(usize::MAX, |p| r.layers.len().saturating_sub(p.added));
            let rows = r.layers.iter().enumerate().map(|(i, l)| layer_row(l, i >= fresh_from)).collect_view();
            let hint = match &r.part {
                Some(part) => part_hint(r.phase.name(), &part.name),
                None => HINTS.iter().find(|(name, _)| *name == r.phase.name()).map_or("", |(_, h)| *h).to_string(),
            };
            let summary = match (&r.loss, &r.metrics) {
                (Some(loss), _) => format!("micro-batch loss {}", value(f64::from(*loss), 5)),
                (_, Some(m)) => format!(
                    "step loss {}, gradient norm {}{}, learning rate {}",
                    value(f64::from(m.loss), 5),
                    value(f64::from(m.grad_norm), 4),
                    if m.clipped { " (clipped)" } else { "" },
                    significant(m.lr, 3)
                ),
                _ => String::new(),
            };
            view! {
                <p class="note">{hint}</p>
                <p data-testid="phase-summary">{summary}</p>
                <table class="phase-tensors" data-testid="phase-tensors">
                    <tr><th></th>{headers}{ratio_header}</tr>
                    {rows}
                </table>
            }
        })
    };
    view! {
        <div class="inside-step">
            <div class="row">
                <button data-testid="step-phase" aria-label="Advance one phase" on:click=on_phase>"Next phase ▸"</button>
                <span>"Ran: "<strong data-testid="current-phase">{current}</strong></span>
                <span class="note">{next}</span>
            </div>
            {body}
        </div>
    }
}
