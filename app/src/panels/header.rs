//! Title, the active backend (and why, when it is the CPU), and messages.

use leptos::prelude::*;

use super::theme::ThemeToggle;
use crate::model::runner::{BackendInfo, Pin};
use crate::model::words::{fallback_summary, friendly_adapter, thousands};
use crate::state::AppState;

#[component]
pub fn Header() -> impl IntoView {
    let state = expect_context::<AppState>();
    let backend = state.run.backend;
    let label = move || {
        let b = backend.get();
        match (b.gpu, b.fused) {
            (true, true) => format!("{} — {} · fused step", b.name, friendly_adapter(&b.adapter)),
            (true, false) => format!("{} — {}", b.name, friendly_adapter(&b.adapter)),
            _ => b.name.clone(),
        }
    };
    let reason = move || why(&backend.get());
    let details = move || backend.get().fallback_reason.filter(|r| !r.contains("pinned"));
    let pin = state.run.engine_pin;
    let on_pin = move |ev: leptos::ev::Event| {
        if let Some(p) = Pin::parse(&event_target_value(&ev)) {
            state.pin_engine(p);
        }
    };
    let ranks = state.run.ranks;
    let asked = state.run.ranks_asked;
    let on_ranks = move |ev: leptos::ev::Event| {
        if let Ok(n) = event_target_value(&ev).parse::<usize>() {
            asked.set(n.max(1));
        }
    };
    let rank_choices = move || {
        let most = crate::state::default_ranks().max(asked.get()).max(2);
        [1usize, 2, 3, 4, 6, 8, 12, 16]
            .into_iter()
            .filter(|&n| n <= most)
            .map(|n| view! { <option value=n.to_string()>{n.to_string()}</option> })
            .collect_view()
    };
    let dismiss = move |_| state.run.alert.set(None);
    let rollback = move |_| {
        if let Some(step) = state.checkpoints.rollback_offer.get_untracked() {
            state.run.running.set(false);
            state.command(crate::model::runner::Command::Rollback(step));
        }
    };
    view! {
        <header class="top">
            <div class="brand">
                <Logo/>
                <div>
                    <h1>"Stepscope"</h1>
                    <p class="tagline">"Watch a neural network train, and see what each step costs."</p>
                </div>
            </div>
            <div class="backend">
                <span data-testid="backend-name" class="engine-name" data-settled=move || backend.get().settled.to_string()
                    title=move || backend.get().adapter>{label}</span>
                <span class="thread" data-testid="engine-thread"
                    title="Where training runs: in a background worker the page never waits for, or on the page's own thread">
                    {move || if state.run.in_worker.get() { "in a background worker" } else { "on the page's thread" }}
                </span>
                <span class="ranks" title="Ranks: workers that each take a share of every step's shards; their gradients are summed in shard order, so the losses are the same on any number">
                    <span data-testid="ranks" data-value=move || ranks.get().in_use.max(1).to_string()>
                        {move || match ranks.get().in_use.max(1) { 1 => "1 rank".to_string(), n => format!("{n} ranks") }}
                    </span>
                    " of "
                    <select data-testid="ranks-select" aria-label="Ranks asked for" on:change=on_ranks
                        prop:value=move || asked.get().to_string()>{rank_choices}</select>
                    {move || ranks.get().reason.map(|r| view! { <span class="reason" data-testid="ranks-reason">{r}</span> })}
                </span>
                <select data-testid="engine-pin" aria-label="Engine" on:change=on_pin
                    prop:value=move || pin.get().name()>
                    <option value="auto">"fastest (measured)"</option>
                    <option value="cpu">"CPU"</option>
                    <option value="gpu">"WebGPU"</option>
                </select>
                <span class="reason" data-testid="backend-reason">{reason}
                    {move || details().map(|d| view! {
                        <details class="why"><summary>"Details"</summary><span data-testid="backend-details">{d}</span></details>
                    })}
                </span>
            </div>
            <div class="header-actions">
                <ThemeToggle/>
            </div>
        </header>
        <Show when=move || state.run.alert.get().is_some()>
            <div class="alert" role="alert" data-testid="alert">
                {move || state.run.alert.get().unwrap_or_default()}
                <Show when=move || state.checkpoints.rollback_offer.get().is_some()>
                    <button data-testid="rollback" class="rollback" on:click=rollback>"Back to the last good checkpoint"</button>
                </Show>
                <button aria-label="Dismiss message" data-testid="dismiss-alert" on:click=dismiss>"×"</button>
            </div>
        </Show>
        <Show when=move || state.run.spike_warning.get().is_some()>
            <div class="warning" role="status" data-testid="spike-warning">
                <span>{move || state.run.spike_warning.get().unwrap_or_default()}</span>
                <span class="actions">
                    <Show when=move || state.checkpoints.rollback_offer.get().is_some()>
                        <button data-testid="spike-rollback" on:click=rollback>"Back to the last good checkpoint"</button>
                    </Show>
                    <button aria-label="Dismiss warning" data-testid="dismiss-warning" on:click=move |_| state.run.spike_warning.set(None)>"×"</button>
                </span>
            </div>
        </Show>
        <Show when=move || state.run.notice.get().is_some()>
            <div class="notice" role="status" data-testid="notice">{move || state.run.notice.get().unwrap_or_default()}</div>
        </Show>
    }
}

/// The mark: a loss curve falling through a step's frame (also the
/// favicon, app/favicon.svg).
#[component]
fn Logo() -> impl IntoView {
    view! {
        <svg class="logo" viewBox="0 0 32 32" width="30" height="30" aria-hidden="true">
            <rect x="1.5" y="1.5" width="29" height="29" rx="7" fill="#0b6bcb"/>
            <path d="M7 9 C 11 20, 15 22, 25 23" fill="none" stroke="#fff" stroke-width="2.6" stroke-linecap="round"/>
            <circle cx="7" cy="9" r="2.2" fill="#f59322"/>
            <circle cx="25" cy="23" r="2.2" fill="#fff"/>
        </svg>
    }
}

/// Why this engine runs: both measured figures, the pin, or why the GPU
/// cannot be used.
fn why(b: &BackendInfo) -> Option<String> {
    if let Some(reason) = &b.fallback_reason {
        return Some(fallback_summary(reason));
    }
    let race = b.race.as_ref()?;
    let path = match race.fused_invocations {
        Some(n) => format!("fused step, a workgroup of {n}"),
        None => "phased kernels".into(),
    };
    let workers = match race.cpu_ranks {
        1 => String::new(),
        n => format!(" on {n} workers"),
    };
    let figures = format!(
        "CPU (WebAssembly{workers}) {} steps/s; WebGPU ({}, {path}) {} steps/s for this network",
        thousands(race.cpu_steps_per_s),
        friendly_adapter(&b.adapter),
        thousands(race.gpu_steps_per_s)
    );
    Some(match (b.pin, race.gpu_wins()) {
        (Pin::Auto, true) => format!("WebGPU is faster here: {figures}."),
        (Pin::Auto, false) => format!("The CPU is faster here: {figures}."),
        _ => format!("Pinned: {figures}."),
    })
}
