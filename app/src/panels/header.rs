//! Title, the active backend (and why, when it is the CPU), and messages.

use leptos::prelude::*;

use crate::state::AppState;

#[component]
pub fn Header() -> impl IntoView {
    let state = expect_context::<AppState>();
    let backend = state.backend;
    let label = move || {
        let b = backend.get();
        if b.gpu {
            format!("{} · {}", b.name, b.adapter)
        } else {
            b.name.clone()
        }
    };
    let reason = move || backend.get().fallback_reason.map(|r| format!("Running on the CPU because {r}."));
    let dismiss = move |_| state.alert.set(None);
    let rollback = move |_| {
        if let Some(step) = state.rollback_offer.get_untracked() {
            state.running.set(false);
            state.command(crate::model::runner::Command::Rollback(step));
        }
    };
    view! {
        <header class="top">
            <h1>"Stepscope"</h1>
            <p class="tagline">"Watch a neural network train, and see what each step costs."</p>
            <div class="backend">
                "Backend: " <span data-testid="backend-name">{label}</span>
                <span class="reason" data-testid="backend-reason">{reason}</span>
            </div>
        </header>
        <Show when=move || state.alert.get().is_some()>
            <div class="alert" role="alert" data-testid="alert">
                {move || state.alert.get().unwrap_or_default()}
                <Show when=move || state.rollback_offer.get().is_some()>
                    <button data-testid="rollback" class="rollback" on:click=rollback>"Back to the last good checkpoint"</button>
                </Show>
                <button aria-label="Dismiss message" on:click=dismiss>"×"</button>
            </div>
        </Show>
        <Show when=move || state.notice.get().is_some()>
            <div class="notice" role="status" data-testid="notice">{move || state.notice.get().unwrap_or_default()}</div>
        </Show>
    }
}
