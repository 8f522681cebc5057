//! Gradient norm and learning rate over steps, with the clipping threshold
//! and the clipped steps marked: the gradient norm warns before the loss
//! explodes.

use leptos::prelude::*;

use super::chart::{LineChart, Series};
use crate::model::words;
use crate::state::AppState;

#[component]
pub fn StepCharts() -> impl IntoView {
    let state = expect_context::<AppState>();
    let history = state.charts.step_history;
    let norm = Signal::derive(move || {
        history.with(|h| vec![Series::new("‖g‖", "norm", h.iter().map(|p| (p.step, f64::from(p.grad_norm))).collect())])
    });
    let lr = Signal::derive(move || {
        history.with(|h| vec![Series::new("learning rate", "lr", h.iter().map(|p| (p.step, p.lr)).collect())])
    });
    let clipped = Signal::derive(move || history.with(|h| h.iter().filter(|p| p.clipped).map(|p| p.step).collect()));
    let clip = Signal::derive(move || state.run.experiment.with(|e| e.clip_grad_norm));
    let caption = Signal::derive(move || {
        let count = history.with(|h| h.iter().filter(|p| p.clipped).count());
        match clip.get() {
            Some(c) => format!(
                "{} clipped steps (red marks along the bottom) of those shown; dashed: the clipping threshold {}",
                words::count(count as u64),
                words::value(c, 3)
            ),
            None => "No clipping (0 clipped steps): set “clip grad norm” to cap each step's gradient norm.".into(),
        }
    });
    view! {
        <div class="step-charts">
            <LineChart testid="grad-norm-chart" title="Gradient norm" unit="‖g‖" empty="Press Train to see the gradient norm"
                series=norm log=true log_switch=true smoothing=0.6 marked=clipped threshold=clip caption=caption/>
            <LineChart testid="lr-chart" title="Learning rate" unit="lr" empty="Press Train to see the learning rate"
                series=lr from_zero=true/>
        </div>
    }
}
