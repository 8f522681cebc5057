//! The whole experiment lives in the URL, so a link restores it:
//! `#e=<the experiment JSON, URI-encoded>`. `?engine=cpu|gpu` pins an
//! engine (the default, auto, trains on the faster one); the older
//! `?backend=cpu` still pins the CPU.

use stepscope_core::Experiment;

use super::runner::Pin;

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
    let refused = |why: String| format!("The link's experiment was refused ({why}); the default experiment is shown.");
    let e = Experiment::from_json(&String::from(json)).map_err(|e| refused(e.to_string()))?;
    // A link builds only what the page's controls could build.
    super::edit::page_check(&e, None).map_err(refused)?;
    Ok(Some(e))
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

/// The engine the URL pins (`?engine=cpu|gpu|auto`, or `?backend=cpu`).
pub fn engine_pin() -> Pin {
    let search = window().and_then(|w| w.location().search().ok()).unwrap_or_default();
    parse_pin(&search)
}

/// The pin in a query string; anything unknown is auto.
pub fn parse_pin(search: &str) -> Pin {
    let value = |key: &str| {
        search.trim_start_matches('?').split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
    };
    match (value("engine").and_then(Pin::parse), value("backend")) {
        (Some(pin), _) => pin,
        (None, Some("cpu")) => Pin::Cpu,
        _ => Pin::Auto,
    }
}

/// Whether the GPU engine may run the fused step (`?fused=off`: the
/// phased kernels only).
pub fn fused_allowed() -> bool {
    let search = window().and_then(|w| w.location().search().ok()).unwrap_or_default();
    !search.trim_start_matches('?').split('&').any(|pair| pair == "fused=off")
}

/// Keeps `pin` in the URL's query (auto: no query), with the fragment.
pub fn write_pin(pin: Pin) {
    let Some(w) = window() else { return };
    let location = w.location();
    let path = location.pathname().unwrap_or_default();
    let hash = location.hash().unwrap_or_default();
    let mut pairs: Vec<String> = if pin == Pin::Auto { Vec::new() } else { vec![format!("engine={}", pin.name())] };
    if !fused_allowed() {
        pairs.push("fused=off".into());
    }
    let query = if pairs.is_empty() { String::new() } else { format!("?{}", pairs.join("&")) };
    if let Ok(history) = w.history() {
        let _ = history.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&format!("{path}{query}{hash}")));
    }
}
