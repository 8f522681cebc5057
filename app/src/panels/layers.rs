//! Per layer over time: the distributions of activations, gradients,
//! weights and updates (one column per sample, darker where more values
//! fall, on a shared value axis), and each layer's gradient norm.

use leptos::html::Canvas;
use leptos::prelude::*;
use wasm_bindgen::Clamped;
use web_sys::ImageData;

use super::chart::{LineChart, Series};
use super::draw::context;
use crate::model::words;
use crate::state::{AppState, LayerSample};

const KINDS: [&str; 4] = ["activations", "gradients", "weights", "updates"];
/// Pixel rows of a distribution image.
const ROWS: usize = 48;
/// Groups of distribution canvases redrawn one frame apart.
const STAGGER: usize = 8;
/// Colours of the chart palette (`s0`…`s5` in style.css).
const PALETTE: usize = 6;

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
    let draw = move || {
        let (image, cols, lo, hi) = state.charts.layer_history.with_untracked(|h| density(h, l, kind));
        // (A staggered redraw may come after its layer was removed.)
        if axis.try_set((lo, hi)).is_some() {
            return;
        }
        let Some(canvas) = canvas.try_get_untracked().flatten() else { return };
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
    };
    Effect::new(move |_| {
        state.charts.layer_history.track();
        // A deep network has four canvases a layer, each costing the page
        // its own resource when it changes: they are redrawn in groups
        // over STAGGER animation frames rather than all in one.
        let slot = (4 * l + kind) % STAGGER;
        if slot == 0 {
            draw();
        } else {
            set_timeout(draw, std::time::Duration::from_millis(16 * slot as u64));
        }
    });
    view! {
        <figure class="distribution">
            <canvas node_ref=canvas data-testid=format!("distribution-{l}-{}", KINDS[kind]) width="1" height=ROWS
                role="img" aria-label=format!("layer {l} {} over time", KINDS[kind])></canvas>
            <figcaption>{KINDS[kind]}" "{move || {
                let (lo, hi) = axis.get();
                format!("{} … {}", words::significant(f64::from(lo), 3), words::significant(f64::from(hi), 3))
            }}</figcaption>
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

/// Whether layer `l` of `e` is a pool (it holds no parameters: no weights,
/// gradients or updates to show).
fn pooled(e: &stepscope_core::Experiment, l: usize) -> bool {
    use stepscope_core::experiment::LayerKind;
    e.model.layers.get(l).is_some_and(|x| matches!(x.kind, LayerKind::MaxPool2d { .. } | LayerKind::AvgPool2d { .. }))
}

#[component]
pub fn LayerPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let e = state.run.experiment;
    let with_params = move |l: usize| e.with_untracked(|e| !pooled(e, l));
    let history = state.charts.layer_history;
    let sampled = move || history.with(|h| !h.is_empty());
    let series = Signal::derive(move || {
        history.with(|hist| {
            let n = hist.last().map_or(0, |s| s.layers.len());
            (0..n)
                .filter(|&l| with_params(l))
                .map(|l| {
                    let points =
                        hist.iter().filter(|s| s.layers.len() > l).map(|s| (s.step, grad_norm(s, l))).collect();
                    Series::new(format!("layer {l}"), format!("s{}", l % PALETTE), points)
                })
                .collect::<Vec<_>>()
        })
    });
    let latest = move || {
        history.with(|hist| {
            hist.last()
                .map(|s| {
                    (0..s.layers.len())
                        .filter(|&l| with_params(l))
                        .map(|l| {
                            view! {
                                <li><span class=format!("swatch s{}", l % PALETTE)></span>
                                    {format!("layer {l}: ")}<span data-testid=format!("grad-norm-layer-{l}")>{words::significant(grad_norm(s, l), 4)}</span></li>
                            }
                        })
                        .collect_view()
                })
                .unwrap_or_default()
        })
    };
    let grids = move || {
        let (n, spatial) = e.with(|x| (x.model.layers.len(), x.model.layers.iter().any(|l| l.kind.is_spatial())));
        (0..n)
            .map(|l| {
                // A conv net's layers are named by what they are; a pool
                // has activations alone.
                let (name, kinds) = e.with(|x| {
                    let words = if spatial { format!(" · {}", x.model.layers[l].words()) } else { String::new() };
                    (format!("layer {l}{words}"), if pooled(x, l) { 1 } else { 4 })
                });
                view! {
                    <div class="layer-distributions">
                        <h4>{name}</h4>
                        {(0..kinds).map(|kind| view! { <Distribution l=l kind=kind/> }).collect_view()}
                        {(kinds == 1).then(|| view! { <p class="note">"no parameters: pooling only routes (max) or averages its inputs"</p> })}
                    </div>
                }
            })
            .collect_view()
    };
    view! {
        <div class="layers-over-time">
            <p class="note">"Each column is one sample of the run (every 250 ms or more while training); darker where more values fall. Activations are of the last micro-batch; gradients and updates of the last step."</p>
            <Show when=sampled fallback=|| view! { <p class="chart-empty-note" data-testid="layers-empty">"Press Train to see each layer's activations, gradients, weights and updates over time."</p> }>
                {grids}
            </Show>
            <LineChart testid="grad-norm-per-layer-chart" title="Gradient norm per layer" unit="‖g‖"
                empty="Press Train to see each layer's gradient norm" series=series log=true log_switch=true/>
            <ul class="legend">{latest}</ul>
        </div>
    }
}
