//! The CPU engine compiled to WebAssembly (simd128) against the native
//! build: the same transformer run gives the same bits
//! (core/tests/gpt_bits/run.rs holds the run and the digest both must give).
#![cfg(target_arch = "wasm32")]

wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "../../core/tests/gpt_bits/run.rs"]
mod run;

#[wasm_bindgen_test::wasm_bindgen_test]
fn the_browser_engine_gives_the_native_bits() {
    assert_eq!(run::digest(), run::EXPECTED);
}
