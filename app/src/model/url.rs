//! The whole experiment lives in the URL, so a link restores it:
//! `#e=<the experiment JSON, URI-encoded>`. `?engine=cpu|gpu` pins an
//! engine (the default, auto, trains on the faster one); the older
//! `?backend=cpu` still pins the CPU. A classroom's `?hide=` and `?lock=1`
//! (`model::classroom`) are kept whenever the page rewrites its URL: the
//! fragment is replaced alone, and the pin replaces only itself in the
//! query. The parsing is the core's
//! (`stepscope_core::link`), where it is tested and fuzzed; this module
//! reads and writes the browser's location.

use stepscope_core::{link, Experiment};

use super::classroom::Classroom;
use super::runner::Pin;

/// Parses a fragment: None when it holds no experiment, an error naming
/// what is wrong when it holds a bad one.
pub fn parse_fragment(hash: &str) -> Result<Option<Experiment>, String> {
    link::parse_fragment(hash)
        .map_err(|why| format!("The link's experiment was refused ({why}); the default experiment is shown."))
}

fn window() -> Option<web_sys::Window> {
    web_sys::window()
}

fn search() -> String {
    window().and_then(|w| w.location().search().ok()).unwrap_or_default()
}

/// The experiment in the current URL.
pub fn experiment_from_url() -> Result<Option<Experiment>, String> {
    let hash = window().and_then(|w| w.location().hash().ok()).unwrap_or_default();
    parse_fragment(&hash)
}

/// Replaces the URL's fragment with `e` (no new history entry).
pub fn write_url(e: &Experiment) {
    let Some(w) = window() else { return };
    if let Ok(history) = w.history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&link::fragment(e)));
    }
}

/// The engine the URL pins (`?engine=cpu|gpu|auto`, or `?backend=cpu`);
/// anything unknown is auto.
pub fn engine_pin() -> Pin {
    link::engine_pin(&search()).and_then(Pin::parse).unwrap_or_default()
}

/// Ranks the link asks for (`?ranks=N`), if it does.
pub fn ranks() -> Option<usize> {
    link::ranks(&search())
}

/// Whether the GPU engine may run the fused step (`?fused=off`: the
/// phased kernels only).
pub fn fused_allowed() -> bool {
    link::fused_allowed(&search())
}

/// Keeps `pin` in the URL's query (auto: no pin), with every other
/// parameter and the fragment.
pub fn write_pin(pin: Pin) {
    let Some(w) = window() else { return };
    let location = w.location();
    let path = location.pathname().unwrap_or_default();
    let hash = location.hash().unwrap_or_default();
    let engine = (pin != Pin::Auto).then(|| pin.name());
    let query = link::query_with_engine(&search(), engine);
    if let Ok(history) = w.history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("{path}{query}{hash}")));
    }
}

/// What the URL's query asks of a classroom (`?hide=`, `?lock=`).
pub fn classroom() -> Classroom {
    Classroom::from_search(&search())
}

/// The link to this page as it is now: its address and query (the engine
/// pin, `hide`, `lock`, …) and `e`, the current experiment, in the
/// fragment (a page that was never edited has no fragment yet).
pub fn share_link(e: &Experiment) -> String {
    let Some(location) = window().map(|w| w.location()) else { return link::fragment(e) };
    let origin = location.origin().unwrap_or_default();
    let path = location.pathname().unwrap_or_default();
    format!("{origin}{path}{}{}", search(), link::fragment(e))
}
