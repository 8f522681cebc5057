//! Play/pause, one step, reset, the step counter; and the card of
//! hyperparameters.

use leptos::prelude::*;

use super::hyper::Hyperparameters;
use crate::model::runner::Command;
use crate::state::AppState;

#[component]
pub fn Controls() -> impl IntoView {
    let state = expect_context::<AppState>();
    let running = state.run.running;
    let toggle = move |_| running.update(|r| *r = !*r);
    let step_once = move |_| {
        running.set(false);
        state.command(Command::StepOnce);
    };
    let reset = move |_| state.reset();
    let speed = move || {
        let n = state.run.steps_per_frame.get();
        if running.get() && n > 0 {
            format!("{n} {}/frame", if n == 1 { "step" } else { "steps" })
        } else {
            String::new()
        }
    };
    view! {
        <section class="controls" aria-label="Training controls">
            <div class="run-bar">
                <button data-testid="train-toggle" class="play" on:click=toggle
                    aria-label=move || if running.get() { "Pause training" } else { "Start training" }>
                    {move || if running.get() { "❚❚ Pause" } else { "▶ Train" }}
                </button>
                <button data-testid="step-once" aria-label="One step" on:click=step_once>"Step"</button>
                <button data-testid="reset" aria-label="Reset the run" on:click=reset>"Reset"</button>
                <div class="counter">
                    <span>"Step " <b class="big" data-testid="step-count"
                        data-at-rest=move || (state.run.at_rest.get() && !running.get()).to_string()>{move || state.run.step.get()}</b></span>
                    <span class="rate" title="Optimizer steps per second over the last half second of training">
                        <b data-testid="steps-per-second">{move || crate::model::words::thousands(state.run.steps_per_second.get())}</b>" steps/s"
                    </span>
                    {move || {
                        let x = state.run.experiment.get();
                        x.gpt().map(|g| {
                            let per_step = (x.batch_size * x.grad_accumulation * g.context) as f64;
                            view! {
                                <span class="rate" title="Tokens trained per second: steps/s × batch × accumulation × context">
                                    <b data-testid="tokens-per-second">{move || crate::model::words::thousands(state.run.steps_per_second.get() * per_step)}</b>" tokens/s"
                                </span>
                            }
                        })
                    }}
                    <span class="speed">{speed}</span>
                    <span class="busy" title="Main-thread time the training loop takes per frame (not the GPU's)">
                        {move || { let (last, _) = state.run.frame_busy_ms.get(); format!("page {last:.1} ms/frame · worst ") }}
                        <span data-testid="frame-busy-max">{move || format!("{:.1}", state.run.frame_busy_ms.get().1)}</span>" ms"
                    </span>
                </div>
                <super::share::Share/>
            </div>
        </section>
    }
}

/// The hyperparameters, in their own card: after Train on a desktop, after
/// the plot on a phone (style.css orders them).
#[component]
pub fn Settings() -> impl IntoView {
    view! {
        <section class="card settings" aria-label="Hyperparameters">
            <Hyperparameters/>
        </section>
    }
}
