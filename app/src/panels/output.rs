//! The output: the decision boundary (or regression surface) over the
//! input plane with train and test points, train and test loss, accuracy,
//! and the loss curves.

use leptos::html::Canvas;
use leptos::prelude::*;

use super::chart::{LineChart, Series};
use super::draw::{paint_grid, paint_points};
use super::images::ImagePanel;
use crate::model::views::GRID;
use crate::state::Charts;

/// Backing pixels of the points layer: the plot is drawn up to 480 CSS px
/// wide, so its points stay sharp at that size and scale down below it.
const PLOT_PX: f64 = 480.0;

fn raw(v: Option<f32>) -> String {
    v.map_or(String::new(), |v| v.to_string())
}

/// A loss for people: four decimals, a power of ten when huge or tiny.
fn fmt_loss(v: Option<f32>) -> String {
    v.map_or("–".into(), |v| crate::model::words::value(v as f64, 4))
}

#[component]
pub fn OutputPanel() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let boundary: NodeRef<Canvas> = NodeRef::new();
    let points: NodeRef<Canvas> = NodeRef::new();
    Effect::new(move |_| {
        let Some(snap) = charts.snapshot.get() else { return };
        if let (Some(canvas), Some(values)) = (boundary.get(), snap.boundary.as_ref()) {
            paint_grid(&canvas, values, snap.grid, snap.classes);
        }
        if let Some(canvas) = points.get() {
            paint_points(&canvas, &snap.points, snap.extent, PLOT_PX, snap.classes);
        }
    });
    let snapshot = charts.snapshot;
    let train_loss = move || fmt_loss(snapshot.get().and_then(|s| s.train.map(|t| t.loss)));
    let test_loss = move || fmt_loss(snapshot.get().and_then(|s| s.test.map(|t| t.loss)));
    let accuracy = move || {
        let s = snapshot.get()?;
        let pct = |v: Option<f32>| v.map_or("–".into(), |a| format!("{:.1} %", a * 100.0));
        let train = s.train.and_then(|t| t.accuracy);
        train.map(|_| format!("accuracy: train {} · test {}", pct(train), pct(s.test.and_then(|t| t.accuracy))))
    };
    let experiment = expect_context::<crate::state::Run>().experiment;
    let image_data = move || crate::model::views::is_image_data(&experiment.get());
    let is_gpt = move || experiment.get().gpt().is_some();
    // The transformer's own views only (not an MLP's snapshot still shown
    // while the first views of a switched run are computed).
    let gpt_val = move || snapshot.get().filter(|s| s.gpt.is_some()).and_then(|s| s.test.map(|t| t.loss));
    let plane_2d = move || !image_data() && !is_gpt() && snapshot.get().is_none_or(|s| s.boundary.is_some());
    view! {
        <section class="panel output" aria-label="Output">
            <h2>"Output"</h2>
            <div class="losses">
                // data-value: the full number, for tests and tools (the
                // text is rounded for people).
                <div class="metric">"Train loss" <b data-testid="train-loss" data-value=move || raw(snapshot.get().and_then(|s| s.train.map(|t| t.loss)))>{train_loss}</b></div>
                <Show when=move || !is_gpt() fallback=move || view! {
                    <div class="metric" title=format!("Mean cross-entropy over {} held-out windows spread over the validation text", crate::model::views::gpt::VAL_WINDOWS)>"Validation loss"
                        <b data-testid="val-loss" data-value=move || raw(gpt_val())>{move || fmt_loss(gpt_val())}</b></div>
                }>
                <div class="metric">"Test loss" <b data-testid="test-loss" data-value=move || raw(snapshot.get().and_then(|s| s.test.map(|t| t.loss)))>{test_loss}</b></div>
                </Show>
                <div class="accuracy" data-testid="accuracy">{accuracy}</div>
                // The losses and accuracies are whole-set evaluations, made
                // from the parameters of one step (every few seconds on a
                // large set; the conv maps come more often): which one.
                <div class="evaluated" data-testid="evaluated-step"
                    title="The losses and accuracies are evaluated over every train and test row with the parameters of this step; on a large set that takes a while, so they lag the step counter.">
                    {move || snapshot.get().map(|s| format!("evaluated at step {}", crate::model::words::count(s.step)))}
                </div>
            </div>
            <Show when=plane_2d fallback=move || view! {
                <Show when=move || image_data() fallback=move || if is_gpt() {
                    view! { <p class="note">"The transformer's sample and attention are in the Transformer panel below."</p> }.into_any()
                } else {
                    view! { <p class="note">"The output over the plane needs two inputs."</p> }.into_any()
                }>
                    <ImagePanel/>
                </Show>
            }>
                <div class="plane">
                    <canvas node_ref=boundary data-testid="decision-boundary" class="boundary" role="img"
                        aria-label="Network output over the input plane" width=GRID height=GRID></canvas>
                    <canvas node_ref=points class="points" aria-hidden="true" width=PLOT_PX height=PLOT_PX></canvas>
                </div>
                <PlotLegend/>
            </Show>
            <LossCurves/>
        </section>
    }
}

/// What the plot's colours mean: the output's scale for one output, a
/// swatch per class for several (coloured by the most likely class).
#[component]
fn PlotLegend() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let classes = move || charts.snapshot.get().map_or(0, |s| s.classes);
    view! {
        <Show when=move || { classes() > 2 } fallback=|| view! {
            <div class="legend-scale"><span>"−1 / class 0"</span><span class="bar"></span><span>"+1 / class 1"</span>
                <span>"· dark ring: test point"</span></div>
        }>
            <div class="legend-scale classes">
                {move || (0..classes()).map(|k| {
                    let [r, g, b] = crate::model::views::color(k as f32, classes());
                    view! { <span class="class-key"><span class="swatch" style=format!("background:rgb({r},{g},{b})")></span>{format!("class {k}")}</span> }
                }).collect_view()}
                <span>"· paler: less sure · dark ring: test point"</span>
            </div>
        </Show>
    }
}

/// Train and test loss (full-set evaluations) over steps: log or linear,
/// smoothing at hand, the exact values under the pointer.
#[component]
fn LossCurves() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let series = Signal::derive(move || {
        charts.history.with(|h| {
            vec![
                Series::new("train", "train", h.iter().map(|p| (p.step, f64::from(p.train))).collect()),
                Series::new("test", "test", h.iter().filter_map(|p| Some((p.step, f64::from(p.test?)))).collect()),
            ]
        })
    });
    view! {
        <LineChart testid="loss-curves" class="curves" title="Loss" unit="loss" empty="Press Train to see the loss curves"
            series=series log_switch=true smoothing=0.0/>
    }
}
