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
    let mut meta = header.metadata().clone().unwrap_or_default();
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
            let e = m["experiment"].replace("\"units\":3", "\"units\":4096");
            m.insert("experiment".into(), e);
        }),
        "the model needs 196620 bytes of tensors (16385 parameters, 3 copies) but the file has only",
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

/// Metadata is input: a changed step, data position or learning rate fails
/// the format-2 digest (an absurd learning rate is refused even before); and where the digest is right (a file written with
/// bad values, or a format-1 file whose digest covers tensors only) every
/// value is range-checked before anything runs, instead of hanging,
/// overflowing or training at lr 1e30.
#[test]
fn tampered_or_absurd_metadata_is_refused() {
    let state = trained_state();
    let bytes = save_checkpoint(&state).unwrap();
    type Edit = fn(&str) -> String;
    let edits: [(&str, Edit); 3] = [
        ("step", |_| "4".into()),
        ("data_position", |_| "{\"rows_consumed\":1000000000000000000,\"epoch\":0}".into()),
        ("experiment", |e| e.replace("\"lr\":0.01", "\"lr\":0.02")),
    ];
    for (key, edit) in edits {
        let tampered = rebuild(&bytes, |_, m| {
            let value = edit(&m[key]);
            m.insert(key.into(), value);
        });
        assert!(error_of(&tampered).contains("digest mismatch"), "{key}: {}", error_of(&tampered));
    }

    // Absurd values with a correct digest: each refused, naming what is wrong.
    let data = Dataset::load(&state.experiment, None).unwrap();
    let rows = data.train.rows() as u64;
    let with = |edit: &dyn Fn(&mut TrainState)| {
        let mut s = state.clone();
        edit(&mut s);
        s
    };
    let cases: Vec<(TrainState, &str)> = vec![
        (with(&|s| s.optimizer.step = u64::MAX), "step count 18446744073709551615 is beyond"),
        (with(&|s| s.data_position.rows_consumed = u64::MAX), "rows_consumed 18446744073709551615 is beyond"),
        (with(&|s| s.data_position.epoch = 25), "epoch 25 is past rows_consumed 24"),
        (with(&|s| s.optimizer.exp_avg_sq[2] = -1.0), "exp_avg_sq holds a negative value (-1)"),
        (
            with(&|s| {
                s.experiment.optimizer = crate::experiment::OptimizerSpec::Adam {
                    lr: 1e30,
                    betas: [0.9, 0.999],
                    eps: 1e-8,
                    weight_decay: 0.0,
                }
            }),
            "optimizer.lr must be a finite number in [0, 100], got 1000000000000000000000000000000",
        ),
    ];
    for (bad, want) in &cases {
        let bytes = serialize_unchecked(bad).unwrap();
        let msg = error_of(&bytes);
        assert!(msg.contains(want), "`{msg}` lacks `{want}`");
        assert!(msg.starts_with("checkpoint: "), "{msg}");
    }

    // Data-dependent: a shuffled run whose epoch lags its row counter by
    // more than the replay limit loads, but no engine is built from it.
    let lagging = with(&|s| s.data_position.rows_consumed = rows * 1_000_000);
    let loaded = load_checkpoint(&serialize_unchecked(&lagging).unwrap()).unwrap();
    let msg = CpuEngine::from_state(loaded, data.clone()).err().unwrap().to_string();
    assert!(msg.contains("restoring would replay the shuffle"), "{msg}");
    // A position past the data's current epoch, too.
    let ahead = with(&|s| {
        s.data_position.rows_consumed = rows;
        s.data_position.epoch = 1;
    });
    assert!(CpuEngine::from_state(ahead.clone(), data.clone()).is_ok(), "epoch 1 at the first row of epoch 1");
    let ahead = with(&|s| {
        s.data_position.rows_consumed = rows - 1;
        s.data_position.epoch = 1;
    });
    let msg = CpuEngine::from_state(ahead, data).err().unwrap().to_string();
    assert!(msg.contains("is past the epoch of rows_consumed"), "{msg}");

    // What loading refuses, saving refuses too.
    let msg = save_checkpoint(&with(&|s| s.optimizer.exp_avg_sq[0] = f32::INFINITY)).unwrap_err().to_string();
    assert!(msg.contains("this state cannot be saved: exp_avg_sq hold a non-finite value (inf) at index 0"), "{msg}");

    // Format 1 (digest over tensors only) is still read, and range-checked.
    let v1 = |s: &TrainState| {
        rebuild(&serialize_unchecked(s).unwrap(), |t, m| {
            let parts: Vec<_> = t.iter().map(|(n, _, s, d)| (n.as_str(), s.as_slice(), d.as_slice())).collect();
            let digest = digest(parts, &[]);
            m.insert("format".into(), FORMAT_TAG_V1.into());
            m.insert("digest".into(), digest);
        })
    };
    assert_eq!(load_checkpoint(&v1(&state)).unwrap(), state);
    let msg = error_of(&v1(&with(&|s| s.optimizer.step = u64::MAX)));
    assert!(msg.contains("step count 18446744073709551615 is beyond"), "{msg}");
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
    // A plain weights file with a stray optimizer tensor is not a checkpoint.
    let stray = rebuild(&plain, |t, _| {
        let w = t.iter().find(|x| x.0 == "layers.0.weight").unwrap().clone();
        t.push((format!("optimizer.{}.exp_avg", w.0), w.1, w.2, w.3));
    });
    let msg = load_weights(&stray, &e).unwrap_err().to_string();
    assert!(msg.contains("unexpected tensor `optimizer.layers.0.weight.exp_avg`"), "{msg}");
}

/// The header alone names the experiment and step (what the page reads of
/// an autosaved run before handing the file to the worker), and refuses
/// what is not a checkpoint.
#[test]
fn the_header_names_the_experiment_and_step() {
    let state = trained_state();
    let bytes = save_checkpoint(&state).unwrap();
    assert_eq!(read_checkpoint_header(&bytes).unwrap(), (state.experiment.clone(), 3));
    let garbage = b"\x89PNG\r\n\x1a\n not a checkpoint at all";
    assert!(read_checkpoint_header(garbage).unwrap_err().to_string().contains("malformed safetensors"));
    let params = state.params.clone();
    let plain = safetensors::serialize(
        [("layers.0.weight", TensorView::new(Dtype::F32, vec![params.len()], bytemuck::cast_slice(&params)).unwrap())],
        None,
    )
    .unwrap();
    assert!(read_checkpoint_header(&plain).unwrap_err().to_string().contains("not a Stepscope checkpoint"));
}

/// A key given twice anywhere in a checkpoint is refused, named by its
/// path: in the header (a metadata entry, a tensor), at any depth of the
/// stored experiment, and in `data_position`, even under a right digest.
#[test]
fn a_repeated_key_is_refused_wherever_it_is() {
    let state = trained_state();
    let bytes = save_checkpoint(&state).unwrap();
    // The header's text, edited as it is (its length prefix follows).
    let header_edit = |edit: &dyn Fn(&str) -> String| {
        let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header = edit(std::str::from_utf8(&bytes[8..8 + len]).unwrap());
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(&bytes[8 + len..]);
        out
    };
    let twice = |key: &'static str| {
        move |h: &str| {
            // The entry `"key":value`, its value a string or a flat object.
            let at = h.find(&format!("\"{key}\":")).unwrap();
            let value = at + key.len() + 3;
            let end = match h[value..].starts_with('{') {
                true => value + h[value..].find('}').unwrap() + 1,
                false => value + h[value..].find([',', '}']).unwrap(),
            };
            format!("{},{}{}", &h[..end], &h[at..end], &h[end..])
        }
    };
    let step_twice = header_edit(&twice("step"));
    let tensor_twice = header_edit(&twice("layers.0.bias"));
    for (file, want) in
        [(&step_twice, "__metadata__.step appears twice"), (&tensor_twice, "[\"layers.0.bias\"] appears twice")]
    {
        let msg = error_of(file);
        assert!(msg.contains(&format!("malformed safetensors header: {want}")), "`{msg}` lacks `{want}`");
        let header = read_checkpoint_header(file).map(|_| "read".to_string()).unwrap_or_else(|e| e.to_string());
        assert!(header.contains(want), "`{header}` lacks `{want}`");
        assert!(load_weights(file, &state.experiment).is_err() && read_file_info(file).is_err());
    }
    // Inside the metadata's own JSON, with the digest made right again.
    let redigested = |key: &'static str, from: &'static str, to: &'static str| {
        rebuild(&bytes, |t, m| {
            let value = m[key].replacen(from, to, 1);
            assert_ne!(value, m[key], "{from}");
            m.insert(key.into(), value);
            let parts: Vec<_> = t.iter().map(|(n, _, s, d)| (n.as_str(), s.as_slice(), d.as_slice())).collect();
            let digest = digest(parts, &covered_metadata(|k| m.get(k)).unwrap());
            m.insert("digest".into(), digest);
        })
    };
    for (key, from, to, want) in [
        ("experiment", "\"inputs\":2", "\"inputs\":2,\"inputs\":2", "model.inputs appears twice"),
        ("experiment", "\"units\":3", "\"units\":3,\"units\":3", "model.layers[0].units appears twice"),
        ("experiment", "\"relu\"", "\"relu\",\"activation\":\"tanh\"", "model.layers[0].activation appears twice"),
        ("experiment", "\"lr\":0.01", "\"lr\":0.01,\"lr\":0.01", "optimizer.lr appears twice"),
        ("data_position", "\"epoch\":", "\"epoch\":1,\"epoch\":", "epoch appears twice"),
    ] {
        let msg = error_of(&redigested(key, from, to));
        assert!(msg.contains(want), "`{msg}` lacks `{want}`");
    }
}
