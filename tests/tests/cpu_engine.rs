//! The CPU engine compiled to WebAssembly (simd128) against the native
//! build: the same transformer run and the same MLP run give the same bits
//! (core/tests/gpt_bits/run.rs holds the run and the digest both must give).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "../../core/tests/gpt_bits/run.rs"]
mod run;

#[wasm_bindgen_test::wasm_bindgen_test]
fn the_browser_engine_gives_the_native_bits() {
    assert_eq!(run::digest(), run::EXPECTED);
}

#[wasm_bindgen_test::wasm_bindgen_test]
fn the_browser_mlp_gives_the_native_bits() {
    assert_eq!(run::mlp_digest(), run::MLP_EXPECTED);
}

#[path = "../../core/examples/activation_bench/timing.rs"]
mod timing;

/// A measurement, not a check: the activations' ns per element in this
/// browser, as `cargo run --release -p stepscope-core --example
/// activation_bench` prints them natively (bench/activations.md). Run with
/// `-- --include-ignored --nocapture`.
#[wasm_bindgen_test::wasm_bindgen_test]
#[ignore]
fn activation_timings() {
    let performance = web_sys::window().unwrap().performance().unwrap();
    let now = move || performance.now();
    for (rows, units) in [(32, 16), (256, 256)] {
        let table = timing::table(&timing::measure(&now, rows, units, 100.0));
        wasm_bindgen_test::console_log!("{rows} × {units}:\n\n{table}");
    }
}

/// In WebAssembly (`usize` of 32 bits) the largest transformer a link can
/// ask for reads as too large for the page's budget, by name, instead of
/// its size wrapping around to a small number that passes.
#[wasm_bindgen_test::wasm_bindgen_test]
fn a_huge_transformer_link_is_refused_by_its_size() {
    use stepscope_core::limits::Limits;
    let link = r#"{"seed": 1, "model": {"kind": "gpt", "vocab_size": 65, "context": 512, "embed": 512, "heads": 256,
        "blocks": 12}, "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 0.001},
        "batch_size": 65536, "data": {"source": "shakespeare"}}"#;
    let e = stepscope_core::Experiment::from_json(link).unwrap();
    let msg = Limits::PAGE.check(&e, None).unwrap_err().to_string();
    assert!(msg.contains("more than the 1024.0 MiB budget of this page"), "{msg}");
    let (_, att, _) = stepscope_core::model::gpt::memory_floats(&e.gpt().unwrap().shape(), 65536, false);
    assert_eq!(att, usize::MAX, "saturated, not wrapped");
    let wide = link
        .replace("\"embed\": 512, \"heads\": 256", "\"embed\": 4096, \"heads\": 8")
        .replace("\"blocks\": 12", "\"blocks\": 64");
    let msg = stepscope_core::Experiment::from_json(&wide).unwrap_err().to_string();
    assert!(msg.contains("parameters, more than the"), "{msg}");
}
