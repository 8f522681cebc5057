//! The output: the decision boundary (or regression surface) over the
//! input plane with train and test points, train and test loss, accuracy,
//! and the loss curves.

use leptos::html::Canvas;
use leptos::prelude::*;

use super::draw::{paint_grid, paint_points};
use crate::model::views::GRID;
use crate::state::Charts;

const PLOT_PX: f64 = 300.0;

fn fmt_loss(v: Option<f32>) -> String {
    v.map_or("–".into(), |v| format!("{v:.4}"))
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
    let plane_2d = move || snapshot.get().is_none_or(|s| s.boundary.is_some());
    view! {
        <section class="panel output" aria-label="Output">
            <h2>"Output"</h2>
            <div class="losses">
                <div>"Train loss " <span data-testid="train-loss">{train_loss}</span></div>
                <div>"Test loss " <span data-testid="test-loss">{test_loss}</span></div>
                <div class="accuracy" data-testid="accuracy">{accuracy}</div>
            </div>
            <Show when=plane_2d fallback=|| view! { <p class="note">"The output over the plane needs two inputs."</p> }>
                <div class="plane" style=format!("width:{PLOT_PX}px;height:{PLOT_PX}px")>
                    <canvas node_ref=boundary data-testid="decision-boundary" class="boundary" role="img"
                        aria-label="Network output over the input plane" width=GRID height=GRID></canvas>
                    <canvas node_ref=points class="points" aria-hidden="true" width=PLOT_PX height=PLOT_PX></canvas>
                </div>
            </Show>
            <LossCurves/>
        </section>
    }
}

/// Train and test loss (full-set evaluations) over steps.
#[component]
fn LossCurves() -> impl IntoView {
    let charts = expect_context::<Charts>();
    let (w, h) = (300.0f64, 100.0f64);
    let paths = move || {
        let history = charts.history.get();
        let last_step = history.last().map_or(1, |p| p.step.max(1)) as f64;
        let max = history.iter().flat_map(|p| [Some(p.train), p.test]).flatten().fold(1e-6f32, f32::max) as f64;
        let path = |value: &dyn Fn(&crate::state::HistoryPoint) -> Option<f32>| {
            let mut d = String::new();
            for p in &history {
                if let Some(v) = value(p) {
                    let (x, y) = (p.step as f64 / last_step * w, h - v as f64 / max * (h - 4.0) - 2.0);
                    d.push_str(&format!("{}{x:.1},{y:.1}", if d.is_empty() { "M" } else { " L" }));
                }
            }
            d
        };
        (path(&|p| Some(p.train)), path(&|p| p.test))
    };
    view! {
        <figure class="curves" data-testid="loss-curves">
            <svg viewBox=format!("0 0 {w} {h}") width=w height=h role="img" aria-label="Train and test loss over steps">
                <path d=move || paths().0 class="train" fill="none" stroke-width="1.5"/>
                <path d=move || paths().1 class="test" fill="none" stroke-width="1.5"/>
            </svg>
            <figcaption><span class="train">"train"</span>" and "<span class="test">"test"</span>" loss"</figcaption>
        </figure>
    }
}
