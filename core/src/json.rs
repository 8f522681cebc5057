//! Strict JSON: a key that appears twice in one object is refused, at any
//! depth, with its path (`model.layers[1].units appears twice`).
//!
//! serde_json, like JavaScript's `JSON.parse`, keeps the last of two equal
//! keys. A derived `Deserialize` refuses a repeated field only in an object
//! it reads itself; whatever goes through `serde_json::Value` (a part
//! whose fields depend on another field, such as the model and its
//! `kind`) silently takes the last. So every reader of JSON from outside
//! runs `unique_keys` on the text before its typed parse, and no field
//! added later can forget it. It is one pass over the text that builds
//! nothing: each object's keys are compared in a short list, or a hash set
//! once an object has more than `FEW` of them, so the pass stays linear
//! whatever the shape. serde_json bounds the nesting (128 levels).

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

/// Keys compared one by one before a hash set takes over.
const FEW: usize = 16;

/// Longest key shown in a message, in characters.
const SHOWN_KEY: usize = 40;

/// Why text was refused: a repeated key, with its path and position, or
/// not JSON at all (serde_json's message, with its position).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    Repeated { path: String, line: usize, column: usize },
    NotJson(String),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Refused::Repeated { path, line, column } => {
                write!(f, "{path} appears twice (line {line}, column {column})")
            }
            Refused::NotJson(why) => f.write_str(why),
        }
    }
}

/// Checks that no object in `text` repeats a key.
pub fn unique_keys(text: &str) -> Result<(), Refused> {
    let trail = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_str(text);
    let walked = Walk { trail: &trail }.deserialize(&mut de).and_then(|()| de.end());
    walked.map_err(|e| match trail.into_inner() {
        Some(mut segments) => {
            segments.reverse();
            Refused::Repeated { path: path(&segments), line: e.line(), column: e.column() }
        }
        None => Refused::NotJson(e.to_string()),
    })
}

/// `unique_keys`, then the typed parse of `text`; the error says why.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    unique_keys(text).map_err(|e| e.to_string())?;
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// One step of a path: an object's key or an array's index.
enum Segment {
    Key(String),
    Index(usize),
}

/// `model.layers[1].units`; a key that is not a plain name is quoted
/// (`data["a b"]`) and cut at `SHOWN_KEY` characters.
fn path(segments: &[Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Index(i) => out.push_str(&format!("[{i}]")),
            Segment::Key(key) => {
                let plain = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                let shown: String = key.chars().take(SHOWN_KEY).collect();
                let cut = if key.chars().count() > SHOWN_KEY { "…" } else { "" };
                if plain {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&shown);
                    out.push_str(cut);
                } else {
                    let quoted = serde_json::to_string(&shown).expect("a string serialises");
                    out.push_str(&format!("[{}{cut}]", quoted));
                }
            }
        }
    }
    out
}

/// Walks any value. On a repeated key the trail is started with that key,
/// and each level it unwinds through adds its own segment, so the happy
/// path keeps no path at all.
struct Walk<'t> {
    trail: &'t RefCell<Option<Vec<Segment>>>,
}

impl Walk<'_> {
    fn mark(&self, segment: Segment) {
        if let Some(segments) = self.trail.borrow_mut().as_mut() {
            segments.push(segment);
        }
    }
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            match seq.next_element_seed(Walk { trail: self.trail }) {
                Ok(Some(())) => index += 1,
                Ok(None) => return Ok(()),
                Err(e) => {
                    self.mark(Segment::Index(index));
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = Keys::Few(Vec::new());
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if seen.contains(&key) {
                *self.trail.borrow_mut() = Some(vec![Segment::Key(key.into_owned())]);
                return Err(A::Error::custom("a repeated key"));
            }
            if let Err(e) = map.next_value_seed(Walk { trail: self.trail }) {
                self.mark(Segment::Key(key.into_owned()));
                return Err(e);
            }
            seen.insert(key);
        }
        Ok(())
    }
}

/// An object's keys so far.
enum Keys<'de> {
    Few(Vec<Cow<'de, str>>),
    Many(HashSet<Cow<'de, str>>),
}

impl<'de> Keys<'de> {
    fn contains(&self, key: &str) -> bool {
        match self {
            Keys::Few(keys) => keys.iter().any(|k| k == key),
            Keys::Many(keys) => keys.contains(key),
        }
    }

    fn insert(&mut self, key: Cow<'de, str>) {
        match self {
            Keys::Few(keys) if keys.len() < FEW => keys.push(key),
            Keys::Few(keys) => {
                let mut many: HashSet<Cow<'de, str>> = keys.drain(..).collect();
                many.insert(key);
                *self = Keys::Many(many);
            }
            Keys::Many(keys) => {
                keys.insert(key);
            }
        }
    }
}

/// A key, borrowed from the text where it has no escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Cow<'de, str>, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Borrowed(key))
    }
    fn visit_str<E>(self, key: &str) -> Result<Cow<'de, str>, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

/// A JSON object read as `serde_json`'s map, refusing a repeated key at
/// any depth, for a `Deserialize` that must look at the object before it
/// knows its type (the model, by its `kind`). Reading the text with
/// `unique_keys` first names the whole path; this guard holds for input
/// that arrives some other way.
pub struct UniqueMap(pub serde_json::Map<String, serde_json::Value>);

impl<'de> serde::Deserialize<'de> for UniqueMap {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<UniqueMap, D::Error> {
        match d.deserialize_map(Build)? {
            serde_json::Value::Object(map) => Ok(UniqueMap(map)),
            _ => unreachable!("deserialize_map visits a map"),
        }
    }
}

/// Builds a `serde_json::Value`, refusing a repeated key.
struct Build;

impl<'de> DeserializeSeed<'de> for Build {
    type Value = serde_json::Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        d.deserialize_any(Build)
    }
}

impl<'de> Visitor<'de> for Build {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<serde_json::Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<serde_json::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<serde_json::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<serde_json::Value, D::Error> {
        d.deserialize_any(Build)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<serde_json::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Build)? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<serde_json::Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let shown: String = key.chars().take(SHOWN_KEY).collect();
                return Err(A::Error::custom(format!("`{shown}` appears twice")));
            }
            let value = map.next_value_seed(Build)?;
            out.insert(key, value);
        }
        Ok(serde_json::Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_named_with_its_path() {
        let cases = [
            (r#"{"a": 1, "a": 2}"#, "a appears twice (line 1, column 12)"),
            (r#"{"m": {"e": 16, "e": 8}}"#, "m.e appears twice"),
            (r#"{"m": {"l": [{"u": 1}, {"u": 2, "u": 3}]}}"#, "m.l[1].u appears twice"),
            (r#"[0, [1, {"x": {}, "x": []}]]"#, "[1][1].x appears twice"),
            (r#"{"a b": {"\u0063": 1, "c": 2}}"#, r#"["a b"].c appears twice"#),
            ("{\"k\": 1,\n \"k\": 1}", "k appears twice (line 2"),
        ];
        for (text, want) in cases {
            let why = unique_keys(text).unwrap_err().to_string();
            assert!(why.contains(want), "{text}: `{why}` lacks `{want}`");
        }
        let long = format!(r#"{{"{0}": 1, "{0}": 2}}"#, "k".repeat(100));
        assert!(unique_keys(&long).unwrap_err().to_string().starts_with(&format!("{}… appears twice", "k".repeat(40))));
    }

    #[test]
    fn what_repeats_no_key_passes_and_bad_json_is_named() {
        for text in [r#"{"a": 1, "b": {"a": 1}, "c": [{"a": 1}, {"a": 2}]}"#, "[]", "1", r#""s""#, " null "] {
            unique_keys(text).unwrap();
        }
        assert!(unique_keys("{\"a\": 1").unwrap_err().to_string().contains("EOF"));
        assert!(unique_keys("{} {}").unwrap_err().to_string().contains("trailing"));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(matches!(unique_keys(&deep), Err(Refused::NotJson(why)) if why.contains("recursion limit")));
    }

    /// Past `FEW` keys the set takes over: a repeat among thousands of keys
    /// is still found (a list would compare every pair of these 10⁵).
    #[test]
    fn a_wide_object_is_checked_with_a_set() {
        let keys: Vec<String> = (0..100_000).map(|i| format!("\"k{i}\": {i}")).collect();
        let text = format!("{{{}}}", keys.join(","));
        unique_keys(&text).unwrap();
        let repeated = format!("{{{}, \"k77777\": 0}}", keys.join(","));
        assert!(matches!(unique_keys(&repeated), Err(Refused::Repeated { path, .. }) if path == "k77777"));
    }

    #[test]
    fn unique_map_refuses_a_repeat_at_any_depth() {
        let ok: UniqueMap = serde_json::from_str(r#"{"a": [1, {"b": 2.5}], "c": null}"#).unwrap();
        assert_eq!(serde_json::Value::Object(ok.0), serde_json::json!({"a": [1, {"b": 2.5}], "c": null}));
        for text in [r#"{"a": 1, "a": 1}"#, r#"{"a": [{"b": 1, "b": 2}]}"#] {
            let why = serde_json::from_str::<UniqueMap>(text).err().unwrap().to_string();
            assert!(why.contains("appears twice"), "{why}");
        }
    }
}
