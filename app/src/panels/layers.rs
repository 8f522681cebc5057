//! Per layer over time: the distributions of activations, gradients,
//! weights and updates (one column per sample, darker where more values
//! fall, on a shared value axis), and each layer's gradient norm.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::Clamped;
use web_sys::ImageData;

use super::draw::context;
use crate::state::{AppState, LayerSample};

const KINDS: [&str; 4] = ["activations", "gradients", "weights", "updates"];
/// Pixel rows of a distribution image.
const ROWS: usize = 48;

/// Density image of `samples`' kind `kind` of layer `l`: (ROWS, columns)
/// in [0, 1], each column normalised to its own peak; and the value axis.
fn density(samples: &[LayerSample], l: usize, kind: usize) -> (Vec<f32>, usize, f32, f32) {
    let stats: Vec<_> = samples.iter().filter_map(|s| s.layers.get(l).map(|k| k[kind])).collect();
    let lo = stats.iter().filter(|s| s.count() > 0).fold(f32::INFINITY, |m, s| m.min(s.min));
    let hi = stats.iter().filter(|s| s.count() > 0).fold(f32::NEG_INFINITY, |m, s| m.max(s.max));
    let cols = stats.len();
    let mut image = vec![0.0f32; ROWS * cols];
    if !(lo.is_finite() && hi.is_finite()) {
        return (image, cols, 0.0, 0.0);
    }
    let span = (hi - lo).max(f32::MIN_POSITIVE);
    let row_of = |v: f32| (((hi - v) / span * (ROWS - 1) as f32).round() as usize).min(ROWS - 1);
    for (c, s) in stats.iter().enumerate() {
        let bins = s.histogram.len();
        let width = (s.max - s.min) / bins as f32;
        for (b, &count) in s.histogram.iter().enumerate() {
            if count == 0 {
                continue;
            }
            // Spread the bin's count over the pixel rows its range covers.
            let (top, bottom) = (row_of(s.min + width * (b + 1) as f32), row_of(s.min + width * b as f32));
            let share = count as f32 / (bottom - top + 1) as f32;
            for r in top..=bottom {
                image[r * cols + c] += share;
            }
        }
        let peak = (0..ROWS).map(|r| image[r * cols + c]).fold(0.0f32, f32::max);
        if peak > 0.0 {
            for r in 0..ROWS {
                image[r * cols + c] /= peak;
            }
        }
    }
    (image, cols, lo, hi)
}

#[component]
fn Distribution(l: usize, kind: usize) -> impl IntoView {
    let state = expect_context::<AppState>();
    let canvas = NodeRef::<Canvas>::new();
    let axis = RwSignal::new((0.0f32, 0.0f32));
    Effect::new(move |_| {
        let (image, cols, lo, hi) = state.charts.layer_history.with(|h| density(h, l, kind));
        axis.set((lo, hi));
        let Some(canvas) = canvas.get() else { return };
        if cols == 0 {
            return;
        }
        let Some(ctx) = context(&canvas) else { return };
        super::draw::resize(&canvas, cols as u32, ROWS as u32);
        let mut rgba = Vec::with_capacity(image.len() * 4);
        for v in &image {
            let shade = (255.0 * (1.0 - v.sqrt())) as u8;
            rgba.extend([shade, shade, 255u8.saturating_sub((v * 60.0) as u8), 255]);
        }
        if let Ok(data) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), cols as u32, ROWS as u32) {
            let _ = ctx.put_image_data(&data, 0.0, 0.0);
        }
    });
    view! {
        <figure class="distribution">
            <canvas node_ref=canvas data-testid=format!("distribution-{l}-{}", KINDS[kind]) width="1" height=ROWS
                role="img" aria-label=format!("layer {l} {} over time", KINDS[kind])></canvas>
            <figcaption>{KINDS[kind]}" "{move || { let (lo, hi) = axis.get(); format!("[{lo:.2e}, {hi:.2e}]") }}</figcaption>
        </figure>
    }
}

/// ‖g‖ of a layer from its gradient statistics: √(n·(σ² + μ²)), the
/// population moments giving the sum of squares.
fn grad_norm(sample: &LayerSample, l: usize) -> f64 {
    let s = sample.layers[l][1];
    let n = s.count() as f64;
    (n * (f64::from(s.std).powi(2) + f64::from(s.mean).powi(2))).sqrt()
}

const LINE_COLORS: [&str; 6] = ["#0877bd", "#f59322", "#2ea043", "#8e44ad", "#c0392b", "#555"];

#[component]
pub fn LayerPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let layers = move || state.run.experiment.with(|e| e.model.layers.len());
    let (w, h) = (360.0, 90.0);
    let chart = move || {
        state.charts.layer_history.with(|hist| {
            let n = hist.last().map_or(0, |s| s.layers.len());
            let logs: Vec<Vec<f64>> =
                (0..n).map(|l| hist.iter().map(|s| grad_norm(s, l).max(1e-12).log10()).collect()).collect();
            let (lo, hi) = logs.iter().flatten().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
            let (lo, hi) = if hi - lo < 1e-6 { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
            let cols = hist.len().max(2) - 1;
            let paths = logs
                .iter()
                .enumerate()
                .map(|(l, line)| {
                    let mut d = String::new();
                    for (i, v) in line.iter().enumerate() {
                        let x = i as f64 / cols as f64 * w;
                        let y = h - 2.0 - (v - lo) / (hi - lo) * (h - 4.0);
                        d.push_str(&format!("{}{x:.1},{y:.1}", if d.is_empty() { "M" } else { " L" }));
                    }
                    view! { <path d=d stroke=LINE_COLORS[l % LINE_COLORS.len()] fill="none"/> }
                })
                .collect_view();
            let latest = hist
                .last()
                .map(|s| {
                    (0..s.layers.len())
                        .map(|l| {
                            view! {
                                <li><span class="swatch" style=format!("background:{}", LINE_COLORS[l % LINE_COLORS.len()])></span>
                                    {format!("layer {l}: ")}<span data-testid=format!("grad-norm-layer-{l}")>{format!("{:.4e}", grad_norm(s, l))}</span></li>
                            }
                        })
                        .collect_view()
                })
                .unwrap_or_default();
            (paths, latest, 10f64.powf(lo), 10f64.powf(hi))
        })
    };
    let grids = move || {
        (0..layers())
            .map(|l| {
                view! {
                    <div class="layer-distributions">
                        <h4>{format!("layer {l}")}</h4>
                        {(0..4).map(|kind| view! { <Distribution l=l kind=kind/> }).collect_view()}
                    </div>
                }
            })
            .collect_view()
    };
    view! {
        <div class="layers-over-time">
            <h3>"Layers over time"</h3>
            <p class="note">"Each column is one sample of the run (every 250 ms or more while training); darker where more values fall. Activations are of the last micro-batch; gradients and updates of the last step."</p>
            {grids}
            <figure data-testid="grad-norm-per-layer-chart">
                <svg viewBox=format!("0 0 {w} {h}") width=w height=h role="img" aria-label="Gradient norm per layer over time (log scale)">
                    {move || chart().0}
                </svg>
                <figcaption>{move || { let c = chart(); format!("gradient norm per layer, log scale {:.2e}…{:.2e}", c.2, c.3) }}</figcaption>
            </figure>
            <ul class="legend">{move || chart().1}</ul>
        </div>
    }
}
