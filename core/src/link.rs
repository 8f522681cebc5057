//! The page's URL state, which a shared link carries: the experiment in the
//! fragment (`#e=<the experiment JSON, URI-encoded>`) and flags in the query
//! (`?engine=cpu|gpu|auto`, `?backend=cpu`, `?fused=off`, and a classroom's
//! `?hide=<control ids>` and `?lock=1`).
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

/// The longest `hide=` value read (before decoding). Every control the page
/// has, listed by id, is under 1 KB; anything far longer is not a list of
/// controls.
pub const MAX_HIDE_BYTES: usize = 2048;

/// The most ids a `hide=` list holds; later ones are left out.
pub const MAX_HIDE_IDS: usize = 64;

/// The longest id read; a control's `data-testid` is far shorter.
pub const MAX_ID_CHARS: usize = 64;

/// What a link's `hide=` asks for: the well-formed ids, in order and
/// without repeats, and what was wrong with the rest. An id holds only
/// ASCII letters, digits, `-` and `_`, so the page can write it into a CSS
/// selector as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HideRequest {
    pub ids: Vec<String>,
    /// One sentence per problem, each naming what was refused.
    pub problems: Vec<String>,
}

/// The raw (still percent-encoded) value of `key` in a query; the first
/// one wins.
fn query_raw<'a>(search: &'a str, key: &str) -> Option<&'a str> {
    search.trim_start_matches('?').split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode_component(k).ok()? == key).then_some(v)
    })
}

/// An item of a link as a message can show it: at most 24 characters,
/// control characters escaped.
fn shown(item: &str) -> String {
    let mut s: String = item
        .chars()
        .take(24)
        .map(|c| if c.is_control() { c.escape_default().collect() } else { c.to_string() })
        .collect();
    if item.chars().count() > 24 {
        s.push('…');
    }
    s
}

/// Whether `id` can name a control: 1 to `MAX_ID_CHARS` ASCII letters,
/// digits, `-` or `_`.
pub fn is_control_id(id: &str) -> bool {
    (1..=MAX_ID_CHARS).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The controls a query's `hide=` lists (comma-separated `data-testid`s,
/// e.g. `hide=optimizer,learning-rate`). Empty items and spaces around an
/// id are skipped; an item that cannot be an id is refused by name and the
/// rest still apply; a list over `MAX_HIDE_BYTES` or not valid URI
/// encoding is refused whole.
pub fn hide_request(search: &str) -> HideRequest {
    let mut request = HideRequest::default();
    let Some(raw) = query_raw(search, "hide") else { return request };
    if raw.len() > MAX_HIDE_BYTES {
        request.problems.push(format!(
            "hide= is {} characters long, more than the {MAX_HIDE_BYTES} a list of controls needs; nothing was hidden.",
            raw.len()
        ));
        return request;
    }
    let value = match decode_component(raw) {
        Ok(value) => value,
        Err(why) => {
            request.problems.push(format!("hide= is not valid URI encoding ({why}); nothing was hidden."));
            return request;
        }
    };
    let mut refused = Vec::new();
    let mut dropped = 0;
    for item in value.split(',').map(|item| item.trim_matches(|c: char| c.is_ascii_whitespace())) {
        if item.is_empty() || request.ids.iter().any(|id| id == item) {
            continue;
        }
        if !is_control_id(item) {
            refused.push(format!("`{}`", shown(item)));
        } else if request.ids.len() == MAX_HIDE_IDS {
            dropped += 1;
        } else {
            request.ids.push(item.to_string());
        }
    }
    if !refused.is_empty() {
        request.problems.push(format!(
            "hide=: {} cannot name a control (ids are letters, digits, - and _); the rest apply.",
            refused.join(", ")
        ));
    }
    if dropped > 0 {
        request
            .problems
            .push(format!("hide= lists more than {MAX_HIDE_IDS} controls; the last {dropped} were left out."));
    }
    request
}

/// What a query's `lock=` asks for: `lock=1` (or `lock=true`, or a bare
/// `lock`) makes the network read-only, `lock=0` or none leaves it
/// editable. Any other value locks too, with a message: a teacher who
/// wrote `lock=yes` meant a lock.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LockRequest {
    pub locked: bool,
    pub problem: Option<String>,
}

pub fn lock_request(search: &str) -> LockRequest {
    let Some(raw) = query_raw(search, "lock") else { return LockRequest::default() };
    match decode_component(raw).as_deref() {
        Ok("" | "1" | "true") => LockRequest { locked: true, problem: None },
        Ok("0" | "false") => LockRequest { locked: false, problem: None },
        _ => LockRequest {
            locked: true,
            problem: Some(format!("lock=`{}` is not 1 or 0; the network is locked.", shown(raw))),
        },
    }
}

/// `search` with its engine pin set to `engine` (None: no pin, the faster
/// engine), for the page to write back: `engine` and the older `backend`
/// are replaced, every other parameter (`fused`, `hide`, `lock`, …) is
/// kept as it was. Returns `""` or a query with its `?`.
pub fn query_with_engine(search: &str, engine: Option<&str>) -> String {
    let is_pin = |pair: &&str| {
        let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
        matches!(decode_component(key).as_deref(), Ok("engine" | "backend"))
    };
    let pin = engine.map(|name| format!("engine={}", encode_component(name)));
    let kept = search.trim_start_matches('?').split('&').filter(|pair| !pair.is_empty() && !is_pin(pair));
    let pairs: Vec<String> = pin.into_iter().chain(kept.map(String::from)).collect();
    if pairs.is_empty() {
        String::new()
    } else {
        format!("?{}", pairs.join("&"))
    }
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

    #[test]
    fn hide_lists_ids_and_names_what_it_refuses() {
        let r = hide_request("?engine=cpu&hide=optimizer,learning-rate");
        assert_eq!(r.ids, ["optimizer", "learning-rate"]);
        assert!(r.problems.is_empty());
        // Empty items, spaces, repeats and percent-escapes.
        let r = hide_request("hide=,optimizer,,%20seed%20,optimizer,%6Doment_um,");
        assert_eq!(r.ids, ["optimizer", "seed", "moment_um"]);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
        assert_eq!(hide_request("?engine=gpu"), HideRequest::default());
        assert_eq!(hide_request("?hide="), HideRequest::default());
        // What cannot be an id is named; the rest still apply.
        let r = hide_request("?hide=seed,%3Cscript%3Ealert(1)%3C%2Fscript%3E,a%22%5D%7Bx,dataset");
        assert_eq!(r.ids, ["seed", "dataset"]);
        assert_eq!(r.problems.len(), 1);
        assert!(r.problems[0].contains("`<script>alert(1)</script…`"), "{}", r.problems[0]);
        assert!(r.problems[0].contains("`a\"]{x`"), "{}", r.problems[0]);
        let long = "x".repeat(MAX_ID_CHARS + 1);
        assert!(hide_request(&format!("hide={long}")).ids.is_empty());
        let control = hide_request("hide=a%0Ab");
        assert!(control.ids.is_empty() && control.problems[0].contains("`a\\nb`"), "{:?}", control);
    }

    #[test]
    fn hostile_hide_lists_are_refused_whole_or_capped() {
        // 100 KB of commas: over the cap, refused whole with its length.
        let commas = format!("?hide={}", ",".repeat(100_000));
        let r = hide_request(&commas);
        assert!(r.ids.is_empty());
        assert_eq!(r.problems.len(), 1);
        assert!(r.problems[0].contains("100000 characters"), "{}", r.problems[0]);
        // Under the cap, commas alone are empty items: nothing, no problem.
        assert_eq!(hide_request(&format!("?hide={}", ",".repeat(MAX_HIDE_BYTES))), HideRequest::default());
        let bad = hide_request("?hide=seed%zz");
        assert!(bad.ids.is_empty() && bad.problems[0].contains("not valid URI encoding"), "{:?}", bad);
        let many: Vec<String> = (0..MAX_HIDE_IDS + 3).map(|i| format!("id{i}")).collect();
        let r = hide_request(&format!("hide={}", many.join(",")));
        assert_eq!(r.ids.len(), MAX_HIDE_IDS);
        assert!(r.problems[0].contains("last 3"), "{:?}", r.problems);
        for id in &r.ids {
            assert!(is_control_id(id));
        }
    }

    #[test]
    fn lock_flag() {
        assert_eq!(lock_request("?engine=cpu"), LockRequest { locked: false, problem: None });
        assert!(lock_request("?lock=1").locked && lock_request("lock").locked && lock_request("lock=true").locked);
        assert_eq!(lock_request("?lock=0"), LockRequest { locked: false, problem: None });
        let odd = lock_request("?lock=yes");
        assert!(odd.locked && odd.problem.as_deref().is_some_and(|p| p.contains("`yes`")), "{odd:?}");
        assert!(lock_request("?lock=%zz").locked);
    }

    #[test]
    fn the_engine_pin_is_rewritten_and_the_rest_kept() {
        let q = query_with_engine("?engine=gpu&fused=off&hide=optimizer,seed&lock=1", Some("cpu"));
        assert_eq!(q, "?engine=cpu&fused=off&hide=optimizer,seed&lock=1");
        assert_eq!(engine_pin(&q), Some("cpu"));
        assert_eq!(hide_request(&q).ids, ["optimizer", "seed"]);
        assert!(lock_request(&q).locked && !fused_allowed(&q));
        assert_eq!(query_with_engine("?backend=cpu&lock=1", None), "?lock=1");
        assert_eq!(query_with_engine("", Some("gpu")), "?engine=gpu");
        assert_eq!(query_with_engine("?engine=cpu", None), "");
        assert_eq!(query_with_engine("?&&hide=a&", Some("auto")), "?engine=auto&hide=a");
    }
}
