//! Sharing and exports: copy the page's link (the experiment, the engine
//! pin and a classroom's `hide`/`lock`), download the recorded metrics as
//! CSV, and what the link's classroom parameters could not apply.

use leptos::prelude::*;
use stepscope_core::stats::TensorStats;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::model::classroom::{hide_css, install_hide_style, unknown_ids};
use crate::model::url;
use crate::state::{download, AppState};

/// Copies `text` with the asynchronous clipboard; an error where the
/// browser has none or refuses.
async fn copy(text: &str) -> Result<(), ()> {
    let navigator = web_sys::window().ok_or(())?.navigator();
    let clipboard = js_sys::Reflect::get(&navigator, &"clipboard".into()).map_err(drop)?;
    if clipboard.is_undefined() || clipboard.is_null() {
        return Err(());
    }
    let clipboard: web_sys::Clipboard = clipboard.unchecked_into();
    JsFuture::from(clipboard.write_text(text)).await.map(drop).map_err(drop)
}

#[component]
pub fn Share() -> impl IntoView {
    let state = expect_context::<AppState>();
    let classroom = url::classroom();
    // One style sheet hides the listed controls wherever and whenever
    // they are rendered (model::classroom).
    install_hide_style(&hide_css(&classroom.hide.ids));
    let link_notice = RwSignal::new(classroom.notice(&[]));
    // Ids are checked against the page once it is drawn: a control a
    // panel adds is known by its element.
    request_animation_frame(move || link_notice.set(classroom.notice(&unknown_ids(&classroom.hide.ids))));

    let status = RwSignal::new(String::new());
    let fallback = RwSignal::new(None::<String>);
    let on_copy = move |_| {
        let link = url::share_link(&state.run.experiment.get_untracked());
        leptos::task::spawn_local(async move {
            match copy(&link).await {
                Ok(()) => {
                    fallback.set(None);
                    status.set("Link copied".into());
                }
                Err(()) => {
                    status.set("The browser did not allow copying: select the link below and copy it.".into());
                    fallback.set(Some(link));
                }
            }
        });
    };
    let on_download = move |_| {
        // The experiment on one line, so the file says what it measured.
        let about = serde_json::to_string(&state.run.experiment.get_untracked()).unwrap_or_default();
        let (csv, rows) = state.charts.metrics_log.with_value(|log| (log.to_csv(&about), log.rows().len()));
        if rows == 0 {
            status.set("No steps recorded yet: train first.".into());
            return;
        }
        let name = format!("stepscope-metrics-step{}.csv", state.run.step.get_untracked());
        match download(csv.as_bytes(), &name) {
            Ok(()) => status.set(format!("Downloaded {rows} rows")),
            Err(message) => state.run.alert.set(Some(message)),
        }
    };
    let on_tensorboard = move |_| {
        let end_s = js_sys::Date::now() / 1e3;
        let (events, rows) = state.charts.layer_history.with_untracked(|kept| {
            let layers: Vec<(u64, &[[TensorStats; 4]])> = kept.iter().map(|s| (s.step, &s.layers[..])).collect();
            state.charts.metrics_log.with_value(|log| (log.to_tensorboard(end_s, &layers), log.rows().len()))
        });
        if rows == 0 {
            status.set("No steps recorded yet: train first.".into());
            return;
        }
        // TensorBoard reads files whose names hold `tfevents`.
        let name =
            format!("events.out.tfevents.{}.stepscope-page.step{}", end_s as u64, state.run.step.get_untracked());
        match download(&events, &name) {
            Ok(()) => status.set(format!(
                "Downloaded {rows} steps for TensorBoard (put the file in a folder: tensorboard --logdir FOLDER)"
            )),
            Err(message) => state.run.alert.set(Some(message)),
        }
    };
    let on_trace = move |_| {
        let end_s = js_sys::Date::now() / 1e3;
        let backend = state.run.backend.get_untracked();
        let device = (backend.gpu && !backend.adapter.is_empty()).then_some(backend.adapter);
        let (traces, rows) =
            state.charts.metrics_log.with_value(|log| (log.to_traces(end_s, device), log.rows().len()));
        if rows == 0 {
            status.set("No steps recorded yet: train first.".into());
            return;
        }
        let step = state.run.step.get_untracked();
        // One trace per rank, as torchrun's: several in one folder, as a
        // tar archive.
        let (bytes, name, said) = match &traces[..] {
            [(_, one)] => (
                one.clone().into_bytes(),
                format!("stepscope-page-step{step}.pt.trace.json"),
                format!("Downloaded a trace of {rows} steps (open it in ui.perfetto.dev)"),
            ),
            _ => {
                let folder = format!("stepscope-page-step{step}");
                let files: Vec<(String, Vec<u8>)> = traces
                    .iter()
                    .map(|(r, json)| (format!("rank{r}.pt.trace.json"), json.clone().into_bytes()))
                    .collect();
                (
                    crate::model::tar::tar(&folder, &files, end_s as u64),
                    format!("{folder}.tar"),
                    format!(
                        "Downloaded {} ranks' traces of {rows} steps, one per rank as torchrun's (tar xf it; open the folder's files together, or give it to HTA)",
                        traces.len()
                    ),
                )
            }
        };
        match download(&bytes, &name) {
            Ok(()) => status.set(said),
            Err(message) => state.run.alert.set(Some(message)),
        }
    };
    let select_all = move |ev: leptos::ev::FocusEvent| {
        if let Some(input) = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok()) {
            input.select();
        }
    };
    view! {
        <div class="share" role="group" aria-label="Share and export">
            <button data-testid="copy-link" title="Copy a link to this experiment (with the link's hide= and lock=)"
                on:click=on_copy>"Copy link"</button>
            <button data-testid="download-metrics" title="Every recorded step's loss, gradient norm, learning rate and phase times, as CSV"
                on:click=on_download>"Metrics CSV"</button>
            <button data-testid="download-tensorboard" title="The recorded steps as a TensorBoard event file, with the tags stepscope train --tensorboard writes"
                on:click=on_tensorboard>"TensorBoard"</button>
            <button data-testid="download-trace" title="The recorded steps as a trace (Trace Event JSON, as PyTorch's profiler writes it) for Perfetto"
                on:click=on_trace>"Trace"</button>
            <span class="share-status" role="status" data-testid="share-status">{move || status.get()}</span>
            {move || fallback.get().map(|link| view! {
                <input class="share-link" type="text" readonly data-testid="copy-link-field" aria-label="Link to this experiment"
                    prop:value=link on:focus=select_all/>
            })}
            {move || link_notice.get().map(|text| view! {
                <p class="notice" role="status" data-testid="link-notice">{text}</p>
            })}
        </div>
    }
}
