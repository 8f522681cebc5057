//! The whole experiment lives in the URL, so a link restores it:
//! `#e=<the experiment JSON, URI-encoded>`. `?backend=cpu` forces the CPU
//! engine (for comparing backends and for tests).

use stepscope_core::Experiment;

const KEY: &str = "#e=";

/// The fragment for `e`.
pub fn fragment(e: &Experiment) -> String {
    format!("{KEY}{}", String::from(js_sys::encode_uri_component(&e.to_json())))
}

/// Parses a fragment: None when it holds no experiment, an error naming
/// what is wrong when it holds a bad one.
pub fn parse_fragment(hash: &str) -> Result<Option<Experiment>, String> {
    let Some(encoded) = hash.strip_prefix(KEY) else {
        return Ok(None);
    };
    let json = js_sys::decode_uri_component(encoded)
        .map_err(|_| "The link's experiment is not valid URI encoding; the default experiment is shown.".to_string())?;
    Experiment::from_json(&String::from(json))
        .map(Some)
        .map_err(|e| format!("The link's experiment was refused ({e}); the default experiment is shown."))
}

fn window() -> Option<web_sys::Window> {
    web_sys::window()
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
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&fragment(e)));
    }
}

/// Whether `?backend=cpu` asks for the CPU engine.
pub fn cpu_forced() -> bool {
    let search = window().and_then(|w| w.location().search().ok()).unwrap_or_default();
    search.contains("backend=cpu")
}
