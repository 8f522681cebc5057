//! The output for an image dataset (digits), where there is no plane to
//! draw: per-class accuracy on the test set, the confusion matrix, the
//! misclassified test images with their true and predicted labels, and
//! the first layer's weights as images.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::Clamped;
use web_sys::ImageData;

use super::draw::{context, resize};
use crate::model::views::{color, ImageViews};
use crate::state::Charts;

/// Paints a (side, side) image: grey levels for pixels in [0, 1]
/// (`signed` false: ink is dark), or orange/blue for weights in [-1, 1].
fn paint_image(canvas: &web_sys::HtmlCanvasElement, values: &[f32], side: usize, signed: bool) {
    let Some(ctx) = context(canvas) else { return };
    resize(canvas, side as u32, side as u32);
    let mut rgba = Vec::with_capacity(side * side * 4);
    for &v in values.iter().take(side * side) {
        let [r, g, b] = if signed {
            color(v, 0)
        } else {
            let level = (255.0 * (1.0 - v.clamp(0.0, 1.0))).round() as u8;
            [level, level, level]
        };
        rgba.extend([r, g, b, 255]);
    }
    if let Ok(image) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), side as u32, side as u32) {
        let _ = ctx.put_image_data(&image, 0.0, 0.0);
    }
}

/// One small image, painted once mounted and again when it changes.
#[component]
fn Image(values: Vec<f32>, side: usize, signed: bool, #[prop(into)] label: String) -> impl IntoView {
    let canvas: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        if let Some(c) = canvas.get() {
            paint_image(&c, &values, side, signed);
        }
    });
    view! { <canvas node_ref=canvas class="digit" width=side height=side role="img" aria-label=label></canvas> }
}

#[component]
pub fn ImagePanel() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let views = move || charts.snapshot.get().and_then(|s| s.images.clone());
    view! {
        <Show when=move || views().is_some()
            fallback=|| view! { <p class="note">"Press Train: the confusion matrix and the misclassified digits appear here."</p> }>
            {move || views().map(|v| view! {
                <PerClass views=v.clone()/>
                <Confusion views=v.clone()/>
                <Wrong views=v.clone()/>
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
    let side = views.side;
    let shown = views.misclassified.len();
    let items = views
        .misclassified
        .into_iter()
        .map(|m| {
            let label = format!("test image {}: a {} taken for a {}", m.row, m.truth, m.predicted);
            view! {
                <figure class="wrong" data-truth=m.truth data-predicted=m.predicted>
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

#[component]
fn Filters(views: ImageViews) -> impl IntoView {
    let side = views.side;
    let items = views
        .first_layer
        .into_iter()
        .enumerate()
        .map(|(u, w)| view! { <Image values=w side=side signed=true label=format!("first-layer unit {u}'s weights")/> })
        .collect_view();
    view! {
        <h3>"First layer's weights as images"</h3>
        <p class="note">"Each unit's 64 weights on the 8×8 pixels: blue where ink raises the unit's input, orange where it lowers it."</p>
        <div class="digits filters" data-testid="first-layer-weights">{items}</div>
    }
}
