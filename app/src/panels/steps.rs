//! Gradient norm and learning rate over steps, with the clipping threshold
//! and the clipped steps marked: the gradient norm warns before the loss
//! explodes.

use leptos::prelude::*;

use crate::state::AppState;

const W: f64 = 360.0;
const H: f64 = 80.0;

#[component]
pub fn StepCharts() -> impl IntoView {
    let state = expect_context::<AppState>();
    // Log scale for the gradient norm: explosions span decades.
    let chart = move || {
        let h = state.charts.step_history.get();
        let clip = state.run.experiment.get().clip_grad_norm;
        let last = h.last().map_or(1, |p| p.step.max(1)) as f64;
        let first = h.first().map_or(0, |p| p.step) as f64;
        let span = (last - first).max(1.0);
        let logs: Vec<f64> = h.iter().map(|p| (p.grad_norm.max(1e-12) as f64).log10()).collect();
        let (lo, hi) = logs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, u), v| (l.min(*v), u.max(*v)));
        let (lo, hi) = match clip {
            Some(c) => (lo.min(c.log10()), hi.max(c.log10())),
            None => (lo, hi),
        };
        let (lo, hi) = if hi - lo < 1e-6 { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
        let x = |step: u64| (step as f64 - first) / span * W;
        let y = |log: f64| H - 2.0 - (log - lo) / (hi - lo) * (H - 4.0);
        let mut norm = String::new();
        for (p, l) in h.iter().zip(&logs) {
            norm.push_str(&format!("{}{:.1},{:.1}", if norm.is_empty() { "M" } else { " L" }, x(p.step), y(*l)));
        }
        let max_lr = h.iter().fold(1e-30f64, |m, p| m.max(p.lr));
        let mut lr = String::new();
        for p in &h {
            lr.push_str(&format!(
                "{}{:.1},{:.1}",
                if lr.is_empty() { "M" } else { " L" },
                x(p.step),
                H - 2.0 - p.lr / max_lr * (H - 4.0)
            ));
        }
        let clipped: Vec<f64> = h.iter().filter(|p| p.clipped).map(|p| x(p.step)).collect();
        let threshold = clip.map(|c| y(c.log10()));
        let clipped_count = h.iter().filter(|p| p.clipped).count();
        (norm, lr, clipped, threshold, clipped_count, 10f64.powf(lo), 10f64.powf(hi), max_lr)
    };
    view! {
        <div class="step-charts">
            <figure data-testid="grad-norm-chart">
                <svg viewBox=format!("0 0 {W} {H}") width=W height=H role="img"
                    aria-label="Global gradient norm over steps (log scale), clipping threshold dashed, clipped steps marked">
                    {move || chart().2.into_iter().map(|x| view! { <line x1=x x2=x y1=0 y2=H class="clipped"/> }).collect_view()}
                    {move || chart().3.map(|y| view! { <line x1=0 x2=W y1=y y2=y class="threshold"/> })}
                    <path d=move || chart().0 class="norm" fill="none"/>
                </svg>
                <figcaption>
                    {move || { let c = chart(); format!("gradient norm, log scale {:.2e}…{:.2e}; {} clipped steps (red)", c.5, c.6, c.4) }}
                </figcaption>
            </figure>
            <figure data-testid="lr-chart">
                <svg viewBox=format!("0 0 {W} {H}") width=W height=H role="img" aria-label="Learning rate used by each step">
                    <path d=move || chart().1 class="lr" fill="none"/>
                </svg>
                <figcaption>{move || format!("learning rate (max {:.2e})", chart().7)}</figcaption>
            </figure>
        </div>
    }
}
