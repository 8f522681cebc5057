//! The output for an image dataset (digits), where there is no plane to
//! draw: per-class accuracy on the test set, the confusion matrix, the
//! misclassified test images with their true and predicted labels, and
//! the first layer's weights as images.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::{Clamped, JsCast};
use web_sys::ImageData;

use super::draw::{context, resize};
use crate::model::views::{color, ConvLayerView, ImageViews};
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

/// The image views of the newest snapshot, computed once per snapshot and
/// read piece by piece by the panel's parts.
type Views = Memo<Option<ImageViews>>;

/// A part of the views as a signal (its default while there are none).
fn part<T: Default + Clone + Send + Sync + 'static>(
    views: Views,
    f: impl Fn(&ImageViews) -> Option<T> + Send + Sync + 'static,
) -> Signal<T> {
    Signal::derive(move || views.with(|v| v.as_ref().and_then(&f)).unwrap_or_default())
}

/// One small (width, height) image, painted when mounted and again, in
/// place, whenever its values change: the canvas stays.
#[component]
fn Picture(
    values: Signal<Vec<f32>>,
    size: [usize; 2],
    signed: bool,
    #[prop(into)] label: String,
    #[prop(into)] class: String,
) -> impl IntoView {
    let canvas: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        let values = values.get();
        if let Some(c) = canvas.get() {
            paint_image(&c, &values, size, signed);
        }
    });
    view! { <canvas node_ref=canvas class=class width=size[0] height=size[1] role="img" aria-label=label></canvas> }
}

/// What the panel's elements depend on: they are made again only when it
/// changes (another model or data, a different number of misclassified
/// images shown), and otherwise updated in place at every snapshot, so a
/// live run does not rebuild hundreds of elements and canvases per frame.
#[derive(Clone, Debug, PartialEq)]
struct Layout {
    classes: usize,
    side: usize,
    misclassified: usize,
    first_layer: usize,
    conv: Option<([usize; 3], Vec<ConvLayout>)>,
}

#[derive(Clone, Debug, PartialEq)]
struct ConvLayout {
    view: ConvLayerView,
    gradients: bool,
}

impl Layout {
    fn of(v: &ImageViews) -> Layout {
        Layout {
            classes: v.classes,
            side: v.side,
            misclassified: v.misclassified.len(),
            first_layer: v.first_layer.len(),
            conv: v.conv.as_ref().map(|c| {
                let layers = c
                    .layers
                    .iter()
                    .map(|l| ConvLayout {
                        // The layer's structure, without its values.
                        view: ConvLayerView {
                            maps: vec![Vec::new(); l.maps.len()],
                            filters: vec![Vec::new(); l.filters.len()],
                            gradients: Vec::new(),
                            ..l.clone()
                        },
                        gradients: l.gradients.len() == l.filters.len() && !l.filters.is_empty(),
                    })
                    .collect();
                (c.input_shape, layers)
            }),
        }
    }
}

#[component]
pub fn ImagePanel() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let views: Views = Memo::new(move |_| charts.snapshot.with(|s| s.as_ref().and_then(|s| s.images.clone())));
    let layout = Memo::new(move |_| views.with(|v| v.as_ref().map(Layout::of)));
    // The feature-map position clicked (layer, row, column): kept across
    // snapshots, so the receptive field stays while the maps change.
    let field = RwSignal::new(None::<(usize, usize, usize)>);
    // Made in three parts, an animation frame apart (the class views, the
    // feature maps, the filters): making a conv net's hundred-odd canvases
    // at once blocked the page for about 90 ms.
    let stage = RwSignal::new(0u8);
    Effect::new(move |_| {
        layout.track();
        stage.set(0);
        request_animation_frame(move || {
            stage.set(1);
            request_animation_frame(move || stage.set(2));
        });
    });
    let maps_shown = Memo::new(move |_| stage.get() >= 1);
    let filters_shown = Memo::new(move |_| stage.get() >= 2);
    view! {
        <Show when=move || layout.with(Option::is_some)
            fallback=|| view! { <p class="note">"Press Train: the confusion matrix and the misclassified digits appear here."</p> }>
            {move || layout.get().map(|l| {
                let conv = l.conv;
                let for_filters = conv.clone();
                let (units, side) = (l.first_layer, l.side);
                view! {
                    <PerClass views=views classes=l.classes/>
                    <Confusion views=views classes=l.classes/>
                    <Wrong views=views shown=l.misclassified side=l.side/>
                    {move || maps_shown.get().then(|| conv.clone().map(|(shape, layers)| view! {
                        <ConvLayers views=views input_shape=shape layers=layers field=field/>
                    }))}
                    {move || filters_shown.get().then(|| view! {
                        {for_filters.clone().map(|(_, layers)| view! { <ConvFilters views=views layers=layers/> })}
                        <Filters views=views units=units side=side/>
                    })}
                }
            })}
        </Show>
    }
}

/// A bar per class: its test accuracy.
#[component]
fn PerClass(views: Views, classes: usize) -> impl IntoView {
    let rows = (0..classes)
        .map(|k| {
            let counts = part(views, move |v| Some(v.class_counts(k)));
            let share = move || {
                let (total, right) = counts.get();
                if total > 0 { right as f64 / total as f64 } else { 0.0 }
            };
            view! {
                <div class="class-bar" data-testid=format!("class-accuracy-{k}")>
                    <span class="label">{k}</span>
                    <span class="bar"><span style=move || format!("width:{:.1}%", share() * 100.0)></span></span>
                    <span class="value">{move || format!("{:.1} %", share() * 100.0)}</span>
                    <span class="count">{move || { let (total, right) = counts.get(); format!("{right}/{total}") }}</span>
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
fn Confusion(views: Views, classes: usize) -> impl IntoView {
    let n = classes;
    let head = (0..n).map(|k| view! { <th scope="col">{k}</th> }).collect_view();
    let body = (0..n)
        .map(|t| {
            let cells = (0..n)
                .map(|p| {
                    // (count, the row's total)
                    let cell = part(views, move |v| Some((v.confusion[t * n + p], v.class_counts(t).0)));
                    let share = move || {
                        let (count, total) = cell.get();
                        if total > 0 {
                            count as f64 / total as f64
                        } else {
                            0.0
                        }
                    };
                    let class = move || {
                        let count = cell.get().0;
                        if t == p {
                            "hit"
                        } else if count > 0 {
                            "miss"
                        } else {
                            ""
                        }
                    };
                    view! {
                        <td class=class style=move || format!("--share:{:.3}", share())
                            title=move || format!("true {t}, predicted {p}: {}", cell.get().0)>
                            {move || match cell.get().0 { 0 => String::new(), count => count.to_string() }}
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
fn Wrong(views: Views, shown: usize, side: usize) -> impl IntoView {
    let state = expect_context::<crate::state::AppState>();
    let items = (0..shown)
        .map(|i| {
            let m = part(views, move |v| v.misclassified.get(i).map(|m| (m.row, m.truth, m.predicted)));
            let pixels = part(views, move |v| v.misclassified.get(i).map(|m| m.pixels.clone()));
            // A conv net draws the feature maps of a clicked one.
            let pick = move |_| state.command(crate::model::runner::Command::MapsImage(m.get_untracked().0));
            let label = format!("misclassified test image {}", i + 1);
            view! {
                <figure class="wrong" data-truth=move || m.get().1 data-predicted=move || m.get().2
                    data-row=move || m.get().0 on:click=pick title="Its feature maps (a conv net)"
                    aria-label=move || { let (row, t, p) = m.get(); format!("test image {row}: a {t} taken for a {p}") }>
                    <Picture values=pixels size=[side, side] signed=false label=label class="digit"/>
                    <figcaption><b>{move || m.get().1}</b>" → "{move || m.get().2}</figcaption>
                </figure>
            }
        })
        .collect_view();
    let words = move || {
        views.with(|v| {
            v.as_ref().map_or_else(String::new, |v| {
                let more =
                    if (v.wrong as usize) > shown { format!(", the first {shown} shown") } else { String::new() };
                format!("{} wrong in the test set{more}; each shows the true label → the model's.", v.wrong)
            })
        })
    };
    view! {
        <h3>"Misclassified test images"</h3>
        <p class="note">{words}</p>
        <div class="digits" data-testid="misclassified">{items}</div>
    }
}

/// A conv net, ConvNetJS's way: for one test image, each conv and pool
/// layer's output as a map per channel, and each conv layer's filters
/// (input channels side by side); blue positive, orange negative, each
/// scaled by its largest magnitude.
#[component]
fn ConvLayers(
    views: Views,
    input_shape: [usize; 3],
    layers: Vec<ConvLayout>,
    field: RwSignal<Option<(usize, usize, usize)>>,
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
        .map(|(i, ConvLayout { view: layer, .. })| {
            let [channels, h, w] = layer.shape;
            let l = layer.layer;
            let items = (0..layer.maps.len())
                .map(|ch| {
                    let values = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.maps.get(ch)?.clone()));
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
                            <Picture values=values size=[w, h] signed=true class="map"
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
fn ConvFilters(views: Views, layers: Vec<ConvLayout>) -> impl IntoView {
    let filters = layers
        .iter()
        .enumerate()
        .filter(|(_, layer)| !layer.view.filters.is_empty())
        .map(|(i, ConvLayout { view: layer, gradients })| {
            let (l, k) = (layer.layer, layer.kernel);
            let items = (0..layer.filters.len())
                .map(|f| {
                    let size = [k * layer.filter_channels, k];
                    let values = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.filters.get(f)?.clone()));
                    let gradient = gradients.then(|| {
                        let g = part(views, move |v| Some(v.conv.as_ref()?.layers.get(i)?.gradients.get(f)?.clone()));
                        view! {
                            <Picture values=g size=size signed=true class="filter gradient"
                                label=format!("layer {l}, filter {f}: the last step's gradient of its weights")/>
                        }
                    });
                    view! {
                        <figure class="filter" data-layer=l data-filter=f>
                            <Picture values=values size=size signed=true class="filter"
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

#[component]
fn Filters(views: Views, units: usize, side: usize) -> impl IntoView {
    if units == 0 {
        return ().into_any();
    }
    let items = (0..units)
        .map(|u| {
            let w = part(views, move |v| v.first_layer.get(u).cloned());
            view! { <Picture values=w size=[side, side] signed=true label=format!("first-layer unit {u}'s weights") class="digit"/> }
        })
        .collect_view();
    view! {
        <h3>"First layer's weights as images"</h3>
        <p class="note">{format!("Each unit's {} weights on the {side}×{side} pixels: blue where ink raises the unit's input, orange where it lowers it.", side * side)}</p>
        <div class="digits filters" data-testid="first-layer-weights">{items}</div>
    }
    .into_any()
}
