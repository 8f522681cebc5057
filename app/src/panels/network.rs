//! The network: add and remove hidden layers, units per layer and each
//! layer's activation; and the diagram: a thumbnail per neuron showing its
//! output over the input plane, links coloured by sign and sized by the
//! weight, the gradient or the last update.

use leptos::html::Canvas;
use leptos::prelude::*;
use stepscope_core::experiment::{Activation, DataSource};
use wasm_bindgen::{Clamped, JsCast};
use web_sys::ImageData;

use super::draw::context;
use crate::model::classroom::LOCKED_TITLE;
use crate::model::edit::{add_layer, hidden_layers, parse_units, remove_layer, set_units};
use crate::model::runner::Command;
use crate::model::views::Diagram;
use crate::state::{AppState, LinkMode};

const ACTIVATIONS: [(&str, &str); 7] = [
    ("linear", "Linear"),
    ("relu", "ReLU"),
    ("leaky_relu", "Leaky ReLU"),
    ("tanh", "Tanh"),
    ("sigmoid", "Sigmoid"),
    ("gelu_tanh", "GELU (tanh)"),
    ("silu", "SiLU"),
];

fn activation_from(name: &str) -> Option<Activation> {
    serde_json::from_value(serde_json::Value::String(name.into())).ok()
}

fn activation_name(a: Activation) -> String {
    serde_json::to_value(a).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default()
}

#[component]
pub fn NetworkPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let e = state.run.experiment;
    // lock=1: the network's controls are disabled and say why (the edit
    // itself is refused in AppState::edit as well).
    let locked = state.run.locked;
    let lock_title = move || locked.get().then_some(LOCKED_TITLE);
    let layers = move || {
        let hidden = hidden_layers(&e.get()).to_vec();
        hidden
            .into_iter()
            .enumerate()
            .map(|(l, spec)| {
                let units = spec.units;
                let minus = move |_| state.edit(|x| set_units(x, l, units.saturating_sub(1)));
                let plus = move |_| state.edit(|x| set_units(x, l, units + 1));
                // A typed width: refused with a message (and the field shows
                // the width again) unless it is a whole number in the limits.
                let on_units = move |ev: leptos::ev::Event| {
                    let text = event_target_value(&ev);
                    let label = format!("Units of hidden layer {}", l + 1);
                    match parse_units(&label, &text) {
                        Ok(n) => state.edit(|x| set_units(x, l, n)),
                        Err(message) => state.run.alert.set(Some(message)),
                    }
                    if let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) {
                        input.set_value(&e.get_untracked().model.layers[l].units.to_string());
                    }
                };
                let on_activation = move |ev| {
                    let name = event_target_value(&ev);
                    state.edit(|x| {
                        x.model.layers[l].activation = activation_from(&name).ok_or(format!("Unknown activation `{name}`."))?;
                        Ok(())
                    })
                };
                view! {
                    <div class="layer" data-testid=format!("layer-{l}")>
                        <span class="name">{format!("Hidden {}", l + 1)}</span>
                        <button aria-label=format!("Fewer units in hidden layer {}", l + 1) data-testid=format!("units-minus-{l}") on:click=minus
                            disabled=move || locked.get() title=lock_title>"−"</button>
                        <input class="units" type="text" inputmode="numeric" size="4"
                            aria-label=format!("Units of hidden layer {}", l + 1) data-testid=format!("units-{l}")
                            prop:value=units.to_string() on:change=on_units disabled=move || locked.get() title=lock_title/>
                        <button aria-label=format!("More units in hidden layer {}", l + 1) data-testid=format!("units-plus-{l}") on:click=plus
                            disabled=move || locked.get() title=lock_title>"+"</button>
                        <select aria-label=format!("Activation of hidden layer {}", l + 1) data-testid=format!("activation-{l}")
                            prop:value=activation_name(spec.activation) on:change=on_activation
                            disabled=move || locked.get() title=lock_title>
                            {ACTIVATIONS.iter().map(|(v, label)| view! { <option value=*v>{*label}</option> }).collect_view()}
                        </select>
                    </div>
                }
            })
            .collect_view()
    };
    let on_mode = move |ev| {
        let mode = match event_target_value(&ev).as_str() {
            "gradient" => LinkMode::Gradient,
            "update" => LinkMode::Update,
            _ => LinkMode::Weight,
        };
        state.charts.link_mode.set(mode);
        // The engine's side draws the diagram with the views, in this mode.
        state.command(Command::LinkMode(mode));
    };
    let canvas: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        let (Some(snap), Some(c)) = (state.charts.snapshot.get(), canvas.get()) else { return };
        if let Some(diagram) = &snap.diagram {
            put_diagram(&c, diagram);
        }
    });
    let output_note = move || {
        let x = e.get();
        let what = match (x.data.source, x.loss) {
            (DataSource::Csv, stepscope_core::experiment::Loss::CrossEntropy) => {
                format!("{} classes: cross-entropy", x.outputs())
            }
            (_, stepscope_core::experiment::Loss::BceWithLogits) => "binary classification: one logit, BCE".into(),
            (_, stepscope_core::experiment::Loss::CrossEntropy) => "classification: cross-entropy".into(),
            (_, stepscope_core::experiment::Loss::Mse) => "regression: mean squared error".into(),
        };
        format!("Output layer: {} unit(s), {what}", x.outputs())
    };
    let is_gpt = move || e.get().gpt().is_some();
    let on_kind = move |ev| {
        let kind = event_target_value(&ev);
        state.run.csv_name.set(None);
        state.edit(|x| crate::model::edit::set_model_kind(x, &kind));
    };
    view! {
        <section class="panel network" aria-label="Network">
            <h2>"Network"</h2>
            <label class="field">
                <span>"Model"</span>
                <select data-testid="model-kind" aria-label="Model kind" on:change=on_kind
                    prop:value=move || if is_gpt() { "gpt" } else { "mlp" }
                    disabled=move || locked.get() title=lock_title>
                    <option value="mlp">"Multilayer perceptron"</option>
                    <option value="gpt">"Transformer (character-level GPT)"</option>
                </select>
            </label>
            <Show when=move || !is_gpt() fallback=|| view! { <super::gpt::GptBuilder/> }>
            <div class="layer-buttons">
                <button data-testid="add-layer" aria-label="Add a hidden layer" on:click=move |_| state.edit(add_layer)
                    disabled=move || locked.get() title=lock_title>"+ layer"</button>
                <button data-testid="remove-layer" aria-label="Remove the last hidden layer" on:click=move |_| state.edit(remove_layer)
                    disabled=move || locked.get() title=lock_title>"− layer"</button>
            </div>
            <Show when=move || locked.get()>
                <p class="note" data-testid="network-locked">"This link locks the network: layers, units and activations stay as they are."</p>
            </Show>
            <div class="layers">{layers}</div>
            <p class="note" data-testid="output-layer">{output_note}</p>
            <label class="field">
                <span>"Links show"</span>
                <select data-testid="link-mode" aria-label="What the links show" on:change=on_mode>
                    <option value="weight">"Weights"</option>
                    <option value="gradient">"Gradients"</option>
                    <option value="update">"Last update"</option>
                </select>
            </label>
            <canvas node_ref=canvas data-testid="network-diagram" role="img"
                aria-label="Network diagram: each neuron's output over the input plane, links by weight"></canvas>
            </Show>
        </section>
    }
}

/// Puts the diagram the engine's side drew (`model::views::diagram`): one
/// image and a label per layer wider than it shows.
fn put_diagram(canvas: &web_sys::HtmlCanvasElement, d: &Diagram) {
    let Some(ctx) = context(canvas) else { return };
    super::draw::resize(canvas, d.width as u32, d.height as u32);
    if let Ok(picture) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&d.rgba), d.width as u32, d.height as u32)
    {
        let _ = ctx.put_image_data(&picture, 0.0, 0.0);
    }
    for (x, y, text) in &d.notes {
        ctx.set_fill_style_str("#555");
        ctx.set_font("11px sans-serif");
        let _ = ctx.fill_text(text, *x, *y);
    }
}
