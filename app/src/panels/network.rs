//! The network: add and remove hidden layers, units per layer and each
//! layer's activation; and the diagram: a thumbnail per neuron showing its
//! output over the input plane, links coloured by sign and sized by the
//! weight, the gradient or the last update.

use leptos::html::Canvas;
use leptos::prelude::*;
use stepscope_core::experiment::{Activation, DataSource, LayerKind};
use wasm_bindgen::{Clamped, JsCast};
use web_sys::ImageData;

use super::draw::context;
use crate::model::classroom::LOCKED_TITLE;
use crate::model::edit::{
    add_layer, conv_preset, hidden_layers, layer_shapes, parse_units, remove_layer, set_layer_field, set_layer_kind,
    set_units, LAYER_KINDS,
};
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
        let x = e.get();
        let shapes = layer_shapes(&x);
        hidden_layers(&x)
            .to_vec()
            .into_iter()
            .zip(shapes)
            .enumerate()
            .map(|(l, (spec, shape))| {
                let on_activation = move |ev| {
                    let name = event_target_value(&ev);
                    state.edit(|x| {
                        x.model.layers[l].activation = activation_from(&name).ok_or(format!("Unknown activation `{name}`."))?;
                        Ok(())
                    })
                };
                let on_kind = move |ev| {
                    let kind = event_target_value(&ev);
                    state.edit(|x| set_layer_kind(x, l, &kind));
                };
                let activation = view! {
                    <select aria-label=format!("Activation of hidden layer {}", l + 1) data-testid=format!("activation-{l}")
                        prop:value=activation_name(spec.activation) on:change=on_activation
                        disabled=move || locked.get() title=lock_title>
                        {ACTIVATIONS.iter().map(|(v, label)| view! { <option value=*v>{*label}</option> }).collect_view()}
                    </select>
                };
                let fields = match spec.kind {
                    LayerKind::Dense => dense_fields(state, l, spec.units).into_any(),
                    LayerKind::Conv2d { filters, kernel, stride, padding } => view! {
                        {layer_field(state, l, "filters", "Filters", filters)}
                        {layer_field(state, l, "kernel", "Kernel", kernel)}
                        {layer_field(state, l, "stride", "Stride", stride)}
                        {layer_field(state, l, "padding", "Padding", padding)}
                    }
                    .into_any(),
                    LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => view! {
                        {layer_field(state, l, "kernel", "Kernel", kernel)}
                        {layer_field(state, l, "stride", "Stride", stride)}
                    }
                    .into_any(),
                };
                let pooled = matches!(spec.kind, LayerKind::MaxPool2d { .. } | LayerKind::AvgPool2d { .. });
                view! {
                    <div class="layer" data-testid=format!("layer-{l}")>
                        <span class="name">{format!("Hidden {}", l + 1)}</span>
                        <select aria-label=format!("Kind of hidden layer {}", l + 1) data-testid=format!("layer-kind-{l}")
                            prop:value=spec.kind.name() on:change=on_kind
                            disabled=move || locked.get() title=lock_title>
                            {LAYER_KINDS.iter().map(|(v, label)| view! { <option value=*v>{*label}</option> }).collect_view()}
                        </select>
                        {fields}
                        {(!pooled).then_some(activation)}
                        <span class="layer-shape" data-testid=format!("layer-shape-{l}")>{shape}</span>
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
    let is_conv = move || e.get().model.layers.iter().any(|l| l.kind.is_spatial());
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
                    <option value="mlp">{move || if is_conv() { "Conv net (conv, pooling, dense layers)" } else { "Multilayer perceptron" }}</option>
                    <option value="gpt">"Transformer (character-level GPT)"</option>
                </select>
            </label>
            <Show when=move || !is_gpt() fallback=|| view! { <super::gpt::GptBuilder/> }>
            <div class="layer-buttons">
                <button data-testid="add-layer" aria-label="Add a hidden layer" on:click=move |_| state.edit(add_layer)
                    disabled=move || locked.get() title=lock_title>"+ layer"</button>
                <button data-testid="remove-layer" aria-label="Remove the last hidden layer" on:click=move |_| state.edit(remove_layer)
                    disabled=move || locked.get() title=lock_title>"− layer"</button>
                <button data-testid="conv-preset" on:click=move |_| { state.run.csv_name.set(None); state.edit(conv_preset) }
                    aria-label="A conv net: two blocks of conv, ReLU and max pooling, then the output layer (on image data)"
                    title="Two blocks of conv, ReLU and max pooling, then the output layer (on the digits where the data are not images)"
                    disabled=move || locked.get()>"Conv net"</button>
            </div>
            <Show when=move || locked.get()>
                <p class="note" data-testid="network-locked">"This link locks the network: layers, units and activations stay as they are."</p>
            </Show>
            <div class="layers">{layers}</div>
            <p class="note" data-testid="output-layer">{output_note}</p>
            <Show when=move || !is_conv() fallback=move || view! {
                <p class="note architecture" data-testid="architecture">{move || e.get().architecture_words()}</p>
                <p class="note">"A conv net is drawn by what it sees: each layer's feature maps and filters, under Output."</p>
            }>
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

/// A dense layer's units: −, a typed width, +.
fn dense_fields(state: AppState, l: usize, units: usize) -> impl IntoView {
    let e = state.run.experiment;
    let locked = state.run.locked;
    let lock_title = move || locked.get().then_some(LOCKED_TITLE);
    let minus = move |_| state.edit(|x| set_units(x, l, units.saturating_sub(1)));
    let plus = move |_| state.edit(|x| set_units(x, l, units + 1));
    // A typed width: refused with a message (and the field shows the width
    // again) unless it is a whole number in the limits.
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
    view! {
        <button aria-label=format!("Fewer units in hidden layer {}", l + 1) data-testid=format!("units-minus-{l}") on:click=minus
            disabled=move || locked.get() title=lock_title>"−"</button>
        <input class="units" type="text" inputmode="numeric" size="4"
            aria-label=format!("Units of hidden layer {}", l + 1) data-testid=format!("units-{l}")
            prop:value=units.to_string() on:change=on_units disabled=move || locked.get() title=lock_title/>
        <button aria-label=format!("More units in hidden layer {}", l + 1) data-testid=format!("units-plus-{l}") on:click=plus
            disabled=move || locked.get() title=lock_title>"+"</button>
    }
}

/// A conv or pool layer's field (`filters`, `kernel`, `stride`,
/// `padding`): a typed whole number, which the core bounds; refused with
/// its message, and the field shows the layer's value again.
fn layer_field(state: AppState, l: usize, field: &'static str, label: &'static str, value: usize) -> impl IntoView {
    let locked = state.run.locked;
    let lock_title = move || locked.get().then_some(LOCKED_TITLE);
    let on_change = move |ev: leptos::ev::Event| {
        let text = event_target_value(&ev);
        match text.trim().parse::<usize>() {
            Ok(n) => state.edit(|x| set_layer_field(x, l, field, n)),
            Err(_) => state.run.alert.set(Some(format!(
                "{label} of hidden layer {}: `{}` is not a whole number.",
                l + 1,
                text.trim()
            ))),
        }
        if let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) {
            input.set_value(&value.to_string());
        }
    };
    view! {
        <label class="layer-field">
            <span>{label}</span>
            <input type="text" inputmode="numeric" size="2" aria-label=format!("{label} of hidden layer {}", l + 1)
                data-testid=format!("{field}-{l}") prop:value=value.to_string() on:change=on_change
                disabled=move || locked.get() title=lock_title/>
        </label>
    }
}
