//! Each kind of bad file is refused with its own message, and a good one
//! round-trips exactly.

use std::collections::HashMap;

use safetensors::{tensor::TensorView, Dtype};

use super::*;
use crate::data::Dataset;
use crate::engine::CpuEngine;
use crate::experiment::Experiment;

fn experiment() -> Experiment {
    Experiment::from_json(
        r#"{"seed": 3, "model": {"inputs": 2, "layers": [{"units": 3, "activation": "relu"}, {"units": 1, "activation": "linear"}]},
            "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.01}, "batch_size": 8,
            "data": {"source": "xor", "samples": 40}}"#,
    )
    .unwrap()
}

fn trained_state() -> TrainState {
    let e = experiment();
    let mut engine = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
    for _ in 0..3 {
        engine.step().unwrap();
    }
    engine.state()
}

fn error_of(bytes: &[u8]) -> String {
    load_checkpoint(bytes).unwrap_err().to_string()
}

/// Rebuilds a checkpoint's file with one change to tensors or metadata.
fn rebuild(
    bytes: &[u8],
    edit: impl FnOnce(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>, &mut HashMap<String, String>),
) -> Vec<u8> {
    let file = safetensors::SafeTensors::deserialize(bytes).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(bytes).unwrap();
    let mut meta = header.metadata().clone().unwrap();
    let mut tensors: Vec<_> =
        file.tensors().into_iter().map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    edit(&mut tensors, &mut meta);
    let views: Vec<_> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    safetensors::serialize(views, Some(meta)).unwrap()
}

#[test]
fn round_trip_is_exact_and_names_follow_pytorch() {
    let state = trained_state();
    let bytes = save_checkpoint(&state).unwrap();
    assert_eq!(load_checkpoint(&bytes).unwrap(), state);
    let info = read_file_info(&bytes).unwrap();
    let names: Vec<&str> = info.tensors.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "layers.0.bias",
            "layers.0.weight",
            "layers.1.bias",
            "layers.1.weight",
            "optimizer.layers.0.bias.exp_avg",
            "optimizer.layers.0.bias.exp_avg_sq",
            "optimizer.layers.0.weight.exp_avg",
            "optimizer.layers.0.weight.exp_avg_sq",
            "optimizer.layers.1.bias.exp_avg",
            "optimizer.layers.1.bias.exp_avg_sq",
            "optimizer.layers.1.weight.exp_avg",
            "optimizer.layers.1.weight.exp_avg_sq",
        ]
    );
    assert_eq!(info.tensors[1].2, vec![3, 2]);
    assert_eq!(info.metadata["format"], FORMAT_TAG);
    assert_eq!(info.metadata["step"], "3");
}

#[test]
fn every_kind_of_corruption_is_refused_with_its_own_message() {
    let bytes = save_checkpoint(&trained_state()).unwrap();
    let mut cases: Vec<(Vec<u8>, &str)> = vec![
        (bytes[..5].to_vec(), "fewer than the 8-byte header length"),
        (bytes[..bytes.len() - 7].to_vec(), "truncated or padded"),
        (bytes[..100].to_vec(), "truncated: the header claims"),
        ([&(1u64 << 40).to_le_bytes()[..], &bytes[8..]].concat(), "more than the 16777216-byte limit"),
        (b"PK\x03\x04 this is a zip file, not a checkpoint".to_vec(), "more than the"),
        ([&8u64.to_le_bytes()[..], b"not json"].concat(), "not a JSON object"),
        ([&8u64.to_le_bytes()[..], b"{broken "].concat(), "malformed safetensors"),
    ];
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0x01;
    cases.push((flipped, "digest mismatch"));
    cases.push((rebuild(&bytes, |t, _| t.retain(|x| x.0 != "layers.1.bias")), "missing tensor `layers.1.bias`"));
    cases.push((
        rebuild(&bytes, |t, _| t.push(("extra.weight".into(), Dtype::F32, vec![1], vec![0; 4]))),
        "unexpected tensor `extra.weight`",
    ));
    cases.push((
        rebuild(&bytes, |t, _| {
            let x = t.iter_mut().find(|x| x.0 == "layers.0.weight").unwrap();
            x.1 = Dtype::I32;
        }),
        "has dtype I32, expected F32",
    ));
    cases.push((
        rebuild(&bytes, |t, _| {
            let x = t.iter_mut().find(|x| x.0 == "layers.0.weight").unwrap();
            x.2 = vec![2, 3];
        }),
        "has shape [2, 3] but the experiment's model needs [3, 2]",
    ));
    cases.push((
        rebuild(&bytes, |t, _| {
            let x = t.iter_mut().find(|x| x.0 == "layers.0.bias").unwrap();
            x.3[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        }),
        "non-finite value",
    ));
    cases.push((
        rebuild(&bytes, |_, m| {
            m.insert("experiment".into(), "{\"seed\": ".into());
        }),
        "stored experiment is invalid",
    ));
    cases.push((
        rebuild(&bytes, |_, m| {
            let e = m["experiment"].replace("\"units\":3", "\"units\":4");
            m.insert("experiment".into(), e);
        }),
        "the experiment's model needs [4, 2]",
    ));
    cases.push((
        rebuild(&bytes, |_, m| {
            m.insert("format".into(), "stepscope-checkpoint/99".into());
        }),
        "not supported",
    ));
    cases.push((
        rebuild(&bytes, |_, m| {
            m.remove("format");
        }),
        "not a Stepscope checkpoint",
    ));
    cases.push((
        rebuild(&bytes, |_, m| {
            m.insert("rng_state".into(), "zz".into());
        }),
        "rng_state",
    ));
    for (i, (bad, want)) in cases.iter().enumerate() {
        let msg = error_of(bad);
        assert!(msg.contains(want), "case {i}: `{msg}` lacks `{want}`");
    }
}

#[test]
fn plain_weights_file_is_accepted_as_initial_weights() {
    let e = experiment();
    let state = trained_state();
    let layout = Layout::new(&e);
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = layout
        .tensors()
        .into_iter()
        .map(|t| (t.name, t.shape, to_le_bytes(&state.params[t.offset..t.offset + t.len])))
        .collect();
    let views: Vec<_> =
        data.iter().map(|(n, s, b)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap())).collect();
    let plain = safetensors::serialize(views, None).unwrap();
    assert_eq!(load_weights(&plain, &e).unwrap(), state.params);
    assert!(error_of(&plain).contains("not a Stepscope checkpoint"));
    // A full checkpoint's weights are accepted too.
    let full = save_checkpoint(&state).unwrap();
    assert_eq!(load_weights(&full, &e).unwrap(), state.params);
}
