//! Hyperparameters: learning rate, batch size, optimizer and its
//! parameters, schedule (with a preview of lr over steps), clipping,
//! accumulation, regularization, seed. Each applies live where the run can
//! continue (see `model::edit::needs_reset`).

use leptos::prelude::*;
use stepscope_core::experiment::{Loss, OptimizerSpec, RegularizationKind, Schedule};
use stepscope_core::optim::learning_rate;
use stepscope_core::Experiment;

use crate::model::edit::{
    self, parse_number, schedule_fields, set_accumulation, set_batch, set_beta, set_clip, set_lr, set_momentum,
    set_reg_rate, set_seed, set_weight_decay, whole, with_schedule_fields,
};
use crate::state::AppState;

/// A labelled number input; `apply` validates and edits the experiment.
#[component]
fn NumberField(
    label: &'static str,
    testid: &'static str,
    value: Signal<String>,
    apply: fn(&mut Experiment, f64) -> Result<(), String>,
    /// Shown after the field ("steps", "rows"); none for a pure number.
    #[prop(optional)]
    unit: Option<&'static str>,
) -> impl IntoView {
    let state = expect_context::<AppState>();
    let on_change = move |ev| {
        let text = event_target_value(&ev);
        match parse_number(label, &text) {
            Ok(v) => state.edit(|e| apply(e, v)),
            Err(message) => state.run.alert.set(Some(message)),
        }
    };
    view! {
        <label class="field">
            <span>{label}</span>
            <span class="with-unit">
                <input type="text" inputmode="decimal" data-testid=testid aria-label=label
                    prop:value=move || value.get() on:change=on_change/>
                {unit.map(|u| view! { <span class="unit">{u}</span> })}
            </span>
        </label>
    }
}

#[component]
pub fn Hyperparameters() -> impl IntoView {
    let state = expect_context::<AppState>();
    let e = state.run.experiment;
    let text = move |f: fn(&Experiment) -> String| Signal::derive(move || f(&e.get()));
    let optimizer_kind = move || e.get().optimizer.name().to_string();
    let on_optimizer = move |ev| {
        let kind = event_target_value(&ev);
        state.edit(|x| edit::set_optimizer(x, &kind));
    };
    let schedule_kind = move || match e.get().schedule {
        Schedule::Constant => "constant",
        Schedule::WarmupCosine { .. } => "warmup_cosine",
        Schedule::WarmupLinear { .. } => "warmup_linear",
    };
    let on_schedule = move |ev| {
        let kind = event_target_value(&ev);
        state.edit(|x| edit::set_schedule(x, &kind));
    };
    let on_nesterov = move |ev| {
        let on = event_target_checked(&ev);
        state.edit(|x| edit::set_nesterov(x, on));
    };
    let reg_kind = move || match e.get().regularization.map(|r| r.kind) {
        None => "none",
        Some(RegularizationKind::L1) => "l1",
        Some(RegularizationKind::L2) => "l2",
    };
    let on_reg = move |ev| {
        let kind = event_target_value(&ev);
        state.edit(|x| edit::set_regularization(x, &kind));
    };
    let on_loss = move |ev| {
        let name = event_target_value(&ev);
        state.edit(|x| edit::set_loss(x, &name));
    };
    let is_sgd = move || matches!(e.get().optimizer, OptimizerSpec::Sgd { .. });
    let has_schedule = move || !matches!(e.get().schedule, Schedule::Constant);
    view! {
        <div class="hyper">
            <fieldset class="group">
                <legend>"Optimizer"</legend>
                <NumberField label="Learning rate" testid="learning-rate" value=text(|e| e.optimizer.lr().to_string()) apply=set_lr/>
                <NumberField label="Batch size" testid="batch-size" value=text(|e| e.batch_size.to_string()) apply=set_batch unit="rows"/>
                <label class="field">
                    <span>"Optimizer"</span>
                    <select data-testid="optimizer" aria-label="Optimizer" prop:value=optimizer_kind on:change=on_optimizer>
                        <option value="sgd">"SGD"</option>
                        <option value="adam">"Adam"</option>
                        <option value="adamw">"AdamW"</option>
                        <option value="lamb">"LAMB"</option>
                    </select>
                </label>
                <NumberField label="Weight decay" testid="weight-decay" value=text(|e| match e.optimizer {
                    OptimizerSpec::Sgd { weight_decay, .. } | OptimizerSpec::Adam { weight_decay, .. }
                    | OptimizerSpec::Adamw { weight_decay, .. } | OptimizerSpec::Lamb { weight_decay, .. } => weight_decay.to_string(),
                }) apply=set_weight_decay/>
                <Show when=is_sgd fallback=move || view! {
                    <NumberField label="β1" testid="beta1" value=text(|e| match e.optimizer {
                        OptimizerSpec::Adam { betas, .. } | OptimizerSpec::Adamw { betas, .. } | OptimizerSpec::Lamb { betas, .. } => betas[0].to_string(),
                        OptimizerSpec::Sgd { .. } => String::new(),
                    }) apply=|e, v| set_beta(e, 0, v)/>
                    <NumberField label="β2" testid="beta2" value=text(|e| match e.optimizer {
                        OptimizerSpec::Adam { betas, .. } | OptimizerSpec::Adamw { betas, .. } | OptimizerSpec::Lamb { betas, .. } => betas[1].to_string(),
                        OptimizerSpec::Sgd { .. } => String::new(),
                    }) apply=|e, v| set_beta(e, 1, v)/>
                }>
                    <NumberField label="Momentum" testid="momentum" value=text(|e| match e.optimizer {
                        OptimizerSpec::Sgd { momentum, .. } => momentum.to_string(),
                        _ => String::new(),
                    }) apply=set_momentum/>
                    <label class="field check">
                        <input type="checkbox" data-testid="nesterov" aria-label="Nesterov momentum"
                            prop:checked=move || matches!(e.get().optimizer, OptimizerSpec::Sgd { nesterov: true, .. })
                            on:change=on_nesterov/>
                        <span>"Nesterov"</span>
                    </label>
                </Show>
            </fieldset>
            <fieldset class="group">
                <legend>"Learning-rate schedule"</legend>
                <label class="field">
                    <span>"Schedule"</span>
                    <select data-testid="schedule" aria-label="Learning-rate schedule" prop:value=schedule_kind on:change=on_schedule>
                        <option value="constant">"Constant"</option>
                        <option value="warmup_cosine">"Warmup + cosine"</option>
                        <option value="warmup_linear">"Warmup + linear"</option>
                    </select>
                </label>
                <Show when=has_schedule>
                    <NumberField label="Warmup" testid="warmup-steps" value=text(|e| schedule_fields(&e.schedule).0.to_string())
                        apply=|e, v| { let w = whole("Warmup steps", v + 1.0)? as u64 - 1; with_schedule_fields(&mut e.schedule, Some(w), None, None) } unit="steps"/>
                    <NumberField label="Total" testid="total-steps" value=text(|e| schedule_fields(&e.schedule).1.to_string())
                        apply=|e, v| { let t = whole("Total steps", v)? as u64; with_schedule_fields(&mut e.schedule, None, Some(t), None) } unit="steps"/>
                    <NumberField label="Min lr" testid="min-lr" value=text(|e| schedule_fields(&e.schedule).2.to_string())
                        apply=|e, v| with_schedule_fields(&mut e.schedule, None, None, Some(v))/>
                </Show>
                <SchedulePreview/>
            </fieldset>
            <fieldset class="group">
                <legend>"The rest of the step"</legend>
                <Show when=move || { e.get().fitting_losses().len() > 1 }>
                    <label class="field">
                        <span>"Loss"</span>
                        <select data-testid="loss" aria-label="Loss" prop:value=move || e.get().loss.name() on:change=on_loss>
                            {move || e.get().fitting_losses().into_iter().map(|l| view! { <option value=l.name()>{loss_label(l)}</option> }).collect_view()}
                        </select>
                    </label>
                </Show>
                <NumberField label="Clip grad norm" testid="clip-grad-norm" value=text(|e| e.clip_grad_norm.unwrap_or(0.0).to_string()) apply=set_clip unit="0 = off"/>
                <NumberField label="Grad accumulation" testid="grad-accumulation" value=text(|e| e.grad_accumulation.to_string()) apply=set_accumulation unit="micro-batches"/>
                <label class="field">
                    <span>"Regularization"</span>
                    <select data-testid="regularization" aria-label="Regularization" prop:value=reg_kind on:change=on_reg>
                        <option value="none">"None"</option>
                        <option value="l1">"L1"</option>
                        <option value="l2">"L2"</option>
                    </select>
                </label>
                <Show when=move || e.get().regularization.is_some()>
                    <NumberField label="Regularization rate" testid="regularization-rate" value=text(|e| e.regularization.as_ref().map_or(String::new(), |r| r.rate.to_string())) apply=set_reg_rate/>
                </Show>
                <NumberField label="Seed" testid="seed" value=text(|e| e.seed.to_string()) apply=set_seed/>
                <label class="field check" title="A loss spike always shows a warning with the way back to the last good checkpoint; this also pauses training">
                    <input type="checkbox" data-testid="pause-on-spike" aria-label="Pause on a loss spike"
                        prop:checked=move || state.run.pause_on_spike.get()
                        on:change=move |ev| state.run.pause_on_spike.set(event_target_checked(&ev))/>
                    <span>"Pause on a loss spike"</span>
                </label>
            </fieldset>
        </div>
    }
}

/// A loss as the loss control names it.
fn loss_label(loss: Loss) -> &'static str {
    match loss {
        Loss::BceWithLogits => "Binary cross-entropy (1 logit)",
        Loss::CrossEntropy => "Softmax cross-entropy",
        Loss::Mse => "Mean squared error",
    }
}

/// lr over steps for the current schedule, as a small line chart.
#[component]
fn SchedulePreview() -> impl IntoView {
    let state = expect_context::<AppState>();
    let path = move || {
        let e = state.run.experiment.get();
        let total = schedule_fields(&e.schedule).1.max(1);
        let base = e.optimizer.lr().max(1e-12);
        let (w, h) = (160.0, 40.0);
        (0..=80u64)
            .map(|i| {
                let t = i * total / 80;
                let lr = learning_rate(&e.schedule, e.optimizer.lr(), t);
                let (x, y) = (i as f64 / 80.0 * w, h - lr / base * (h - 2.0) - 1.0);
                format!("{}{x:.1},{y:.1}", if i == 0 { "M" } else { " L" })
            })
            .collect::<String>()
    };
    view! {
        <figure class="preview" data-testid="schedule-preview">
            <svg viewBox="0 0 160 40" width="160" height="40" role="img" aria-label="Learning rate over steps">
                <path d=path fill="none" stroke="currentColor" stroke-width="1.5"/>
            </svg>
            <figcaption>"lr over steps"</figcaption>
        </figure>
    }
}
