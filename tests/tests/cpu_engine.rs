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

#[wasm_bindgen_test::wasm_bindgen_test]
fn the_browser_conv_net_gives_the_native_bits() {
    assert_eq!(run::conv_digest(), run::CONV_EXPECTED);
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

/// A measurement, not a check: the page's default network (workload W1:
/// 2-16-16-1 tanh, BCE with logits, batch 32) profiled as the page profiles
/// it, forward : backward beside the FLOP ratio, in this browser
/// (bench/anatomy.md). Run with `-- --include-ignored --nocapture`.
#[wasm_bindgen_test::wasm_bindgen_test]
#[ignore]
fn default_mlp_profile() {
    use stepscope_core::engine::profile::{step_flops, Burst};
    let w = stepscope_core::workloads::workload("W1").unwrap();
    let (e, data) = w.build();
    let (f, b) = step_flops(w.widths, w.batch, 1);
    let mut trainer = stepscope_core::CpuEngine::new(&e, data).unwrap();
    for round in 0..3 {
        for _ in 0..300 {
            trainer.step().unwrap();
        }
        let burst = Burst::for_clock();
        let mut found: Vec<_> = (0..9).map(|_| trainer.profile_step(&burst).unwrap().1).collect();
        let median = |pick: fn(&stepscope_core::engine::profile::PhaseProfile) -> f64, found: &mut Vec<_>| {
            found.sort_by(|x, y| pick(x).total_cmp(&pick(y)));
            pick(&found[found.len() / 2])
        };
        let fwd = median(|p| p.forward.ms, &mut found);
        let bwd = median(|p| p.backward.ms, &mut found);
        let opt = median(|p| p.optimizer.ms, &mut found);
        wasm_bindgen_test::console_log!(
            "round {round}: forward {:.2} µs, backward {:.2} µs, optimizer {:.2} µs; fwd : bwd 1 : {:.2} (FLOPs 1 : {:.2}, {:.2} of it)",
            fwd * 1e3,
            bwd * 1e3,
            opt * 1e3,
            bwd / fwd,
            b / f,
            bwd / fwd / (b / f)
        );
    }
}

#[path = "../../core/examples/anatomy_probe/pieces.rs"]
mod pieces;

/// A measurement, not a check: the default MLP step's pieces in this
/// browser, as `cargo run --release -p stepscope-core --example
/// anatomy_probe` prints them natively (bench/anatomy.md). Run with
/// `-- --include-ignored --nocapture`.
#[wasm_bindgen_test::wasm_bindgen_test]
#[ignore]
fn default_mlp_pieces() {
    let performance = web_sys::window().unwrap().performance().unwrap();
    let now = move || performance.now();
    for _ in 0..2 {
        wasm_bindgen_test::console_log!("{}", pieces::table(&pieces::measure(&now, 50.0)));
    }
}
