//! The output for an image dataset (digits), where there is no plane to
//! draw: per-class accuracy on the test set, the confusion matrix, the
//! misclassified test images with their true and predicted labels, and
//! the first layer's weights as images.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::Clamped;
use web_sys::ImageData;

use super::draw::{image_context, resize};
use crate::model::views::{color, ConvLayerView, ImageViews};
use crate::state::Charts;

mod conv;
use conv::{ConvFilters, ConvLayers};

/// Paints a (side, side) image: grey levels for pixels in [0, 1]
/// (`signed` false: ink is dark), or orange/blue for weights in [-1, 1].
fn paint_image(
    canvas: &web_sys::HtmlCanvasElement,
    ctx: &web_sys::CanvasRenderingContext2d,
    values: &[f32],
    [w, h]: [usize; 2],
    signed: bool,
) {
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
    // The context is asked for once: `getContext` with options costs
    // about as much as the paint itself, a hundred canvases a snapshot.
    let mut ctx = None;
    Effect::new(move |_| {
        let values = values.get();
        if let Some(c) = canvas.get() {
            if ctx.is_none() {
                ctx = image_context(&c);
            }
            if let Some(ctx) = &ctx {
                paint_image(&c, ctx, &values, size, signed);
            }
        }
    });
    view! { <canvas node_ref=canvas class=class width=size[0] height=size[1] role="img" aria-label=label></canvas> }
}

/// What the panel's elements depend on: they are made again only when it
/// changes (another model or data), and otherwise updated in place at
/// every snapshot, so a live run does not rebuild hundreds of elements and
/// canvases per frame. What changes as the run trains (how many test
/// images are misclassified, whether the filters' gradients are there yet)
/// is kept by the part it concerns.
#[derive(Clone, Debug, PartialEq)]
struct Layout {
    classes: usize,
    side: usize,
    first_layer: usize,
    /// Each conv layer's structure, without its values (whether the
    /// filters' gradients are there is not part of it: they come with the
    /// first step, and adding them must not make the panel again).
    conv: Option<([usize; 3], Vec<ConvLayerView>)>,
}

impl Layout {
    /// The parts are made in this order, one an animation frame: the
    /// per-class bars and the confusion matrix (stage 0), the
    /// misclassified images (1), each conv layer's maps (from 2), each
    /// conv layer's filters, then the first layer's weights.
    const MAPS_STAGE: usize = 2;

    fn map_layers(&self) -> usize {
        self.conv.as_ref().map_or(0, |(_, layers)| layers.len())
    }

    fn filter_layers(&self) -> usize {
        self.conv.as_ref().map_or(0, |(_, layers)| layers.iter().filter(|l| !l.filters.is_empty()).count())
    }

    fn last_stage(&self) -> usize {
        Self::MAPS_STAGE + self.map_layers() + self.filter_layers()
    }

    fn of(v: &ImageViews) -> Layout {
        Layout {
            classes: v.classes,
            side: v.side,
            first_layer: v.first_layer.len(),
            conv: v.conv.as_ref().map(|c| {
                let layers = c
                    .layers
                    .iter()
                    .map(|l| ConvLayerView {
                        maps: vec![Vec::new(); l.maps.len()],
                        filters: vec![Vec::new(); l.filters.len()],
                        gradients: Vec::new(),
                        ..l.clone()
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
    // Made in parts, an animation frame apart (`advance`): making a
    // conv net's hundred-odd canvases at once blocked the page for about
    // 90 ms, and three parts still took up to 120 ms each.
    let stage = RwSignal::new(0usize);
    let generation = RwSignal::new(0u32);
    Effect::new(move |_| {
        let Some(last) = layout.with(|l| l.as_ref().map(Layout::last_stage)) else { return };
        let g = generation.get_untracked().wrapping_add(1);
        generation.set(g);
        stage.set(0);
        advance(stage, generation, g, last);
    });
    let from = move |k: usize| Memo::new(move |_| stage.get() >= k);
    // Whether every part is made: for tests and tools, which otherwise
    // count a panel still being made.
    let made = move || layout.with(|l| l.as_ref().is_some_and(|l| stage.get() >= l.last_stage()));
    view! {
        <Show when=move || layout.with(Option::is_some)
            fallback=|| view! { <p class="note">"Press Train: the confusion matrix and the misclassified digits appear here."</p> }>
            <div class="image-views" data-testid="image-views" data-made=move || made().to_string()>
            {move || layout.get().map(|l| {
                let maps_from = Layout::MAPS_STAGE;
                let filters_from = maps_from + l.map_layers();
                let first_layer = from(filters_from + l.filter_layers());
                let (units, side) = (l.first_layer, l.side);
                let wrong = from(1);
                view! {
                    <PerClass views=views classes=l.classes/>
                    <Confusion views=views classes=l.classes/>
                    {move || wrong.get().then(|| view! { <Wrong views=views side=side/> })}
                    {l.conv.map(|(shape, layers)| {
                        let (maps, filters) = (from(maps_from), from(filters_from));
                        let for_filters = layers.clone();
                        view! {
                            {move || maps.get().then(|| view! {
                                <ConvLayers views=views input_shape=shape layers=layers.clone() field=field
                                    stage=stage from=maps_from/>
                            })}
                            {move || filters.get().then(|| view! {
                                <ConvFilters views=views layers=for_filters.clone() stage=stage from=filters_from/>
                            })}
                        }
                    })}
                    {move || first_layer.get().then(|| view! { <Filters views=views units=units side=side/> })}
                }
            })}
            </div>
        </Show>
    }
}

/// Makes the panel's next part in a task of its own after the next
/// animation frame, and so on to the last, unless the layout changed
/// meanwhile (`generation`). Not in the frame's callback: there the
/// making and the frame's layout and paint of it were one long task.
fn advance(stage: RwSignal<usize>, generation: RwSignal<u32>, g: u32, last: usize) {
    request_animation_frame(move || {
        set_timeout(
            move || {
                if generation.get_untracked() != g || stage.get_untracked() >= last {
                    return;
                }
                stage.update(|s| *s += 1);
                advance(stage, generation, g, last);
            },
            std::time::Duration::ZERO,
        );
    });
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
fn Wrong(views: Views, side: usize) -> impl IntoView {
    let state = expect_context::<crate::state::AppState>();
    // Fewer are shown as the model learns: only this list is made again.
    let shown = Memo::new(move |_| views.with(|v| v.as_ref().map_or(0, |v| v.misclassified.len())));
    let items = move || {
        (0..shown.get())
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
        .collect_view()
    };
    let words = move || {
        views.with(|v| {
            v.as_ref().map_or_else(String::new, |v| {
                let shown = v.misclassified.len();
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
