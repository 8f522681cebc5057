//! Loading checks everything before anything is returned, so a bad file
//! never leaves a half-loaded run: header size, JSON, format tag, the
//! experiment, every tensor's presence, dtype and shape, the digest, and
//! finiteness.

use std::collections::{BTreeMap, BTreeSet};

use safetensors::{Dtype, SafeTensors};

use super::{covered_metadata, digest, FORMAT_TAG, FORMAT_TAG_V1, MAX_HEADER_BYTES};
use crate::data::DataPosition;
use crate::engine::TrainState;
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::model::Layout;
use crate::optim::OptimizerState;

fn bad<T>(msg: String) -> Result<T> {
    Err(Error::Checkpoint(msg))
}

/// Checks the 8-byte length prefix against the file before handing the
/// bytes to the safetensors parser, so that truncation and oversized
/// headers get messages of their own.
fn parse(bytes: &[u8]) -> Result<SafeTensors<'_>> {
    if bytes.len() < 8 {
        return bad(format!(
            "truncated or not a safetensors file: {} bytes, fewer than the 8-byte header length",
            bytes.len()
        ));
    }
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if header_len > MAX_HEADER_BYTES {
        return bad(format!(
            "header claims {header_len} bytes, more than the {MAX_HEADER_BYTES}-byte limit (not a checkpoint, or corrupt)"
        ));
    }
    if 8 + header_len > bytes.len() as u64 {
        return bad(format!(
            "truncated: the header claims {header_len} bytes but the file has only {} after the length",
            bytes.len() - 8
        ));
    }
    if bytes.get(8) != Some(&b'{') {
        return bad("not a safetensors file: the header is not a JSON object".into());
    }
    let file = SafeTensors::deserialize(bytes).map_err(|e| {
        let why = match e {
            safetensors::SafeTensorError::MetadataIncompleteBuffer => {
                "truncated or padded: the tensor data does not match the sizes the header declares".to_string()
            }
            other => format!("malformed safetensors: {other}"),
        };
        Error::Checkpoint(why)
    })?;
    unique_header_keys(bytes)?;
    Ok(file)
}

/// Refuses a header that gives a key twice (`json::unique_keys`): the
/// safetensors parser reads it into maps, which keep the last of a
/// repeated key, so a tensor or a metadata entry given twice would load as
/// whichever came last. Call once the header's length has been checked.
fn unique_header_keys(bytes: &[u8]) -> Result<()> {
    let len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + len])
        .map_err(|e| Error::Checkpoint(format!("malformed safetensors: the header is not UTF-8 ({e})")))?;
    crate::json::unique_keys(header).map_err(|e| Error::Checkpoint(format!("malformed safetensors header: {e}")))
}

/// Reads one tensor by name with dtype and shape checks.
fn read_tensor(file: &SafeTensors<'_>, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
    let view = file.tensor(name).map_err(|_| Error::Checkpoint(format!("missing tensor `{name}`")))?;
    if view.dtype() != Dtype::F32 {
        return bad(format!("tensor `{name}` has dtype {:?}, expected F32", view.dtype()));
    }
    if view.shape() != shape {
        return bad(format!("tensor `{name}` has shape {:?} but the experiment's model needs {shape:?}", view.shape()));
    }
    let values: Vec<f32> =
        view.data().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect();
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return bad(format!("tensor `{name}` holds a non-finite value ({}) at index {i}", values[i]));
    }
    Ok(values)
}

/// Fails on any tensor in the file that is not in `expected`.
fn no_extra(file: &SafeTensors<'_>, expected: &BTreeSet<String>) -> Result<()> {
    let mut names = file.names();
    names.sort_unstable();
    match names.into_iter().find(|n| !expected.contains(*n)) {
        Some(extra) => bad(format!("unexpected tensor `{extra}` (not part of this model)")),
        None => Ok(()),
    }
}

/// Refuses, before allocating anything for them, tensors that cannot be in
/// the file: `copies` f32 copies of the model's parameters need 4·P·copies
/// bytes, which a 7 KB file claiming a model of gigabytes does not have.
fn fits_in_file(layout: &Layout, copies: usize, file_bytes: usize) -> Result<()> {
    let needed = 4u64.saturating_mul(layout.parameter_count as u64).saturating_mul(copies as u64);
    if needed > file_bytes as u64 {
        return bad(format!(
            "the model needs {needed} bytes of tensors ({} parameters, {copies} cop{}) but the file has only {file_bytes} bytes",
            layout.parameter_count,
            if copies == 1 { "y" } else { "ies" }
        ));
    }
    Ok(())
}

/// A full Stepscope checkpoint: parameters, optimizer state, data position
/// and RNG, and the experiment they belong to.
pub fn load_checkpoint(bytes: &[u8]) -> Result<TrainState> {
    let file = parse(bytes)?;
    let meta = metadata(bytes)?;
    let (experiment, step) = experiment_and_step(&meta)?;
    let get = |key: &str| meta_value(&meta, key);
    let format = get("format")?;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Position {
        rows_consumed: u64,
        epoch: u64,
    }
    let position: Position = crate::json::from_str(get("data_position")?)
        .map_err(|e| Error::Checkpoint(format!("metadata `data_position`: {e}")))?;
    let epoch_rng = parse_rng(get("rng_state")?)?;

    let layout = Layout::new(&experiment);
    fits_in_file(&layout, 1 + experiment.optimizer.state_copies(), bytes.len())?;
    let mut optimizer = OptimizerState::new(&experiment.optimizer, layout.parameter_count);
    optimizer.step = step;
    let suffixes: Vec<&'static str> = optimizer.buffers().iter().map(|(s, _)| *s).collect();
    let mut expected = BTreeSet::new();
    let mut params = vec![0.0f32; layout.parameter_count];
    let mut digest_parts = Vec::new();
    for t in layout.tensors() {
        let values = read_tensor(&file, &t.name, &t.shape)?;
        params[t.offset..t.offset + t.len].copy_from_slice(&values);
        expected.insert(t.name.clone());
        for suffix in &suffixes {
            let name = format!("optimizer.{}.{suffix}", t.name);
            let values = read_tensor(&file, &name, &t.shape)?;
            let buffer = optimizer.buffer_mut(suffix).expect("suffix from buffers()");
            buffer[t.offset..t.offset + t.len].copy_from_slice(&values);
            expected.insert(name);
        }
    }
    no_extra(&file, &expected)?;
    for name in &expected {
        let view = file.tensor(name).expect("checked above");
        digest_parts.push((name.as_str(), view.shape().to_vec(), view.data()));
    }
    // Format 2 covers the metadata too; format 1 only the tensors.
    let covered = match format.as_str() {
        FORMAT_TAG => covered_metadata(|k| meta.get(k))
            .map_err(|key| Error::Checkpoint(format!("metadata has no `{key}`: not a Stepscope checkpoint")))?,
        _ => Vec::new(),
    };
    let actual = digest(digest_parts.iter().map(|(n, s, d)| (*n, s.as_slice(), *d)), &covered);
    let stored = get("digest")?;
    if *stored != actual {
        return bad(format!(
            "digest mismatch: the tensors or the metadata were changed or corrupted (stored {stored}, computed {actual})"
        ));
    }
    let state = TrainState {
        experiment,
        params,
        optimizer,
        data_position: DataPosition { rows_consumed: position.rows_consumed, epoch: position.epoch, epoch_rng },
        vocabulary: meta
            .get("vocabulary")
            .map(|v| crate::data::Vocabulary::from_string(v))
            .transpose()
            .map_err(|e| Error::Checkpoint(format!("metadata `vocabulary`: {e}")))?,
    };
    // Metadata is input too: ranges and consistency, before anything runs.
    crate::engine::check_state(&state, None).map_err(|e| match e {
        Error::Experiment(why) => Error::Checkpoint(format!("refused: {why}")),
        other => other,
    })?;
    Ok(state)
}

/// The `__metadata__` map (empty when absent). Call after `parse`.
/// A checkpoint's experiment and step, from its header alone (the
/// tensors are not read): cheap for a file of hundreds of megabytes, so
/// that a caller can decide whether to load it (the page, about the run
/// autosaved in the browser). `load_checkpoint` checks everything else.
pub fn read_checkpoint_header(bytes: &[u8]) -> Result<(Experiment, u64)> {
    experiment_and_step(&metadata(bytes)?)
}

fn meta_value<'a>(meta: &'a std::collections::HashMap<String, String>, key: &str) -> Result<&'a String> {
    meta.get(key).ok_or_else(|| {
        Error::Checkpoint(format!(
            "metadata has no `{key}`: not a Stepscope checkpoint (a plain weights file can be given as initial weights instead)"
        ))
    })
}

fn experiment_and_step(meta: &std::collections::HashMap<String, String>) -> Result<(Experiment, u64)> {
    let format = meta_value(meta, "format")?;
    if format != FORMAT_TAG && format != FORMAT_TAG_V1 {
        return bad(format!(
            "format `{format}` is not supported (this build reads `{FORMAT_TAG}` and `{FORMAT_TAG_V1}`)"
        ));
    }
    let experiment = Experiment::from_json(meta_value(meta, "experiment")?)
        .map_err(|e| Error::Checkpoint(format!("the stored experiment is invalid: {e}")))?;
    let step: u64 = meta_value(meta, "step")?
        .parse()
        .map_err(|_| Error::Checkpoint("metadata `step` is not a whole number".into()))?;
    Ok((experiment, step))
}

fn metadata(bytes: &[u8]) -> Result<std::collections::HashMap<String, String>> {
    let (_, header) =
        SafeTensors::read_metadata(bytes).map_err(|e| Error::Checkpoint(format!("malformed safetensors: {e}")))?;
    unique_header_keys(bytes)?;
    Ok(header.metadata().clone().unwrap_or_default())
}

fn parse_rng(text: &str) -> Result<[u64; 4]> {
    let words: Vec<u64> = text
        .split(':')
        .map(|w| u64::from_str_radix(w, 16))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Checkpoint(format!("metadata `rng_state` `{text}` is not four hex words")))?;
    words.try_into().map_err(|_| Error::Checkpoint(format!("metadata `rng_state` `{text}` is not four hex words")))
}

/// Initial weights for `experiment` from a plain safetensors file (e.g.
/// `safetensors.torch.save_file(model.state_dict(), …)`) holding exactly
/// the model's tensors in F32 (`layers.{i}.weight` and `layers.{i}.bias`;
/// a transformer's nanoGPT names, its tied head as `transformer.wte.weight`
/// or, as `safetensors.torch.save_model` writes it, `lm_head.weight`). A full Stepscope
/// checkpoint is accepted too; only its weights are taken.
pub fn load_weights(bytes: &[u8], experiment: &Experiment) -> Result<Vec<f32>> {
    let file = parse(bytes)?;
    let layout = Layout::new(experiment);
    fits_in_file(&layout, 1, bytes.len())?;
    let mut params = vec![0.0f32; layout.parameter_count];
    let mut expected = BTreeSet::new();
    let names = file.names();
    for t in layout.tensors() {
        // A tied transformer's head and token embedding are one tensor;
        // `safetensors.torch.save_model` keeps the first of its names in
        // sorted order, `lm_head.weight`, and drops `transformer.wte.weight`.
        let tied = experiment.gpt().is_some_and(|g| g.tie_embeddings);
        let name = match t.name.as_str() {
            "transformer.wte.weight"
                if tied && !names.contains(&t.name.as_str()) && names.contains(&"lm_head.weight") =>
            {
                "lm_head.weight".to_string()
            }
            _ => t.name.clone(),
        };
        let values = read_tensor(&file, &name, &t.shape)?;
        params[t.offset..t.offset + t.len].copy_from_slice(&values);
        expected.insert(name);
    }
    // A Stepscope checkpoint (it has the format tag) also holds optimizer
    // state, which initial weights leave out; a plain weights file holds
    // the weights and nothing else.
    if metadata(bytes)?.contains_key("format") {
        expected.extend(file.names().into_iter().filter(|n| n.starts_with("optimizer.")).map(String::from));
    }
    no_extra(&file, &expected)?;
    Ok(params)
}

/// What `stepscope inspect` prints: metadata and every tensor's dtype and
/// shape, without interpreting them.
#[derive(Debug, Clone)]
pub struct FileInfo {
    pub metadata: BTreeMap<String, String>,
    pub tensors: Vec<(String, String, Vec<usize>)>,
}

pub fn read_file_info(bytes: &[u8]) -> Result<FileInfo> {
    let file = parse(bytes)?;
    let metadata = metadata(bytes)?.into_iter().collect();
    let mut tensors: Vec<_> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, format!("{:?}", view.dtype()), view.shape().to_vec()))
        .collect();
    tensors.sort_by_key(|t| natural_key(&t.0));
    Ok(FileInfo { metadata, tensors })
}

/// Sorts `layers.10` after `layers.9`.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    name.split('.')
        .map(|part| match part.parse::<u64>() {
            Ok(n) => (String::new(), n),
            Err(_) => (part.to_string(), 0),
        })
        .collect()
}
