//! A conv net's views in the image panel, ConvNetJS's way: each conv and
//! pool layer's maps for one test image (with the receptive field of a
//! clicked point) and each conv layer's filters with their gradients.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use super::{part, Picture, Views};
use crate::model::views::ConvLayerView;

/// A conv net, ConvNetJS's way: for one test image, each conv and pool
/// layer's output as a map per channel, and each conv layer's filters
/// (input channels side by side); blue positive, orange negative, each
/// scaled by its largest magnitude.
#[component]
pub(super) fn ConvLayers(
    views: Views,
    input_shape: [usize; 3],
    layers: Vec<ConvLayerView>,
    field: RwSignal<Option<(usize, usize, usize)>>,
    /// Layer i's maps are made at stage `from + i`.
    stage: RwSignal<usize>,
    from: usize,
) -> impl IntoView {
    let e = expect_context::<crate::state::AppState>().run.experiment;
    let [c, h, w] = input_shape;
    let conv = move |f: fn(&crate::model::views::ConvViews) -> usize| {
        views.with(|v| v.as_ref().and_then(|v| v.conv.as_ref()).map_or(0, f))
    };
    let row = move || conv(|c| c.row);
    let image = part(views, |v| v.conv.as_ref().map(|c| c.image.clone()));
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
            <input type="number" min="0" data-testid="maps-image" prop:value=move || row().to_string() on:change=on_image/></label>
        <figure class="conv-input">
            <span class="field-frame">
                <Picture values=image size=[w, h] signed=false class="map" label="the test image of the feature maps"/>
                {overlay}
            </span>
            <figcaption>{move || format!("test image {} ({c}×{h}×{w})", row())}</figcaption>
        </figure>
        <p class="note" data-testid="receptive-field">{words}</p>
    };
    let maps = layers
        .iter()
        .enumerate()
        .map(|(i, layer)| {
            let [channels, h, w] = layer.shape;
            let l = layer.layer;
            let count = layer.maps.len();
            let items = move || {
                (0..count)
                    .map(|ch| {
                        let values = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.maps.get(ch)?.clone()));
                        // A click picks the map's position under the pointer.
                        let on_click = move |ev: leptos::ev::MouseEvent| {
                            let Some(target) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlElement>().ok())
                            else {
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
                                <Picture values=values size=[w, h] signed=true class="map"
                                    label=format!("layer {l}, channel {ch}: its output for the test image")/>
                            </figure>
                        }
                    })
                    .collect_view()
            };
            let more = (channels > layer.maps.len()).then(|| format!(" (the first {} shown)", layer.maps.len()));
            let shown = Memo::new(move |_| stage.get() >= from + i);
            view! {
                <div class="conv-layer">
                    <h4>{format!("Layer {l}: {} → {channels}×{h}×{w}{}", layer.words, more.unwrap_or_default())}</h4>
                    <div class="maps">{move || shown.get().then(&items)}</div>
                </div>
            }
        })
        .collect_view();
    view! {
        <h3>"Feature maps"</h3>
        <p class="note">"What each conv and pool layer makes of one test image, a map per channel: blue where the output is positive, orange where negative, each map scaled by its largest value."</p>
        {input}
        <div class="feature-maps" data-testid="feature-maps">{maps}</div>
    }
}

/// Each conv layer's filters, input channels side by side, with the last
/// step's gradient of each under it.
#[component]
pub(super) fn ConvFilters(
    views: Views,
    layers: Vec<ConvLayerView>,
    /// The j-th layer with filters is made at stage `from + j`.
    stage: RwSignal<usize>,
    from: usize,
) -> impl IntoView {
    let filters = layers
        .iter()
        .enumerate()
        .filter(|(_, layer)| !layer.filters.is_empty())
        .enumerate()
        .map(|(j, (i, layer))| {
            let (l, k, count, channels) = (layer.layer, layer.kernel, layer.filters.len(), layer.filter_channels);
            // The last step's gradients (none before the first step).
            let has_gradients = Memo::new(move |_| {
                views.with(|v| {
                    v.as_ref()
                        .and_then(|v| v.conv.as_ref()?.layers.get(i))
                        .is_some_and(|layer| !layer.filters.is_empty() && layer.gradients.len() == layer.filters.len())
                })
            });
            let size = [k * channels, k];
            let filter = move |f: usize| {
                let values = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.filters.get(f)?.clone()));
                let gradient = move || {
                    has_gradients.get().then(|| {
                        let g = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.gradients.get(f)?.clone()));
                        view! {
                            <Picture values=g size=size signed=true class="filter gradient"
                                label=format!("layer {l}, filter {f}: the last step's gradient of its weights")/>
                        }
                    })
                };
                view! {
                    <figure class="filter" data-layer=l data-filter=f>
                        <Picture values=values size=size signed=true class="filter"
                            label=format!("layer {l}, filter {f}: its weights, input channels side by side")/>
                        {gradient}
                    </figure>
                }
            };
            let items = move || (0..count).map(filter).collect_view();
            let shown = Memo::new(move |_| stage.get() >= from + j);
            view! {
                <div class="conv-layer">
                    <h4>{filter_heading(layer)}</h4>
                    <div class="maps">{move || shown.get().then(&items)}</div>
                </div>
            }
        })
        .collect_view();
    view! {
        <h3>"Filters"</h3>
        <p class="note">"Each conv filter's weights, its input channels side by side: what it looks for; under it, the last step's gradient of those weights (each scaled by its own largest value)."</p>
        <div class="conv-filters" data-testid="filters">{filters}</div>
    }
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
