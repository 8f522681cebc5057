//! The transformer on the page (issue 28): its builder (blocks, heads,
//! width, context, q/k LayerNorm, tied head, z-loss) and its structure with
//! each part's parameters; the sample written from the current weights,
//! each character shaded by the probability the model gave it; the panel
//! that holds it and inside attention (`gpt_attention.rs`); and the step
//! split by block and op.

use leptos::prelude::*;
use stepscope_core::model::gpt::GptShape;
use wasm_bindgen::JsCast;

use super::gpt_attention::AttentionPanel;
use crate::model::classroom::LOCKED_TITLE;
use crate::model::edit::{parse_number, parse_units, set_gpt_field, set_gpt_switch, set_z_loss};
use crate::model::views::gpt::GptViewSpec;
use crate::state::{AppState, Charts};

/// A part of the model and its parameters.
struct Part {
    name: String,
    what: String,
    params: usize,
}

/// The model's parts in the order the forward runs them, each with the
/// parameters of its named tensors (`GptShape::tensors`).
fn parts(shape: &GptShape) -> Vec<Part> {
    let tensors = shape.tensors();
    let sum = |prefix: &str| tensors.iter().filter(|t| t.name.starts_with(prefix)).map(|t| t.len).sum::<usize>();
    let mut parts = vec![Part {
        name: "Embeddings".into(),
        what: format!(
            "token ({} × {}) + position ({} × {})",
            shape.vocab_size, shape.embed, shape.context, shape.embed
        ),
        params: sum("transformer.wte") + sum("transformer.wpe"),
    }];
    for l in 0..shape.blocks {
        let b = format!("transformer.h.{l}.");
        let qk = if shape.qk_layernorm { " with q/k LayerNorm" } else { "" };
        parts.push(Part {
            name: format!("Block {}", l + 1),
            what: format!(
                "ln → attention ({} heads of {}{qk}, {} params) → add → ln → MLP ({} → {} → {}, GELU, {} params) → add",
                shape.heads,
                shape.embed / shape.heads.max(1),
                sum(&format!("{b}attn")),
                shape.embed,
                shape.mlp_ratio * shape.embed,
                shape.embed,
                sum(&format!("{b}mlp"))
            ),
            params: sum(&b),
        });
    }
    parts.push(Part {
        name: "Head".into(),
        what: if shape.tie_embeddings {
            "ln_f → logits through the token embedding (tied: no parameters of its own)".into()
        } else {
            format!("ln_f → logits ({} × {})", shape.vocab_size, shape.embed)
        },
        params: sum("transformer.ln_f") + sum("lm_head"),
    });
    parts
}

/// The transformer's builder and its structure (inside the network panel).
#[component]
pub fn GptBuilder() -> impl IntoView {
    let state = expect_context::<AppState>();
    let e = state.run.experiment;
    let locked = state.run.locked;
    let lock_title = move || locked.get().then_some(LOCKED_TITLE);
    let field = move |name: &'static str, label: &'static str, testid: &'static str| {
        let value = move || {
            let x = e.get();
            let g = x.gpt().copied();
            g.map_or(0, |g| match name {
                "blocks" => g.blocks,
                "heads" => g.heads,
                "embed" => g.embed,
                _ => g.context,
            })
        };
        let on_change = move |ev: leptos::ev::Event| {
            let text = event_target_value(&ev);
            match parse_units(label, &text) {
                Ok(n) => state.edit(|x| set_gpt_field(x, name, n)),
                Err(message) => state.run.alert.set(Some(message)),
            }
            // A refused value shows the model's again.
            if let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) {
                input.set_value(&value().to_string());
            }
        };
        view! {
            <label class="field gpt-field">
                <span>{label}</span>
                <input type="text" inputmode="numeric" size="5" data-testid=testid aria-label=label
                    prop:value=move || value().to_string() on:change=on_change
                    disabled=move || locked.get() title=lock_title/>
            </label>
        }
    };
    let switch = move |name: &'static str, label: &'static str, testid: &'static str| {
        let on = move || {
            e.get().gpt().is_some_and(|g| if name == "qk_layernorm" { g.qk_layernorm } else { g.tie_embeddings })
        };
        let toggle = move |ev: leptos::ev::Event| {
            let checked = event_target_checked(&ev);
            state.edit(|x| set_gpt_switch(x, name, checked));
        };
        view! {
            <label class="check">
                <input type="checkbox" data-testid=testid prop:checked=on on:change=toggle
                    disabled=move || locked.get() title=lock_title/>
                {label}
            </label>
        }
    };
    let on_z = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        match parse_number("z-loss", &text) {
            Ok(v) => state.edit(|x| set_z_loss(x, v)),
            Err(m) => state.run.alert.set(Some(m)),
        }
    };
    let charts = expect_context::<Charts>();
    let structure = move || {
        let x = e.get();
        let shape = x.gpt()?.shape();
        let total = shape.parameter_count();
        // Each part's share of the last step's forward and backward time
        // (the CPU engine's clock around each op), once there is one.
        let times = charts.op_times.get().filter(|s| s.forward.blocks.len() == shape.blocks).map(|s| {
            let (f, b) = (&s.forward, &s.backward);
            let all = (f.total() + b.total()).max(1e-9);
            let mut shares = vec![(f.embedding + b.embedding) / all];
            shares.extend(
                f.blocks.iter().zip(&b.blocks).map(|(x, y)| (x.iter().sum::<f64>() + y.iter().sum::<f64>()) / all),
            );
            shares.push((f.head + b.head) / all);
            shares
        });
        let rows = parts(&shape)
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let share = 100.0 * p.params as f64 / total.max(1) as f64;
                let time = times.as_ref().and_then(|t| t.get(i)).map(|t| format!(" · {:.1} % of the step's forward and backward time", 100.0 * t));
                view! {
                    <li>
                        <b>{p.name}</b>" "<span class="note">{p.what}</span>
                        <span class="params">{format!(" {} params ({share:.1} %)", crate::model::words::count(p.params as u64))}</span>
                        <span class="params" data-testid="gpt-part-time">{time}</span>
                    </li>
                }
            })
            .collect_view();
        Some(view! {
            <ol class="gpt-diagram" data-testid="gpt-diagram" aria-label="The transformer's parts in forward order">{rows}</ol>
            <p class="note" data-testid="gpt-parameters">{format!("{} parameters in all", crate::model::words::count(total as u64))}</p>
        })
    };
    view! {
        <div class="gpt-builder">
            <div class="gpt-fields">
                {field("blocks", "Blocks", "gpt-blocks")}
                {field("heads", "Heads", "gpt-heads")}
                {field("embed", "Width", "gpt-embed")}
                {field("context", "Context", "gpt-context")}
            </div>
            <div class="gpt-switches">
                {switch("qk_layernorm", "q/k LayerNorm", "gpt-qk-layernorm")}
                {switch("tie_embeddings", "Tied head", "gpt-tie-embeddings")}
                <label class="field gpt-field">
                    <span>"z-loss"</span>
                    <input type="text" inputmode="decimal" size="7" data-testid="z-loss" aria-label="z-loss coefficient"
                        prop:value=move || e.get().z_loss.to_string() on:change=on_z/>
                </label>
            </div>
            {structure}
        </div>
    }
}

/// The sample, written from the current weights every few seconds.
#[component]
fn SamplePanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let charts = expect_context::<Charts>();
    let spec = state.run.gpt_spec;
    let on_prompt = move |ev: leptos::ev::Event| {
        let prompt = event_target_value(&ev).replace("\\n", "\n");
        state.send_gpt_spec(GptViewSpec { prompt, ..spec.get_untracked() });
    };
    let on_temperature = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        match parse_number("Temperature", &text) {
            Ok(t) if t > 0.0 && t <= 10.0 => {
                state.send_gpt_spec(GptViewSpec { temperature: t as f32, ..spec.get_untracked() })
            }
            Ok(t) => state.run.alert.set(Some(format!("Temperature: {t} is not above 0 and at most 10."))),
            Err(m) => state.run.alert.set(Some(m)),
        }
    };
    let sample = move || charts.snapshot.get().and_then(|s| s.gpt.as_ref()?.sample.clone());
    let text = move || {
        let Some(s) = sample() else {
            return view! { <span class="note">"Press Train: a sample from the current weights appears here."</span> }
                .into_any();
        };
        let prompt = s.prompt.clone();
        let chars = s
            .chars
            .iter()
            .map(|c| {
                // Darker: the model was surer of this character.
                let alpha = 0.08 + 0.6 * c.probability.clamp(0.0, 1.0);
                let alternatives: Vec<String> =
                    c.top.iter().map(|(ch, p)| format!("{ch:?} {:.1} %", 100.0 * p)).collect();
                let title =
                    format!("{:?}: {:.1} %\nalternatives: {}", c.ch, 100.0 * c.probability, alternatives.join(" · "));
                view! {
                    <span class="sampled" style=format!("background: rgba(37, 99, 235, {alpha:.2})") title=title
                        data-p=format!("{}", c.probability)>{c.ch.to_string()}</span>
                }
            })
            .collect_view();
        view! {
            <span class="prompt">{prompt}</span>{chars}
        }
        .into_any()
    };
    let caption = move || {
        sample().map_or(String::new(), |s| {
            let mean_p = s.chars.iter().map(|c| c.probability as f64).sum::<f64>() / s.chars.len().max(1) as f64;
            format!(
                "Written from the weights of step {} at temperature {}: {} characters, mean probability {:.1} % (hover a character for the alternatives).",
                s.step,
                s.temperature,
                s.chars.len(),
                100.0 * mean_p
            )
        })
    };
    view! {
        <div class="sample">
            <h3>"Sample"</h3>
            <div class="sample-controls">
                <label class="field">
                    <span>"Prompt (\\n for a new line)"</span>
                    <input type="text" data-testid="sample-prompt" aria-label="Sample prompt"
                        prop:value=move || spec.get().prompt.replace('\n', "\\n") on:change=on_prompt/>
                </label>
                <label class="field">
                    <span>"Temperature"</span>
                    <input type="text" inputmode="decimal" size="5" data-testid="sample-temperature" aria-label="Sample temperature"
                        prop:value=move || spec.get().temperature.to_string() on:change=on_temperature/>
                </label>
            </div>
            <pre class="sample-text" data-testid="sample-text" aria-live="off">{text}</pre>
            <p class="note" data-testid="sample-caption">{caption}</p>
        </div>
    }
}

/// The transformer's views, below the builder, data and output columns.
#[component]
pub fn GptPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let is_gpt = move || state.run.experiment.get().gpt().is_some();
    view! {
        <Show when=is_gpt>
            <section class="panel gpt" aria-label="Transformer" data-testid="gpt-panel">
                <h2>"Transformer"</h2>
                <SamplePanel/>
                <AttentionPanel/>
            </section>
        </Show>
    }
}

/// A transformer's step split by block and op (the timeline section):
/// one step's op times and that step's own phases, from the engine's clock
/// (`model::op_table`): the rows add up to the step, and an op inflated by
/// the worker being off the core is flagged as a stall.
#[component]
pub fn OpBreakdown() -> impl IntoView {
    use crate::model::op_table::op_table;
    use stepscope_core::model::gpt::OpKind;
    let charts = expect_context::<Charts>();
    let table = move || {
        let s = charts.op_times.get()?;
        let r = charts.phase_clock.get().map_or(0.0, |(_, r)| r);
        let t = op_table(&s, r);
        let ms = |v: f64| format!("{v:.2}");
        let rows = t
            .rows
            .iter()
            .map(|row| {
                let op = !matches!(row.kind, "data" | "optimizer");
                let (f, b) =
                    if op { (ms(row.forward_ms), ms(row.backward_ms)) } else { (String::new(), String::new()) };
                let is_stalled = row.stalled_ms > 0.0;
                let stalled = is_stalled.then(|| {
                    format!(
                        "stalled: {} ms beyond the same op elsewhere in the step (the worker off the core, or memory touched for the first time)",
                        ms(row.stalled_ms)
                    )
                });
                view! {
                    <tr data-kind=row.kind data-ms=row.ms.to_string() data-percent=row.percent.to_string()
                        data-stalled=row.stalled_ms.to_string() class:stalled=is_stalled>
                        <td>{row.name.clone()}</td><td>{f}</td><td>{b}</td><td>{ms(row.ms)}</td>
                        <td>{format!("{:.1} %", row.percent)}</td><td class="note">{stalled}</td></tr>
                }
            })
            .collect_view();
        let p = &t.phases;
        let stalls = t.stalled_ms();
        let stall_note = if stalls > 0.0 {
            format!(
                "; {} ms ({:.1} %) of it stalls, left out of those shares: ops that took over {} times what the same op took elsewhere in the step, time their work does not explain (the worker taken off the core on a loaded machine; in the first steps, memory touched for the first time)",
                ms(stalls),
                100.0 * stalls / t.step_ms.max(f64::MIN_POSITIVE),
                crate::model::op_table::STALL_FACTOR
            )
        } else {
            String::new()
        };
        let summary = format!(
            "Step {}: data {} ms, forward {} ms, backward {} ms ({:.2}× the forward), optimizer {} ms: {} ms, which the rows add up to; attention {:.1} % and the MLPs {:.1} % of the step{stall_note}.",
            crate::model::words::count(t.step + 1),
            ms(p.data_ms),
            ms(p.forward_ms),
            ms(p.backward_ms),
            p.backward_ms / p.forward_ms.max(1e-9),
            ms(p.optimizer_ms),
            ms(t.step_ms),
            t.percent_of(OpKind::Attention),
            t.percent_of(OpKind::Mlp),
        );
        Some(view! {
            <p class="note" data-testid="op-summary" data-step-ms=t.step_ms.to_string()>{summary}</p>
            <table class="ops" data-testid="op-timeline">
                <tr class="head"><td>"part"</td><td>"forward ms"</td><td>"backward ms"</td><td>"ms"</td><td>"of the step"</td><td></td></tr>
                {rows}
            </table>
        })
    };
    view! {
        <div class="op-breakdown">
            <h3>"By block and op"</h3>
            {move || table().map(|t| t.into_any()).unwrap_or_else(|| view! {
                <p class="note">"Train the transformer on the CPU engine to split its step by block and op."</p>
            }.into_any())}
        </div>
    }
}
