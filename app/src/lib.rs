//! Stepscope's playground page: build a network, train it on WebGPU (or
//! the CPU engine compiled to WebAssembly), and watch it learn.
//!
//! `model/` holds the logic (experiment edits, the training loop, views);
//! `panels/` one component per panel; `state` the shared typed context.

pub mod bench;
mod hooks;
pub mod model;
mod panels;
pub mod state;

use leptos::prelude::*;

use panels::{
    anatomy::AnatomyPanel,
    controls::{Controls, Settings},
    data::DataPanel,
    gpt::GptPanel,
    header::Header,
    network::NetworkPanel,
    opened::OpenRunPanel,
    output::OutputPanel,
    runs::RunsPanel,
};
use state::AppState;

/// The page.
#[component]
pub fn App() -> impl IntoView {
    let state = AppState::new();
    hooks::register(state.run.commands.get_value());
    provide_context(state);
    // The small contexts, for panels that need only one of them.
    provide_context(state.run);
    provide_context(state.charts);
    provide_context(state.checkpoints);
    provide_context(state.lessons);
    state.start_training_loop();
    view! {
        <Header/>
        <main class="layout">
            <Controls/>
            <Settings/>
            <div class="columns">
                <DataPanel/>
                <NetworkPanel/>
                <OutputPanel/>
            </div>
            <GptPanel/>
            <RunsPanel/>
            <AnatomyPanel/>
            <OpenRunPanel/>
        </main>
    }
}

/// Writes a panic message into the page's `#panic` element.
pub fn show_panic(message: &str) {
    let Some(document) = web_sys::window().and_then(|w| w.document()) else { return };
    if let Some(el) = document.get_element_by_id("panic") {
        el.set_text_content(Some(&format!(
            "Stepscope hit an internal error (a bug): {message}. Reload the page; your experiment is in the URL."
        )));
        let _ = el.remove_attribute("hidden");
    }
}
