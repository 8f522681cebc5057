//! The experiments the conformance checks run: a small default with a
//! patch merged over it, and the matrices of optimizers, losses,
//! schedules and layers every GPU path is compared with the CPU engine on
//! (the MLP's, the transformer's and the conv nets').

use serde_json::json;

use crate::experiment::Experiment;

/// A small experiment; `patch` is merged over the defaults (JSON object;
/// an "optimizer" or "schedule" replaces the default whole).
pub fn experiment(patch: serde_json::Value) -> Experiment {
    let mut base = json!({
        "seed": 7,
        "model": {"inputs": 2, "layers": [
            {"units": 8, "activation": "tanh"},
            {"units": 1, "activation": "linear"}]},
        "loss": "bce_with_logits",
        "optimizer": {"kind": "adamw", "lr": 0.01},
        "batch_size": 16,
        "data": {"source": "spiral", "samples": 200, "noise": 0.1, "train_fraction": 0.8}
    });
    merge(&mut base, patch);
    Experiment::from_json(&base.to_string()).expect("a conformance experiment is valid")
}

fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_object()
                    && b.get(k.as_str()).is_some_and(|x| x.is_object())
                    && k != "optimizer"
                    && k != "schedule"
                {
                    if let Some(slot) = b.get_mut(k.as_str()) {
                        merge(slot, v);
                    }
                } else {
                    b.insert(k, v);
                }
            }
        }
        (b, p) => *b = p,
    }
}

/// Every optimizer, loss and schedule, with clipping, accumulation,
/// regularization and the activations in rotation: the whole-run cases
/// every GPU path is compared with the CPU engine on.
pub fn training_matrix() -> Vec<(String, Experiment)> {
    let mut cases = Vec::new();
    let optimizers = [
        json!({"kind": "sgd", "lr": 0.1}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true, "weight_decay": 0.001}),
        json!({"kind": "sgd", "lr": 0.05, "momentum": 0.8, "dampening": 0.1}),
        json!({"kind": "adam", "lr": 0.01, "weight_decay": 0.01}),
        json!({"kind": "adamw", "lr": 0.01}),
        json!({"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}),
    ];
    let losses = [("bce_with_logits", 1, "spiral"), ("cross_entropy", 2, "xor"), ("mse", 1, "reg_gauss")];
    let schedules = [
        json!({"kind": "constant"}),
        json!({"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 12, "min_lr": 0.001}),
        json!({"kind": "warmup_linear", "warmup_steps": 2, "total_steps": 10}),
    ];
    let mut case = 0;
    for optimizer in &optimizers {
        for (loss, outputs, source) in losses {
            case += 1;
            let schedule = &schedules[case % schedules.len()];
            let clip = if case % 2 == 0 { json!(0.5) } else { json!(null) };
            let accumulation = 1 + case % 3;
            let reg = if case % 4 == 1 { json!({"kind": "l2", "rate": 0.001}) } else { json!(null) };
            let activation = ["tanh", "relu", "gelu_tanh", "silu", "leaky_relu", "sigmoid"][case % 6];
            let e = experiment(json!({
                "model": {"inputs": 3, "layers": [
                    {"units": 9, "activation": activation},
                    {"units": 7, "activation": "tanh"},
                    {"units": outputs, "activation": "linear"}]},
                "loss": loss, "optimizer": optimizer, "schedule": schedule,
                "batch_size": 13, "grad_accumulation": accumulation, "clip_grad_norm": clip,
                "regularization": reg,
                "data": {"source": source, "samples": 90, "noise": 0.1, "train_fraction": 0.8,
                         "features": ["x1", "x2", "sin_x1"]}
            }));
            let name = format!("{optimizer} {loss} {schedule} clip={clip} k={accumulation}");
            cases.push((name, e));
        }
    }
    cases
}

/// Transformer runs for the whole-run checks: a small character-level GPT
/// on Tiny Shakespeare (awkward sizes: a head of 6, a window of 9) under
/// each optimizer, with and without clipping, micro-batches, z-loss, q/k
/// LayerNorm and the untied head.
pub fn gpt_training_matrix() -> Vec<(String, Experiment)> {
    let base = |patch: serde_json::Value| {
        let mut e = json!({
            "seed": 11,
            "model": {"kind": "gpt", "vocab_size": 65, "context": 9, "embed": 12, "heads": 2, "blocks": 2},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1},
            "batch_size": 3,
            "data": {"source": "shakespeare", "train_fraction": 0.9}
        });
        merge(&mut e, patch);
        Experiment::from_json(&e.to_string()).expect("a conformance transformer is valid")
    };
    let cases = [
        ("adamw, clipped", json!({"clip_grad_norm": 0.5})),
        (
            "adam with decay, k=2, z-loss",
            json!({"optimizer": {"kind": "adam", "lr": 0.005, "weight_decay": 0.01},
            "grad_accumulation": 2, "z_loss": 1e-3}),
        ),
        (
            "sgd nesterov with decay, untied head",
            json!({"optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9,
            "nesterov": true, "weight_decay": 0.001}, "model": {"tie_embeddings": false}}),
        ),
        // SGD: the k LayerNorm's bias has a gradient of exactly 0 in exact
        // arithmetic (softmax does not see a shift common to every key), so
        // each engine's is rounding noise, and Adam would scale those
        // different noises into steps of ±lr (the losses still agree).
        (
            "sgd momentum, q/k LayerNorm, k=2",
            json!({"optimizer": {"kind": "sgd", "lr": 0.1, "momentum": 0.9}, "model": {"qk_layernorm": true},
                   "grad_accumulation": 2}),
        ),
        (
            "lamb with decay, warmup cosine, one block of 4 heads",
            json!({"optimizer": {"kind": "lamb", "lr": 0.01, "weight_decay": 0.01},
            "model": {"blocks": 1, "heads": 4}, "schedule": {"kind": "warmup_cosine", "warmup_steps": 2,
            "total_steps": 10, "min_lr": 0.001}, "clip_grad_norm": 1.0}),
        ),
    ];
    cases.into_iter().map(|(name, patch)| (format!("gpt {name}"), base(patch))).collect()
}

/// Conv nets on the 8 × 8 digits, every conv and pool kernel and every
/// optimizer among them: convolutions with and without padding, strides 1
/// and 2, max and average pooling with windows that tile and that overlap,
/// each activation, clipping, accumulation, regularization, schedules.
pub fn conv_training_matrix() -> Vec<(String, Experiment)> {
    let base = |layers: serde_json::Value, patch: serde_json::Value| {
        let mut e = json!({
            "seed": 5,
            "model": {"input_shape": [1, 8, 8], "layers": layers},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adam", "lr": 0.01},
            "batch_size": 16,
            "data": {"source": "digits"}
        });
        merge(&mut e, patch);
        Experiment::from_json(&e.to_string()).expect("a conformance conv net is valid")
    };
    let dense = json!({"units": 10, "activation": "linear"});
    // conv 3×3×4 pad 1 → max pool 2 → conv 3×3×6 → avg pool 2 stride 1 → dense.
    let pooled = json!([
        {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
        {"kind": "max_pool2d", "kernel": 2},
        {"kind": "conv2d", "filters": 6, "kernel": 3, "activation": "tanh"},
        {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
        dense.clone()]);
    // A pool first (no input gradient below it), a strided conv, overlapping windows.
    let strided = json!([
        {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
        {"kind": "conv2d", "filters": 5, "kernel": 3, "stride": 2, "padding": 1, "activation": "gelu_tanh"},
        {"kind": "max_pool2d", "kernel": 3, "stride": 1},
        {"units": 12, "activation": "sigmoid"},
        dense.clone()]);
    let cases = [
        ("adam", pooled.clone(), json!({})),
        (
            "sgd nesterov with decay, clipped, k=2, l2, warmup cosine",
            pooled.clone(),
            json!({"optimizer": {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": true,
                "weight_decay": 0.001}, "clip_grad_norm": 0.5, "grad_accumulation": 2,
                "regularization": {"kind": "l2", "rate": 0.001},
                "schedule": {"kind": "warmup_cosine", "warmup_steps": 3, "total_steps": 12, "min_lr": 0.001}}),
        ),
        (
            "adamw, l1, pool first, strided",
            strided.clone(),
            json!({"optimizer": {"kind": "adamw", "lr": 0.01}, "regularization": {"kind": "l1", "rate": 0.0005}}),
        ),
        (
            "lamb, k=3, warmup linear, strided",
            strided,
            json!({"optimizer": {"kind": "lamb", "lr": 0.01, "weight_decay": 0.01}, "grad_accumulation": 3,
                "schedule": {"kind": "warmup_linear", "warmup_steps": 2, "total_steps": 10}, "batch_size": 7}),
        ),
    ];
    cases.into_iter().map(|(name, layers, patch)| (format!("conv {name}"), base(layers, patch))).collect()
}
