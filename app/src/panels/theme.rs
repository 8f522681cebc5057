//! The light/dark theme toggle. The stylesheet follows the system's
//! `prefers-color-scheme` until the user picks a theme here; the pick is
//! kept in this browser (localStorage), not in the URL, since a shared link
//! should open in the reader's own theme. index.html applies a kept pick
//! before the page's wasm loads, so the page never flashes the other theme.

use leptos::prelude::*;

/// localStorage key of the user's pick ("light" or "dark").
const KEY: &str = "stepscope-theme";

fn root() -> Option<web_sys::Element> {
    web_sys::window()?.document()?.document_element()
}

/// The theme in force: the user's pick, else the system's.
fn current() -> &'static str {
    let picked = root().and_then(|r| r.get_attribute("data-theme"));
    match picked.as_deref() {
        Some("dark") => "dark",
        Some("light") => "light",
        _ => {
            let dark = web_sys::window()
                .and_then(|w| w.match_media("(prefers-color-scheme: dark)").ok().flatten())
                .is_some_and(|m| m.matches());
            if dark {
                "dark"
            } else {
                "light"
            }
        }
    }
}

fn apply(theme: &str) {
    if let Some(r) = root() {
        let _ = r.set_attribute("data-theme", theme);
    }
    if let Some(storage) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        // A browser that refuses storage still switches for this visit.
        let _ = storage.set_item(KEY, theme);
    }
}

#[component]
pub fn ThemeToggle() -> impl IntoView {
    let theme = RwSignal::new(current());
    let toggle = move |_| {
        let next = if theme.get_untracked() == "dark" { "light" } else { "dark" };
        apply(next);
        theme.set(next);
    };
    view! {
        <button data-testid="theme-toggle" class="theme-toggle" on:click=toggle data-theme=move || theme.get()
            aria-label=move || if theme.get() == "dark" { "Switch to the light theme" } else { "Switch to the dark theme" }
            title=move || if theme.get() == "dark" { "Light theme" } else { "Dark theme" }>
            {move || if theme.get() == "dark" { "☀ Light" } else { "☾ Dark" }}
        </button>
    }
}
