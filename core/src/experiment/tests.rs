//! The experiment's parsing: its example, defaults, and what it refuses.

use super::*;

const EXAMPLE: &str = r#"{ "seed": 7,
  "model": { "inputs": 2, "layers": [ {"units": 16, "activation": "tanh"}, {"units": 1, "activation": "linear"} ] },
  "loss": "bce_with_logits",
  "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01},
  "schedule": {"kind": "warmup_cosine", "warmup_steps": 10, "total_steps": 1000, "min_lr": 0.0},
  "batch_size": 32, "grad_accumulation": 1, "clip_grad_norm": 1.0,
  "regularization": null,
  "data": {"source": "spiral", "samples": 500, "noise": 0.1, "train_fraction": 0.8, "features": ["x1","x2"], "shuffle": true} }"#;

#[test]
fn the_documented_example_parses_and_round_trips() {
    let e = Experiment::from_json(EXAMPLE).unwrap();
    assert_eq!(e.widths(), vec![2, 16, 1]);
    assert_eq!(Experiment::from_json(&e.to_json()).unwrap(), e);
}

#[test]
fn left_out_fields_take_their_defaults() {
    let e = Experiment::from_json(
        r#"{"model": {"inputs": 2, "layers": [{"units": 1, "activation": "linear"}]},
            "loss": "bce_with_logits", "optimizer": {"kind": "adamw"}, "batch_size": 4,
            "data": {"source": "xor"}}"#,
    )
    .unwrap();
    assert_eq!(e.seed, 0);
    assert_eq!(e.grad_accumulation, 1);
    assert_eq!(e.schedule, Schedule::Constant);
    assert_eq!((e.clip_grad_norm, e.regularization.clone()), (None, None));
    assert!(e.data.shuffle);
    assert_eq!(e.optimizer, OptimizerSpec::Adamw { lr: 1e-3, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 1e-2 });
}

#[test]
fn typos_and_bad_values_are_named() {
    let cases = [
        (EXAMPLE.replace("\"seed\"", "\"sead\""), "unknown field `sead`"),
        (EXAMPLE.replace("\"lr\": 0.01", "\"lrr\": 0.01"), "unknown field `lrr`"),
        (EXAMPLE.replace("\"adamw\"", "\"adamx\""), "unknown variant `adamx`"),
        (EXAMPLE.replace("\"tanh\"", "\"tahn\""), "unknown variant `tahn`"),
        (EXAMPLE.replace("\"min_lr\"", "\"min_learning_rate\""), "unknown field `min_learning_rate`"),
        (EXAMPLE.replace("\"x2\"]", "\"x3\"]"), "unknown variant `x3`"),
        (EXAMPLE.replace("\"batch_size\": 32", "\"batch_size\": 0"), "batch_size must be in"),
        (EXAMPLE.replace("\"lr\": 0.01", "\"lr\": -1"), "optimizer.lr must be"),
        (EXAMPLE.replace("0.999]", "1.5]"), "optimizer.betas[1]"),
        (EXAMPLE.replace("\"clip_grad_norm\": 1.0", "\"clip_grad_norm\": 0"), "clip_grad_norm"),
        (EXAMPLE.replace("\"warmup_steps\": 10", "\"warmup_steps\": 5000"), "must not exceed"),
        (EXAMPLE.replace("\"units\": 16", "\"units\": 100000"), "model.layers[0].units"),
        (EXAMPLE.replace("\"inputs\": 2", "\"inputs\": 3"), "data.features has 2"),
        (EXAMPLE.replace("\"spiral\"", "\"reg_plane\""), "needs loss \"mse\""),
        (EXAMPLE.replace("\"bce_with_logits\"", "\"cross_entropy\""), "at least 2 units"),
        (EXAMPLE.replace("\"noise\": 0.1", "\"noise\": 3"), "data.noise"),
        (EXAMPLE.replace("\"source\": \"spiral\"", "\"source\": \"csv\""), "does not apply"),
        (EXAMPLE.replace("[\"x1\",\"x2\"]", "[\"x1\",\"x1\"]"), "twice"),
        ("{".to_string(), "EOF"),
    ];
    for (text, want) in cases {
        let msg = Experiment::from_json(&text).unwrap_err().to_string();
        assert!(msg.contains(want), "`{msg}` lacks `{want}`");
    }
}

/// A key given twice is refused at every depth, named by its path: never
/// the first or the last of the two silently trained.
#[test]
fn a_repeated_key_is_refused_at_every_depth() {
    const GPT: &str = r#"{"model": {"kind": "gpt", "vocab_size": 65, "context": 8, "embed": 16, "heads": 2, "blocks": 1},
        "loss": "cross_entropy", "optimizer": {"kind": "adamw"}, "batch_size": 4, "data": {"source": "shakespeare"}}"#;
    let cases = [
        (EXAMPLE.replace("\"seed\": 7,", "\"seed\": 7, \"seed\": 8,"), "seed appears twice"),
        (EXAMPLE.replace("\"inputs\": 2,", "\"inputs\": 2, \"inputs\": 3,"), "model.inputs appears twice"),
        (
            EXAMPLE.replace("{ \"inputs\"", "{ \"kind\": \"mlp\", \"kind\": \"gpt\", \"inputs\""),
            "model.kind appears twice",
        ),
        (EXAMPLE.replace("\"layers\": [", "\"layers\": [], \"layers\": ["), "model.layers appears twice"),
        (EXAMPLE.replace("{\"units\": 1,", "{\"units\": 1, \"units\": 2,"), "model.layers[1].units appears twice"),
        (
            EXAMPLE.replace("\"tanh\"}", "\"tanh\", \"activation\": \"relu\"}"),
            "model.layers[0].activation appears twice",
        ),
        (GPT.replace("\"embed\": 16,", "\"embed\": 16, \"embed\": 8,"), "model.embed appears twice"),
        (GPT.replace("\"blocks\": 1}", "\"blocks\": 1, \"blocks\": 1}"), "model.blocks appears twice"),
        (EXAMPLE.replace("\"lr\": 0.01,", "\"lr\": 0.01, \"lr\": 0.02,"), "optimizer.lr appears twice"),
        (
            EXAMPLE.replace("{\"kind\": \"adamw\",", "{\"kind\": \"adamw\", \"kind\": \"sgd\","),
            "optimizer.kind appears twice",
        ),
        (EXAMPLE.replace("\"min_lr\": 0.0", "\"min_lr\": 0.0, \"min_lr\": 0.1"), "schedule.min_lr appears twice"),
        (EXAMPLE.replace("\"noise\": 0.1,", "\"noise\": 0.1, \"noise\": 0.2,"), "data.noise appears twice"),
        (
            EXAMPLE.replace(
                "\"regularization\": null",
                "\"regularization\": {\"kind\": \"l2\", \"rate\": 0.1, \"rate\": 0.2}",
            ),
            "regularization.rate appears twice",
        ),
        (EXAMPLE.replace("\"batch_size\": 32,", "\"batch_size\": 32, \"batch_size\": 32,"), "batch_size appears twice"),
    ];
    let mut wrong = Vec::new();
    for (text, want) in cases {
        assert!(text != EXAMPLE && text != GPT, "the case `{want}` changed nothing");
        match Experiment::from_json(&text) {
            Ok(e) => wrong.push(format!("{want}: accepted as {:?}", e.model)),
            Err(e) if !e.to_string().contains(want) => wrong.push(format!("{want}: refused as `{e}`")),
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
