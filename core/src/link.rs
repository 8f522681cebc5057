//! The page's URL state, which a shared link carries: the experiment in the
//! fragment (`#e=<the experiment JSON, URI-encoded>`) and flags in the query
//! (`?engine=cpu|gpu|auto`, `?backend=cpu`, `?fused=off`).
//!
//! A link comes from outside, so it is input like a file: it is decoded
//! here, in the core, where the fuzzer reaches it (`fuzz`, target `link`),
//! and an experiment it holds must pass the page's limits, so a link can
//! never build what the page's controls would refuse.
//!
//! The encoding is JavaScript's `encodeURIComponent`, and decoding is
//! `decodeURIComponent`'s: a `%` not followed by two hex digits, or
//! percent-escapes that are not UTF-8, are an error (the browser tests
//! compare both directions with the browser's own functions).

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::experiment::Experiment;
use crate::limits::Limits;

/// What starts the fragment that holds an experiment.
pub const FRAGMENT_KEY: &str = "#e=";

/// The longest fragment read. The largest experiment the page can build
/// (16 hidden layers with every option) encodes to about 5 KB;
/// anything far beyond is not an experiment.
pub const MAX_FRAGMENT_BYTES: usize = 64 * 1024;

/// The characters `encodeURIComponent` leaves as they are:
/// `A–Z a–z 0–9 - _ . ! ~ * ' ( )`.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// `encodeURIComponent(s)`.
pub fn encode_component(s: &str) -> String {
    utf8_percent_encode(s, COMPONENT).to_string()
}

/// `decodeURIComponent(s)`: an error names the first malformed escape.
pub fn decode_component(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(at) = bytes[i..].iter().position(|&b| b == b'%') {
        let at = i + at;
        let hex = bytes.get(at + 1..at + 3).filter(|h| h.iter().all(u8::is_ascii_hexdigit));
        if hex.is_none() {
            let shown: String = s[at..].chars().take(3).collect();
            return Err(format!("`{shown}` at character {} is not a percent-escape", s[..at].chars().count() + 1));
        }
        i = at + 3;
    }
    percent_decode_str(s)
        .decode_utf8()
        .map(|d| d.into_owned())
        .map_err(|_| "its percent-escapes are not UTF-8".to_string())
}

/// The fragment for `e`.
pub fn fragment(e: &Experiment) -> String {
    format!("{FRAGMENT_KEY}{}", encode_component(&e.to_json()))
}

/// Parses a URL fragment (`location.hash`, with its `#`): None when it holds
/// no experiment, an error naming what is wrong when it holds a bad one or
/// one the page's controls could not build.
pub fn parse_fragment(hash: &str) -> Result<Option<Experiment>, String> {
    let Some(encoded) = hash.strip_prefix(FRAGMENT_KEY) else {
        return Ok(None);
    };
    if encoded.len() > MAX_FRAGMENT_BYTES {
        return Err(format!(
            "it is {} bytes long, more than the {MAX_FRAGMENT_BYTES} an experiment needs",
            encoded.len()
        ));
    }
    let json = decode_component(encoded).map_err(|why| format!("not valid URI encoding: {why}"))?;
    let e = Experiment::from_json(&json).map_err(|err| err.to_string())?;
    Limits::PAGE.check(&e, None).map_err(|err| err.to_string())?;
    Ok(Some(e))
}

/// The value of `key` in a query string (`location.search`, with or
/// without its `?`), percent-decoded; the first one wins. None when the key
/// is absent or its value is not valid URI encoding.
pub fn query_value(search: &str, key: &str) -> Option<String> {
    search.trim_start_matches('?').split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode_component(k).ok()? == key).then(|| decode_component(v).ok()).flatten()
    })
}

/// The engine a query pins: `engine=cpu|gpu|auto`, or the older
/// `backend=cpu`; None (train on the faster one) for anything else.
pub fn engine_pin(search: &str) -> Option<&'static str> {
    match query_value(search, "engine").as_deref() {
        Some("cpu") => return Some("cpu"),
        Some("gpu") => return Some("gpu"),
        Some("auto") => return Some("auto"),
        _ => {}
    }
    (query_value(search, "backend").as_deref() == Some("cpu")).then_some("cpu")
}

/// Whether the query allows the GPU engine's fused step (`fused=off`: the
/// phased kernels only).
pub fn fused_allowed(search: &str) -> bool {
    query_value(search, "fused").as_deref() != Some("off")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_like() -> Experiment {
        Experiment::from_json(
            r#"{"seed": 1, "model": {"inputs": 2, "layers": [{"units": 16, "activation": "tanh"},
                {"units": 1, "activation": "linear"}]}, "loss": "bce_with_logits",
                "optimizer": {"kind": "adamw", "lr": 0.02}, "batch_size": 32,
                "data": {"source": "spiral", "samples": 500, "noise": 0.1, "features": ["x1", "x2"]}}"#,
        )
        .unwrap()
    }

    #[test]
    fn encoding_is_encode_uri_component() {
        // Values from the browser's encodeURIComponent.
        assert_eq!(encode_component("{\"a\": [1, 2.5e-3]}"), "%7B%22a%22%3A%20%5B1%2C%202.5e-3%5D%7D");
        assert_eq!(encode_component("-_.!~*'()"), "-_.!~*'()");
        assert_eq!(encode_component("é/#?&=+"), "%C3%A9%2F%23%3F%26%3D%2B");
        assert_eq!(decode_component("%C3%A9%2f+x").unwrap(), "é/+x");
    }

    #[test]
    fn malformed_escapes_are_named() {
        assert_eq!(decode_component("ab%4").unwrap_err(), "`%4` at character 3 is not a percent-escape");
        assert_eq!(decode_component("%zz").unwrap_err(), "`%zz` at character 1 is not a percent-escape");
        assert_eq!(decode_component("%C3").unwrap_err(), "its percent-escapes are not UTF-8");
        assert!(decode_component("%").is_err());
    }

    #[test]
    fn a_fragment_round_trips() {
        let e = default_like();
        assert_eq!(parse_fragment(&fragment(&e)).unwrap(), Some(e));
        assert_eq!(parse_fragment("").unwrap(), None);
        assert_eq!(parse_fragment("#other").unwrap(), None);
    }

    #[test]
    fn bad_fragments_are_refused_with_a_reason() {
        let bad = parse_fragment("#e=%7B%22seed%22%3A").unwrap_err();
        assert!(bad.contains("line 1"), "{bad}");
        assert!(parse_fragment("#e=%E0%A4%A").unwrap_err().contains("not valid URI encoding"));
        // What the controls could not build: 16 hidden layers of 2,048 units.
        let mut huge = default_like();
        huge.model.layers =
            (0..16).map(|_| huge.model.layers[0].clone()).chain([huge.model.layers[1].clone()]).collect();
        for layer in &mut huge.model.layers[..16] {
            layer.units = 2048;
        }
        let refused = parse_fragment(&fragment(&huge)).unwrap_err();
        assert!(refused.contains("layer"), "{refused}");
        let long = format!("#e={}", "a".repeat(MAX_FRAGMENT_BYTES + 1));
        assert!(parse_fragment(&long).unwrap_err().contains("bytes long"));
    }

    #[test]
    fn query_flags() {
        assert_eq!(engine_pin("?engine=gpu"), Some("gpu"));
        assert_eq!(engine_pin("engine=cpu&fused=off"), Some("cpu"));
        assert_eq!(engine_pin("?backend=cpu"), Some("cpu"));
        assert_eq!(engine_pin("?engine=tpu&backend=gpu"), None);
        assert_eq!(engine_pin("?engin=gpu"), None);
        assert_eq!(engine_pin("?engine=%67pu"), Some("gpu"));
        assert_eq!(engine_pin("?engine=%zz"), None);
        assert!(fused_allowed("?engine=gpu"));
        assert!(!fused_allowed("?engine=gpu&fused=off"));
        assert!(fused_allowed(""));
    }
}
