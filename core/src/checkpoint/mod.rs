//! Checkpoints in safetensors format, F32 little-endian, with tensor names
//! as PyTorch would give a `ModuleList` called `layers`:
//!
//! - `layers.{i}.weight` (O, I) and `layers.{i}.bias` (O);
//! - `optimizer.layers.{i}.{weight,bias}.{exp_avg,exp_avg_sq,momentum_buffer}`
//!   for the buffers the optimizer keeps;
//! - `__metadata__`: `format` (tag and version), `experiment` (JSON),
//!   `step`, `data_position` (JSON), `rng_state` (hex), for a text run
//!   `vocabulary` (its characters in token order), and `digest` (SHA-256 of
//!   the tensors and of that metadata, see `digest`).
//!
//! The transformer's tensors are nanoGPT's `state_dict` names
//! (`transformer.h.{i}.attn.c_attn.weight`, …), its optimizer buffers
//! `optimizer.{name}.{suffix}` as the MLP's.
//!
//! Loading (`load.rs`) checks all of it before returning anything.

mod load;
mod verify;

pub use load::{load_checkpoint, load_weights, read_checkpoint_header, read_file_info, FileInfo};
pub use verify::{verify_restore, VerifyReport};

use std::collections::HashMap;

use safetensors::{tensor::TensorView, Dtype};
use sha2::{Digest, Sha256};

use crate::engine::TrainState;
use crate::error::{Error, Result};
use crate::model::Layout;

pub const FORMAT_TAG: &str = "stepscope-checkpoint/2";
/// The previous format, still read: the same file, but its digest covers
/// the tensors only (its metadata is range-checked all the same).
pub const FORMAT_TAG_V1: &str = "stepscope-checkpoint/1";
/// The metadata a format-2 digest covers, in this order.
pub(crate) const DIGESTED_METADATA: [&str; 5] = ["format", "experiment", "step", "data_position", "rng_state"];
/// Covered after `DIGESTED_METADATA` where present (a text run's), so a
/// file without it has the digest it always had.
pub(crate) const DIGESTED_IF_PRESENT: [&str; 1] = ["vocabulary"];

/// The metadata a format-2 digest covers, from `get`: every
/// `DIGESTED_METADATA` key (an error where one is missing), then those of
/// `DIGESTED_IF_PRESENT` that are there.
pub(crate) fn covered_metadata<'a>(
    get: impl Fn(&str) -> Option<&'a String>,
) -> std::result::Result<Vec<(&'static str, &'a str)>, &'static str> {
    let mut covered = Vec::new();
    for key in DIGESTED_METADATA {
        covered.push((key, get(key).ok_or(key)?.as_str()));
    }
    for key in DIGESTED_IF_PRESENT {
        if let Some(v) = get(key) {
            covered.push((key, v.as_str()));
        }
    }
    Ok(covered)
}
/// Largest header accepted: far above any real model's (a 16-layer model's
/// header is a few KiB), far below what would exhaust memory.
pub const MAX_HEADER_BYTES: u64 = 16 << 20;

/// Every tensor of `state` by name, as f32 slices.
pub(crate) fn named_tensors<'a>(state: &'a TrainState, layout: &Layout) -> Vec<(String, Vec<usize>, &'a [f32])> {
    let mut out = Vec::new();
    for t in layout.tensors() {
        out.push((t.name.clone(), t.shape.clone(), &state.params[t.offset..t.offset + t.len]));
        for (suffix, buffer) in state.optimizer.buffers() {
            out.push((format!("optimizer.{}.{suffix}", t.name), t.shape.clone(), &buffer[t.offset..t.offset + t.len]));
        }
    }
    out
}

/// SHA-256 over the tensors in name order, each contributing its name, a 0
/// byte, its shape as u64 little-endian, and its data bytes; then over each
/// `metadata` entry in the order given (format 2: `DIGESTED_METADATA`), as
/// the key's and the value's byte lengths (u64 little-endian) and bytes.
pub(crate) fn digest<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a [usize], &'a [u8])>,
    metadata: &[(&str, &str)],
) -> String {
    let mut sorted: Vec<_> = tensors.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let mut hasher = Sha256::new();
    for (name, shape, data) in sorted {
        hasher.update(name.as_bytes());
        hasher.update([0u8]);
        for &d in shape {
            hasher.update((d as u64).to_le_bytes());
        }
        hasher.update(data);
    }
    for (key, value) in metadata {
        for part in [key.as_bytes(), value.as_bytes()] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
    }
    let bytes = hasher.finalize();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

pub(crate) fn to_le_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

pub(crate) fn rng_hex(state: [u64; 4]) -> String {
    state.iter().map(|w| format!("{w:016x}")).collect::<Vec<_>>().join(":")
}

/// Serialises `state` to the bytes of a `.safetensors` file. A state that
/// loading would refuse (a non-finite value, say an optimizer moment that
/// overflowed to inf) is refused here, naming what is wrong: what saves,
/// loads.
pub fn save_checkpoint(state: &TrainState) -> Result<Vec<u8>> {
    crate::engine::check_state(state, None).and_then(|()| crate::engine::check_finite(state)).map_err(|e| match e {
        Error::Experiment(why) => Error::Checkpoint(format!("this state cannot be saved: {why}")),
        other => other,
    })?;
    serialize_unchecked(state)
}

/// The file's bytes for `state`, with a correct digest but without
/// `save_checkpoint`'s checks: the tests of the CLI, the page and the core
/// write states that loading must refuse with it (absurd counters, a
/// negative moment), as a hostile file would hold them. Not for saving runs.
pub fn serialize_unchecked(state: &TrainState) -> Result<Vec<u8>> {
    let layout = Layout::new(&state.experiment);
    let named = named_tensors(state, &layout);
    let bytes: Vec<(String, Vec<usize>, Vec<u8>)> =
        named.into_iter().map(|(name, shape, values)| (name, shape, to_le_bytes(values))).collect();
    let position = &state.data_position;
    let mut metadata = HashMap::from([
        ("format".to_string(), FORMAT_TAG.to_string()),
        ("experiment".to_string(), state.experiment.to_json()),
        ("step".to_string(), state.step().to_string()),
        (
            "data_position".to_string(),
            format!("{{\"rows_consumed\":{},\"epoch\":{}}}", position.rows_consumed, position.epoch),
        ),
        ("rng_state".to_string(), rng_hex(position.epoch_rng)),
    ]);
    if let Some(vocabulary) = &state.vocabulary {
        metadata.insert("vocabulary".to_string(), vocabulary.as_string());
    }
    let covered = covered_metadata(|k| metadata.get(k)).expect("every key was inserted above");
    let digest = digest(bytes.iter().map(|(n, s, d)| (n.as_str(), s.as_slice(), d.as_slice())), &covered);
    metadata.insert("digest".to_string(), digest);
    let views = bytes
        .iter()
        .map(|(name, shape, data)| {
            TensorView::new(Dtype::F32, shape.clone(), data)
                .map(|view| (name.clone(), view))
                .map_err(|e| Error::Checkpoint(format!("tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize(views, Some(metadata)).map_err(|e| Error::Checkpoint(e.to_string()))
}

#[cfg(test)]
mod tests;
