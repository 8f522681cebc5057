//! The network: add and remove hidden layers, units per layer and each
//! layer's activation; and the diagram: a thumbnail per neuron showing its
//! output over the input plane, links coloured by sign and sized by the
//! weight, the gradient or the last update.

use leptos::html::Canvas;
use leptos::prelude::*;
use stepscope_core::experiment::{Activation, DataSource};
use stepscope_core::model::Layout;
use wasm_bindgen::{Clamped, JsCast};
use web_sys::ImageData;

use super::draw::context;
use crate::model::classroom::LOCKED_TITLE;
use crate::model::edit::{add_layer, hidden_layers, parse_units, remove_layer, set_units};
use crate::model::views::{color, Snapshot, SHOWN_UNITS};
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
    };
    let canvas: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        let (Some(snap), Some(c)) = (state.charts.snapshot.get(), canvas.get()) else { return };
        draw_network(&c, &e.get_untracked(), &snap, state.charts.link_mode.get());
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
    view! {
        <section class="panel network" aria-label="Network">
            <h2>"Network"</h2>
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
        </section>
    }
}

const NODE: f64 = 34.0;
/// Steps of a link's drawn magnitude (width and opacity).
const LINK_LEVELS: usize = 8;
const GAP_Y: f64 = 40.0;
/// Space between columns: 96 px, less for a deep network so that the
/// diagram stays about `MAX_WIDTH` wide (CSS scales it into its column).
const GAP_X: f64 = 96.0;
const MIN_GAP_X: f64 = 48.0;
const MAX_WIDTH: f64 = 720.0;

fn draw_network(canvas: &web_sys::HtmlCanvasElement, e: &stepscope_core::Experiment, snap: &Snapshot, mode: LinkMode) {
    let Some(ctx) = context(canvas) else { return };
    let layout = Layout::new(e);
    let widths = e.widths();
    let drawn = |n: usize| n.min(SHOWN_UNITS);
    let fits = snap.links.len() == layout.layers.len()
        && snap.links.iter().zip(&layout.layers).all(|(b, l)| (b.outs, b.ins) == (drawn(l.units), drawn(l.inputs)));
    if !fits {
        return; // the snapshot is from before a model change
    }
    let tallest = widths.iter().copied().max().unwrap_or(1).min(SHOWN_UNITS) as f64;
    // Room under the columns for "+N more".
    let extra = if widths.iter().any(|&n| n > SHOWN_UNITS) { 16.0 } else { 0.0 };
    let gaps = (widths.len() - 1).max(1) as f64;
    let gap_x = ((MAX_WIDTH - NODE - 8.0) / gaps).clamp(MIN_GAP_X, GAP_X);
    let (w, h) = (gap_x * (widths.len() - 1) as f64 + NODE + 8.0, GAP_Y * tallest + 8.0 + extra);
    super::draw::resize(canvas, w as u32, h as u32);
    ctx.clear_rect(0.0, 0.0, w, h);
    let pos = |col: usize, row: usize| -> (f64, f64) {
        let n = widths[col].min(SHOWN_UNITS) as f64;
        let top = (h - extra - GAP_Y * n) / 2.0;
        (4.0 + gap_x * col as f64, top + GAP_Y * row as f64 + (GAP_Y - NODE) / 2.0)
    };
    let kind = match mode {
        LinkMode::Weight => 0,
        LinkMode::Gradient => 1,
        LinkMode::Update => 2,
    };
    // Inputs: each feature over the plane; then every unit's output: all
    // thumbnails go into one image of the canvas, put at once (one
    // putImageData per thumbnail cost a wide network's page 100 ms), and
    // the links are drawn over it, between the columns.
    let (cw, ch) = (w as usize, h as usize);
    let mut image = vec![0u8; cw * ch * 4];
    let features = e.data.features();
    for (col, &width) in widths.iter().enumerate() {
        for row in 0..width.min(SHOWN_UNITS) {
            let grid: Vec<f32> = if col == 0 {
                feature_grid(e, snap, row, &features)
            } else {
                snap.neurons.get(col - 1).and_then(|layer| layer.get(row)).cloned().unwrap_or_default()
            };
            let (x, y) = pos(col, row);
            thumbnail(&mut image, cw, &grid, snap.grid, x.round() as usize, y.round() as usize);
        }
    }
    if let Ok(picture) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&image), cw as u32, ch as u32) {
        let _ = ctx.put_image_data(&picture, 0.0, 0.0);
    }
    // Links, by sign and by magnitude in LINK_LEVELS steps: one path and
    // one stroke per (sign, level), not per link (a deep, wide network
    // draws thousands of them).
    let mut paths: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); 2 * LINK_LEVELS];
    for (l, block) in snap.links.iter().enumerate() {
        let (values, max) = (&block.values[kind], block.max[kind].max(1e-12));
        for o in 0..block.outs {
            for i in 0..block.ins {
                let v = values[o * block.ins + i] / max;
                let level = ((v.abs() * LINK_LEVELS as f32) as usize).min(LINK_LEVELS - 1);
                let (x0, y0) = pos(l, i);
                let (x1, y1) = pos(l + 1, o);
                paths[usize::from(v >= 0.0) * LINK_LEVELS + level].push((
                    x0 + NODE,
                    y0 + NODE / 2.0,
                    x1,
                    y1 + NODE / 2.0,
                ));
            }
        }
    }
    for (bucket, lines) in paths.iter().enumerate().filter(|(_, lines)| !lines.is_empty()) {
        let (sign, level) = (if bucket >= LINK_LEVELS { 1.0 } else { -1.0 }, bucket % LINK_LEVELS);
        let magnitude = (level as f32 + 0.5) / LINK_LEVELS as f32;
        let [r, g, b] = color(sign, 0);
        ctx.set_stroke_style_str(&format!("rgba({r},{g},{b},{:.2})", 0.25 + 0.75 * magnitude));
        ctx.set_line_width(0.5 + 3.5 * magnitude as f64);
        ctx.begin_path();
        for &(x0, y0, x1, y1) in lines {
            ctx.move_to(x0, y0);
            ctx.line_to(x1, y1);
        }
        ctx.stroke();
    }
    // The rest of a wide layer, named rather than drawn.
    for (col, &width) in widths.iter().enumerate().filter(|(_, &n)| n > SHOWN_UNITS) {
        let (x, y) = pos(col, SHOWN_UNITS - 1);
        ctx.set_fill_style_str("#555");
        ctx.set_font("11px sans-serif");
        let _ = ctx.fill_text(&format!("+{} more", width - SHOWN_UNITS), x, y + NODE + 12.0);
    }
}

fn feature_grid(
    e: &stepscope_core::Experiment,
    snap: &Snapshot,
    index: usize,
    features: &[stepscope_core::experiment::Feature],
) -> Vec<f32> {
    if e.data.source == DataSource::Csv || snap.boundary.is_none() {
        return Vec::new();
    }
    let [x_lo, x_hi, y_lo, y_hi] = snap.extent;
    let Some(feature) = features.get(index) else { return Vec::new() };
    let side = snap.grid;
    let raw: Vec<f32> = (0..side * side)
        .map(|i| {
            let (r, c) = (i / side, i % side);
            let x2 = y_hi - (r as f32 + 0.5) / side as f32 * (y_hi - y_lo);
            let x1 = x_lo + (c as f32 + 0.5) / side as f32 * (x_hi - x_lo);
            feature.eval(x1 as f64, x2 as f64) as f32
        })
        .collect();
    let scale = raw.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    raw.iter().map(|v| v / scale).collect()
}

/// A NODE×NODE picture of a (n, n) grid, nearest-sampled, written into
/// `image` (RGBA, `width` pixels a row) at (x, y); grey when there is
/// nothing to show.
fn thumbnail(image: &mut [u8], width: usize, grid: &[f32], n: usize, x: usize, y: usize) {
    let side = NODE as usize;
    for r in 0..side {
        for c in 0..side {
            let rgb = if n > 0 && grid.len() == n * n {
                color(grid[(r * n / side) * n + c * n / side], 0)
            } else {
                [200, 200, 200]
            };
            let at = ((y + r) * width + x + c) * 4;
            if let Some(px) = image.get_mut(at..at + 4) {
                px.copy_from_slice(&[rgb[0], rgb[1], rgb[2], 255]);
            }
        }
    }
}
