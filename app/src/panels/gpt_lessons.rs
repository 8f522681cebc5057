//! The transformer's lessons on the live run: each button changes the real
//! run (or races two from the same seed) and a readout says what changed,
//! from the run's own numbers (`model::gpt_lessons`).

use leptos::prelude::*;

use crate::model::edit::{set_gpt_switch, set_optimizer};
use crate::model::gpt_lessons::{
    attention_readout, buffers_are_current, context_readout, double_context, optimizer_readout, tied_readout, too_high,
    Measured, HIGH_LR,
};
use crate::model::race::RaceSpec;
use crate::model::runner::Command;
use crate::model::words::count;
use crate::state::{first_warnings, AppState};

/// Starts a race of `setting` over `values` from the page's run, as the
/// race panel does.
fn race(state: AppState, setting: &str, values: &str) {
    let spec = RaceSpec::parse(setting, values, "2000");
    match spec.and_then(|spec| spec.variants(&state.run.experiment.get_untracked()).map(|_| spec)) {
        Ok(spec) => {
            state.run.alert.set(None);
            state.runs.race.set(None);
            state.command(Command::StartRace(spec));
            state.run.running.set(true);
        }
        Err(message) => state.run.alert.set(Some(message)),
    }
}

#[component]
pub fn GptLessons() -> impl IntoView {
    let state = expect_context::<AppState>();
    let experiment = state.run.experiment;

    // Learning rate too high.
    // A refused edit (a locked link) leaves the run alone: the reset
    // follows only an edit that was taken.
    let on_high = move |_| {
        let before = experiment.get_untracked();
        state.edit(too_high);
        if experiment.get_untracked() != before {
            state.reset();
        }
    };
    let lr_readout = move || {
        let attention = state.charts.gpt_history.with(|h| attention_readout(h));
        let spikes = first_warnings(&state.charts.step_history.get()).map(|(norm, loss)| {
            let at = |s: Option<u64>| s.map_or("not yet".to_string(), |s| format!("at step {}", count(s)));
            format!(" Gradient norm above 3× its start {}; loss above 2× its start {}.", at(norm), at(loss))
        });
        match (attention, spikes) {
            (None, None) => "Press a button, then Train: the readout follows the run's attention and loss.".to_string(),
            (a, s) => format!("{}{}", a.unwrap_or_default(), s.unwrap_or_default()),
        }
    };

    // Context length: the buffers before, kept when the button is pressed,
    // and after. A report counts only once its buffers are the current
    // experiment's in the current mode (as the checkpointing trade's do,
    // `anatomy`): the first frames after an edit may still report the
    // buffers of the settings before it (a step trained ahead of the edit),
    // and a readout once paired two context-64 figures as 64 → 128.
    let current = RwSignal::new(None::<Measured>);
    Effect::new(move |_| {
        let (e, memory) = (experiment.get(), state.run.memory.get());
        let on = state.lessons.activation_checkpointing.get();
        let Some(g) = e.gpt() else { return };
        if memory.attention > 0 && buffers_are_current(&e, on, &memory) {
            current.set(Some(Measured { context: g.context, memory }));
        }
    });
    let before = RwSignal::new(None::<Measured>);
    let on_double = move |_| {
        let Some(g) = experiment.get_untracked().gpt().cloned() else { return };
        before.set(current.get_untracked().filter(|m| m.context == g.context));
        // A new context is a new shape: the edit itself starts the run over.
        state.edit(double_context);
    };
    let context = move || {
        match (before.get(), current.get()) {
            (Some(b), Some(n)) if n.context == 2 * b.context => context_readout(&b, &n),
            (Some(_), _) => Some("Train a step at the doubled context: the buffers are measured then.".into()),
            _ => None,
        }
        .unwrap_or_else(|| {
            "Train a step, double the context and train a step: the memory panel's buffers, before and after.".into()
        })
    };

    // Tied embeddings.
    let tied = move || experiment.with(|e| e.gpt().is_some_and(|g| g.tie_embeddings));
    let on_tie = move |_| {
        let on = !tied();
        state.edit(|e| set_gpt_switch(e, "tie_embeddings", on));
    };
    let tied_text = move || experiment.with(tied_readout).unwrap_or_default();

    // Adam's memory.
    let adam = move || experiment.with(|e| e.optimizer.name().starts_with("adam"));
    let on_optimizer = move |_| {
        let to = if adam() { "sgd" } else { "adamw" };
        state.edit(|e| set_optimizer(e, to));
    };
    let optimizer_text = move || {
        let m = state.run.memory.get();
        experiment
            .with(|e| optimizer_readout(e, &m))
            .unwrap_or_else(|| "Train a step: the buffers are measured.".into())
    };

    view! {
        <div class="lessons" data-testid="gpt-lessons">
            <section>
                <h4>"A learning rate too high, and two fixes"</h4>
                <div class="row">
                    <button data-testid="lesson-gpt-high-lr" on:click=on_high>{format!("AdamW lr {HIGH_LR}, no warmup or clipping")}</button>
                    <button data-testid="lesson-gpt-race-qk" on:click=move |_| race(state, "qk_layernorm", "off, on")>"Race q/k LayerNorm off vs on"</button>
                    <button data-testid="lesson-gpt-race-z" on:click=move |_| race(state, "z_loss", "0, 0.0001")>"Race z-loss 0 vs 1e-4"</button>
                </div>
                <p data-testid="lesson-gpt-lr-readout">{lr_readout}</p>
                <p class="note">"The first button resets the run at five times the default rate, from the first step; press Train and watch the readout and Inside attention: the largest attention logit grows by orders of magnitude within tens of steps, a head's entropy collapses towards 0 (it attends to one key), and the loss stalls far above the default run's. The races start from the same seed at the page's settings: q/k LayerNorm bounds the logits q·k/√hs; the z-loss keeps the output logits' logsumexp near 0."</p>
            </section>
            <section>
                <h4>"Context length"</h4>
                <div class="row">
                    <button data-testid="lesson-double-context" on:click=on_double>"Double the context"</button>
                </div>
                <p data-testid="lesson-context-readout">{context}</p>
                <p class="note">"Each block keeps B·H·T² attention probabilities for backward, and B·T·C for everything else: at twice the context the first grows four times, the rest twice. The memory panel's last column computed this before you pressed; these are the buffers."</p>
            </section>
            <section>
                <h4>"Tied embeddings"</h4>
                <div class="row">
                    <button data-testid="lesson-tie" on:click=on_tie>{move || if tied() { "Untie the head" } else { "Tie the head" }}</button>
                    <button data-testid="lesson-race-tied" on:click=move |_| race(state, "tie_embeddings", "on, off")>"Race tied vs untied"</button>
                </div>
                <p data-testid="lesson-tied-readout">{tied_text}</p>
            </section>
            <section>
                <h4>"Adam's memory"</h4>
                <div class="row">
                    <button data-testid="lesson-optimizer-memory" on:click=on_optimizer>{move || if adam() { "Switch to SGD with momentum" } else { "Back to AdamW" }}</button>
                </div>
                <p data-testid="lesson-optimizer-readout">{optimizer_text}</p>
                <p class="note">"Adam and AdamW keep two moments per parameter (exp_avg, exp_avg_sq), SGD with momentum one, plain SGD none: for a model this small the activations dominate; for a large one the optimizer's state does."</p>
            </section>
        </div>
    }
}
