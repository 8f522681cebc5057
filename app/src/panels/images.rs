//! The output for an image dataset (digits), where there is no plane to
//! draw: per-class accuracy on the test set, the confusion matrix, the
//! misclassified test images with their true and predicted labels, and
//! the first layer's weights as images.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::{Clamped, JsCast};
use web_sys::ImageData;

use super::draw::{context, resize};
use crate::model::views::{color, ImageViews};
use crate::state::Charts;

/// Paints a (side, side) image: grey levels for pixels in [0, 1]
/// (`signed` false: ink is dark), or orange/blue for weights in [-1, 1].
fn paint_image(canvas: &web_sys::HtmlCanvasElement, values: &[f32], [w, h]: [usize; 2], signed: bool) {
    let Some(ctx) = context(canvas) else { return };
    resize(canvas, w as u32, h as u32);
    let mut rgba = Vec::with_capacity(w * h * 4);
    for &v in values.iter().take(w * h) {
        let [r, g, b] = if signed {
            color(v, 0)
        } else {
            let level = (255.0 * (1.0 - v.clamp(0.0, 1.0))).round() as u8;
            [level, level, level]
        };
        rgba.extend([r, g, b, 255]);
    }
    if rgba.len() != 4 * w * h {
        return;
    }
    if let Ok(image) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), w as u32, h as u32) {
        let _ = ctx.put_image_data(&image, 0.0, 0.0);
    }
}

/// One small square image, painted once mounted and again when it changes.
#[component]
fn Image(values: Vec<f32>, side: usize, signed: bool, #[prop(into)] label: String) -> impl IntoView {
    view! { <Picture values=values size=[side, side] signed=signed label=label class="digit"/> }
}

/// One small (width, height) image.
#[component]
fn Picture(
    values: Vec<f32>,
    size: [usize; 2],
    signed: bool,
    #[prop(into)] label: String,
    #[prop(into)] class: String,
) -> impl IntoView {
    let canvas: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        if let Some(c) = canvas.get() {
            paint_image(&c, &values, size, signed);
        }
    });
    view! { <canvas node_ref=canvas class=class width=size[0] height=size[1] role="img" aria-label=label></canvas> }
}

#[component]
pub fn ImagePanel() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let views = move || charts.snapshot.get().and_then(|s| s.images.clone());
    // The feature-map position clicked (layer, row, column): kept across
    // snapshots, so the receptive field stays while the maps change.
    let field = RwSignal::new(None::<(usize, usize, usize)>);
    view! {
        <Show when=move || views().is_some()
            fallback=|| view! { <p class="note">"Press Train: the confusion matrix and the misclassified digits appear here."</p> }>
            {move || views().map(|v| view! {
                <PerClass views=v.clone()/>
                <Confusion views=v.clone()/>
                <Wrong views=v.clone()/>
                <ConvLayers views=v.clone() field=field/>
                <Filters views=v/>
            })}
        </Show>
    }
}

/// A bar per class: its test accuracy.
#[component]
fn PerClass(views: ImageViews) -> impl IntoView {
    let rows = (0..views.classes)
        .map(|k| {
            let (total, right) = views.class_counts(k);
            let share = if total > 0 { right as f64 / total as f64 } else { 0.0 };
            view! {
                <div class="class-bar" data-testid=format!("class-accuracy-{k}")>
                    <span class="label">{k}</span>
                    <span class="bar"><span style=format!("width:{:.1}%", share * 100.0)></span></span>
                    <span class="value">{format!("{:.1} %", share * 100.0)}</span>
                    <span class="count">{format!("{right}/{total}")}</span>
                </div>
            }
        })
        .collect_view();
    view! {
        <h3>"Test accuracy per class"</h3>
        <div class="per-class" data-testid="per-class-accuracy">{rows}</div>
    }
}

/// Rows: the true class; columns: the predicted one. A cell's shade is
/// its share of the row.
#[component]
fn Confusion(views: ImageViews) -> impl IntoView {
    let n = views.classes;
    let head = (0..n).map(|k| view! { <th scope="col">{k}</th> }).collect_view();
    let body = (0..n)
        .map(|t| {
            let (total, _) = views.class_counts(t);
            let cells = (0..n)
                .map(|p| {
                    let count = views.confusion[t * n + p];
                    let share = if total > 0 { count as f64 / total as f64 } else { 0.0 };
                    let class = if t == p { "hit" } else if count > 0 { "miss" } else { "" };
                    view! {
                        <td class=class style=format!("--share:{share:.3}") title=format!("true {t}, predicted {p}: {count}")>
                            {if count > 0 { count.to_string() } else { String::new() }}
                        </td>
                    }
                })
                .collect_view();
            view! { <tr><th scope="row">{t}</th>{cells}</tr> }
        })
        .collect_view();
    view! {
        <h3>"Confusion matrix (test set)"</h3>
        <table class="confusion" data-testid="confusion-matrix">
            <caption>"rows: true class · columns: predicted"</caption>
            <thead><tr><th></th>{head}</tr></thead>
            <tbody>{body}</tbody>
        </table>
    }
}

#[component]
fn Wrong(views: ImageViews) -> impl IntoView {
    let state = expect_context::<crate::state::AppState>();
    let side = views.side;
    let shown = views.misclassified.len();
    let items = views
        .misclassified
        .into_iter()
        .map(|m| {
            let label = format!("test image {}: a {} taken for a {}", m.row, m.truth, m.predicted);
            let row = m.row;
            // A conv net draws the feature maps of a clicked one.
            let pick = move |_| state.command(crate::model::runner::Command::MapsImage(row));
            view! {
                <figure class="wrong" data-truth=m.truth data-predicted=m.predicted data-row=m.row on:click=pick
                    title="Its feature maps (a conv net)">
                    <Image values=m.pixels side=side signed=false label=label/>
                    <figcaption><b>{m.truth}</b>" → "{m.predicted}</figcaption>
                </figure>
            }
        })
        .collect_view();
    view! {
        <h3>"Misclassified test images"</h3>
        <p class="note">{format!("{} wrong in the test set{}; each shows the true label → the model's.", views.wrong,
            if (views.wrong as usize) > shown { format!(", the first {shown} shown") } else { String::new() })}</p>
        <div class="digits" data-testid="misclassified">{items}</div>
    }
}

/// A conv net, ConvNetJS's way: for one test image, each conv and pool
/// layer's output as a map per channel, and each conv layer's filters
/// (input channels side by side); blue positive, orange negative, each
/// scaled by its largest magnitude.
#[component]
fn ConvLayers(views: ImageViews, field: RwSignal<Option<(usize, usize, usize)>>) -> impl IntoView {
    let Some(conv) = views.conv else { return ().into_any() };
    let e = expect_context::<crate::state::AppState>().run.experiment;
    let [c, h, w] = conv.input_shape;
    // The clicked position's receptive field on the input, from the
    // experiment's layers (`Experiment::receptive_field`).
    let rect = move || field.get().and_then(|(l, y, x)| e.with(|e| e.receptive_field(l, y, x)).map(|r| (l, y, x, r)));
    let pct = move |v: usize, of: usize| format!("{:.3}%", 100.0 * v as f64 / of.max(1) as f64);
    let overlay = move || {
        rect().map(|(_, _, _, [y0, x0, y1, x1])| {
            let style =
                format!("top:{};left:{};height:{};width:{}", pct(y0, h), pct(x0, w), pct(y1 - y0, h), pct(x1 - x0, w));
            view! { <span class="field-box" style=style></span> }
        })
    };
    let words = move || {
        match rect() {
        Some((l, y, x, [y0, x0, y1, x1])) => format!(
            "Layer {l} at row {y}, column {x} sees input rows {y0}–{}, columns {x0}–{}: {} × {} of the {h} × {w} pixels (the box on the image).",
            y1 - 1,
            x1 - 1,
            y1 - y0,
            x1 - x0
        ),
        None => "Click a point of a feature map to see the part of the input it sees: its receptive field.".into(),
    }
    };
    let state = expect_context::<crate::state::AppState>();
    let on_image = move |ev| {
        let text = leptos::prelude::event_target_value(&ev);
        match text.trim().parse::<usize>() {
            Ok(row) => state.command(crate::model::runner::Command::MapsImage(row)),
            Err(_) => state.run.alert.set(Some(format!("Test image: `{text}` is not a row number (0, 1, …)."))),
        }
    };
    let input = view! {
        <label class="field"><span>"Test image"</span>
            <input type="number" min="0" data-testid="maps-image" prop:value=conv.row.to_string() on:change=on_image/></label>
        <figure class="conv-input">
            <span class="field-frame">
                <Picture values=conv.image.clone() size=[w, h] signed=false class="map"
                    label=format!("test image {}", conv.row)/>
                {overlay}
            </span>
            <figcaption>{format!("test image {} ({c}×{h}×{w})", conv.row)}</figcaption>
        </figure>
        <p class="note" data-testid="receptive-field">{words}</p>
    };
    let maps = conv
        .layers
        .iter()
        .map(|layer| {
            let [channels, h, w] = layer.shape;
            let l = layer.layer;
            let items = layer
                .maps
                .iter()
                .enumerate()
                .map(|(ch, map)| {
                    // A click picks the map's position under the pointer.
                    let on_click = move |ev: leptos::ev::MouseEvent| {
                        let Some(target) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlElement>().ok()) else {
                            return;
                        };
                        let (cw, chh) =
                            (f64::from(target.client_width().max(1)), f64::from(target.client_height().max(1)));
                        let x = ((f64::from(ev.offset_x()) / cw * w as f64) as usize).min(w.saturating_sub(1));
                        let y = ((f64::from(ev.offset_y()) / chh * h as f64) as usize).min(h.saturating_sub(1));
                        field.set(Some((l, y, x)));
                    };
                    view! {
                        <figure class="map" data-layer=l data-channel=ch on:click=on_click>
                            <Picture values=map.clone() size=[w, h] signed=true class="map"
                                label=format!("layer {l}, channel {ch}: its output for the test image")/>
                        </figure>
                    }
                })
                .collect_view();
            let more = (channels > layer.maps.len()).then(|| format!(" (the first {} shown)", layer.maps.len()));
            view! {
                <div class="conv-layer">
                    <h4>{format!("Layer {l}: {} → {channels}×{h}×{w}{}", layer.words, more.unwrap_or_default())}</h4>
                    <div class="maps">{items}</div>
                </div>
            }
        })
        .collect_view();
    let filters = conv
        .layers
        .iter()
        .filter(|layer| !layer.filters.is_empty())
        .map(|layer| {
            let (l, k) = (layer.layer, layer.kernel);
            let items = layer
                .filters
                .iter()
                .enumerate()
                .map(|(f, values)| {
                    let size = [k * layer.filter_channels, k];
                    let gradient = layer.gradients.get(f).cloned().map(|g| {
                        view! {
                            <Picture values=g size=size signed=true class="filter gradient"
                                label=format!("layer {l}, filter {f}: the last step's gradient of its weights")/>
                        }
                    });
                    view! {
                        <figure class="filter" data-layer=l data-filter=f>
                            <Picture values=values.clone() size=size signed=true class="filter"
                                label=format!("layer {l}, filter {f}: its weights, input channels side by side")/>
                            {gradient}
                        </figure>
                    }
                })
                .collect_view();
            view! {
                <div class="conv-layer">
                    <h4>{filter_heading(layer)}</h4>
                    <div class="maps">{items}</div>
                </div>
            }
        })
        .collect_view();
    view! {
        <h3>"Feature maps"</h3>
        <p class="note">"What each conv and pool layer makes of one test image, a map per channel: blue where the output is positive, orange where negative, each map scaled by its largest value."</p>
        {input}
        <div class="feature-maps" data-testid="feature-maps">{maps}</div>
        <h3>"Filters"</h3>
        <p class="note">"Each conv filter's weights, its input channels side by side: what it looks for; under it, the last step's gradient of those weights (each scaled by its own largest value)."</p>
        <div class="conv-filters" data-testid="filters">{filters}</div>
    }
    .into_any()
}

/// `Layer 2: 16 filters of 3×3 over 12 input channels (the first 8 shown)`.
fn filter_heading(layer: &crate::model::views::ConvLayerView) -> String {
    let (l, k, filters) = (layer.layer, layer.kernel, layer.shape[0]);
    let channels = match layer.in_channels {
        1 => "1 input channel".to_string(),
        n if n > layer.filter_channels => format!("{n} input channels (the first {} shown)", layer.filter_channels),
        n => format!("{n} input channels"),
    };
    let shown = match layer.filters.len() {
        n if n < filters => format!("; the first {n} filters shown"),
        _ => String::new(),
    };
    format!("Layer {l}: {filters} filters of {k}×{k} over {channels}{shown}")
}

#[component]
fn Filters(views: ImageViews) -> impl IntoView {
    if views.first_layer.is_empty() {
        return ().into_any();
    }
    let side = views.side;
    let items = views
        .first_layer
        .into_iter()
        .enumerate()
        .map(|(u, w)| view! { <Image values=w side=side signed=true label=format!("first-layer unit {u}'s weights")/> })
        .collect_view();
    view! {
        <h3>"First layer's weights as images"</h3>
        <p class="note">{format!("Each unit's {} weights on the {side}×{side} pixels: blue where ink raises the unit's input, orange where it lowers it.", side * side)}</p>
        <div class="digits filters" data-testid="first-layer-weights">{items}</div>
    }
    .into_any()
}
