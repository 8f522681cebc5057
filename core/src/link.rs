//! The page's URL state, which a shared link carries: the experiment in the
//! fragment (`#e=<the experiment JSON, URI-encoded>`) and flags in the query
//! (`?engine=cpu|gpu|auto`, `?backend=cpu`, `?fused=off`, and a classroom's
//! `?hide=<control ids>` and `?lock=1`).
//!
//! A link comes from outside, so it is input like a file: it is decoded
//! here, in the core, where the fuzzer reaches it (`fuzz`, target `link`),
//! and an experiment it holds must pass the page's limits, so a link can
//! never build what the page's controls would refuse. Parsing is strict:
//! a parameter given twice applies none of its values and is named
//! (`query_problems`, `HideRequest::problems`, `LockRequest::problem`), and
//! the experiment's JSON refuses a key given twice at any depth.
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

/// The raw (still percent-encoded) values of `key` in a query string
/// (`location.search`, with or without its `?`), in order.
fn query_raws<'a>(search: &'a str, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    search.trim_start_matches('?').split('&').filter_map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (decode_component(k).ok()? == key).then_some(v)
    })
}

/// The raw value of `key` in a query: None when it is absent, an error
/// naming it when it is given more than once. A repeated parameter is
/// refused, not settled by taking the first or the last: the link is
/// ambiguous, so none of its values applies.
fn query_raw<'a>(search: &'a str, key: &'a str) -> Result<Option<&'a str>, String> {
    let mut values = query_raws(search, key);
    let first = values.next();
    match values.count() {
        0 => Ok(first),
        more => Err(format!("{key}= appears {} times", more + 1)),
    }
}

/// The value of `key` in a query string, percent-decoded. None when the
/// key is absent, given more than once, or its value is not valid URI
/// encoding.
pub fn query_value(search: &str, key: &str) -> Option<String> {
    decode_component(query_raw(search, key).ok()??).ok()
}

/// The query parameters whose repeats have no other place to be named
/// (`engine`, `backend`, `fused`; `hide_request` and `lock_request` name
/// their own): one sentence each, for the page to show. A repeated one
/// applies none of its values.
pub fn query_problems(search: &str) -> Vec<String> {
    ["engine", "backend", "fused", "ranks"]
        .into_iter()
        .filter_map(|key| query_raw(search, key).err())
        .map(|why| format!("{why} in the link; none of them applies."))
        .collect()
}

/// The ranks a query asks for (`ranks=N`, 1..=16: workers sharing a
/// sharded run's steps); None for anything else or a repeat.
pub fn ranks(search: &str) -> Option<usize> {
    query_raw(search, "ranks").ok()??;
    query_value(search, "ranks")?.parse().ok().filter(|n| (1..=16).contains(n))
}

/// The engine a query pins: `engine=cpu|gpu|auto`, or the older
/// `backend=cpu`; None (train on the faster one) for anything else, a
/// repeated `engine` or `backend` included (`query_problems` names it).
pub fn engine_pin(search: &str) -> Option<&'static str> {
    if query_raw(search, "engine").is_err() {
        return None;
    }
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
    let raw = match query_raw(search, "hide") {
        Ok(Some(raw)) => raw,
        Ok(None) => return request,
        Err(why) => {
            request.problems.push(format!("{why}; nothing was hidden."));
            return request;
        }
    };
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
    let raw = match query_raw(search, "lock") {
        Ok(Some(raw)) => raw,
        Ok(None) => return LockRequest::default(),
        // Which of them was meant is unknown; a lock was asked for at least
        // once, so the network is locked, as for any value not 0.
        Err(why) => return LockRequest { locked: true, problem: Some(format!("{why}; the network is locked.")) },
    };
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
mod tests;
