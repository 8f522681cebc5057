//! Whole transformer runs on the GPU engine against the CPU reference
//! (issue 27): every optimizer, clipping, micro-batches, z-loss and the
//! untied head, through the one trainer (`trainer::conformance`, the
//! tolerances stated there); the z-loss reported beside the loss; what
//! the GPU engine cannot run yet refused by name.

mod common;

use serde_json::json;
use stepscope_core::data::Dataset;
use stepscope_core::trainer::{block_on, conformance};
use stepscope_core::{Experiment, Trainer};

use common::shared_gpu as shared;

#[test]
fn transformer_runs_match_the_cpu_engine() {
    for (name, e) in conformance::gpt_training_matrix() {
        block_on(conformance::whole_run(&name, &e, shared(), &[1, 3, 2], false)).unwrap();
    }
}

#[test]
fn the_z_loss_is_reported_as_on_the_cpu() {
    let (_, e) = conformance::gpt_training_matrix().swap_remove(1);
    let data = Dataset::load(&e, None).unwrap();
    let mut cpu = Trainer::fresh(&e, data.clone(), None).unwrap();
    let mut gpu = Trainer::fresh(&e, data, Some(shared())).unwrap();
    let (a, b) = (block_on(cpu.run(3, 3)).unwrap(), block_on(gpu.run(3, 3)).unwrap());
    for (c, g) in a.iter().zip(&b) {
        let (c, g) = (c.z_loss.unwrap(), g.z_loss.unwrap());
        assert!((c - g).abs() <= 1e-5 * c.abs(), "z-loss {c} on the CPU, {g} on the GPU");
    }
}

#[test]
fn what_the_gpu_engine_cannot_run_yet_is_refused_by_name() {
    let (_, e) = conformance::gpt_training_matrix().swap_remove(0);
    let refused = |patch: serde_json::Value, words: &str| {
        let mut v = serde_json::to_value(&e).unwrap();
        merge(&mut v, patch);
        let e = Experiment::from_json(&v.to_string()).unwrap();
        let data = Dataset::load(&e, None).unwrap();
        let err = Trainer::fresh(&e, data, Some(shared())).err().expect("refused").to_string();
        assert!(err.contains(words), "{err}");
    };
    refused(json!({"model": {"qk_layernorm": true}}), "q/k LayerNorm");
    refused(json!({"model": {"context": 1100}}), "model.context is 1100");
}

fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

/// Activation checkpointing on the GPU engine's transformer: the blocks
/// share one block's buffers and backward runs each block's forward again,
/// so the run has the same bits as without (the same kernels on the same
/// inputs), holds less, and matches the CPU's checkpointed run.
#[test]
fn activation_checkpointing_keeps_the_bits_and_frees_memory() {
    let (_, e) = conformance::gpt_training_matrix().swap_remove(1);
    let data = Dataset::load(&e, None).unwrap();
    let mut plain = Trainer::fresh(&e, data.clone(), Some(shared())).unwrap();
    let mut kept = Trainer::fresh(&e, data.clone(), Some(shared())).unwrap();
    kept.set_activation_checkpointing(true).unwrap();
    let mut cpu = Trainer::fresh(&e, data, None).unwrap();
    cpu.set_activation_checkpointing(true).unwrap();
    let (a, b, c) =
        (block_on(plain.run(4, 2)).unwrap(), block_on(kept.run(4, 2)).unwrap(), block_on(cpu.run(4, 2)).unwrap());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            (x.loss.to_bits(), x.grad_norm.to_bits()),
            (y.loss.to_bits(), y.grad_norm.to_bits()),
            "step {}",
            x.step
        );
    }
    conformance::close_runs("checkpointed", &c, &b).unwrap();
    let (sa, sb) = (block_on(plain.read_state()).unwrap(), block_on(kept.read_state()).unwrap());
    assert_eq!(sa.params, sb.params, "the same bits with checkpointing");
    conformance::close_states("checkpointed", &block_on(cpu.read_state()).unwrap(), &sb).unwrap();
    let (off, on) = (plain.memory(), kept.memory());
    assert!(on.activations + on.attention < off.activations + off.attention, "{off:?} → {on:?}");
    // One block's attention probabilities of two.
    assert_eq!(2 * on.attention, off.attention);
}
