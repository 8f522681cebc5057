//! A link's decoding: `encodeURIComponent`'s encoding, the fragment's
//! experiment, and the query's flags, each with what it refuses.

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
    huge.model.layers = (0..16).map(|_| huge.model.layers[0].clone()).chain([huge.model.layers[1].clone()]).collect();
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

/// A parameter given twice is ambiguous: none of its values applies,
/// and it is named. A key given twice in the fragment's experiment is
/// refused at any depth.
#[test]
fn repeats_are_refused_and_named() {
    assert_eq!(engine_pin("?engine=cpu&engine=gpu"), None);
    assert_eq!(engine_pin("?engine=cpu&%65ngine=cpu"), None);
    assert_eq!(engine_pin("?engine=gpu&engine=gpu&backend=cpu"), None);
    assert_eq!(engine_pin("?backend=cpu&backend=cpu"), None);
    assert!(fused_allowed("?fused=off&fused=off"));
    assert_eq!(query_value("?a=1&a=2", "a"), None);
    assert_eq!(
        query_problems("?engine=cpu&fused=off&engine=gpu&fused=on&fused=off"),
        [
            "engine= appears 2 times in the link; none of them applies.",
            "fused= appears 3 times in the link; none of them applies."
        ]
    );
    assert!(query_problems("?engine=cpu&fused=off&hide=a&lock=1").is_empty());
    let hide = hide_request("?hide=seed&hide=optimizer");
    assert!(hide.ids.is_empty(), "{hide:?}");
    assert_eq!(hide.problems, ["hide= appears 2 times; nothing was hidden."]);
    let lock = lock_request("?lock=0&lock=0");
    assert!(
        lock.locked && lock.problem.as_deref() == Some("lock= appears 2 times; the network is locked."),
        "{lock:?}"
    );
    let json = default_like().to_json();
    for (from, to, want) in [
        ("\"inputs\":2", "\"inputs\":2,\"inputs\":2", "model.inputs appears twice"),
        ("\"units\":16", "\"units\":16,\"units\":16", "model.layers[0].units appears twice"),
        ("\"lr\":0.02", "\"lr\":0.02,\"lr\":0.02", "optimizer.lr appears twice"),
        ("\"seed\":1", "\"seed\":1,\"seed\":1", "seed appears twice"),
    ] {
        let twice = json.replacen(from, to, 1);
        assert_ne!(twice, json, "{from}");
        let refused = parse_fragment(&format!("{FRAGMENT_KEY}{}", encode_component(&twice))).unwrap_err();
        assert!(refused.contains(want), "`{refused}` lacks `{want}`");
    }
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
