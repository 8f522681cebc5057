//! The native half of the transformer's and the MLP's cross-build check
//! (`gpt_bits/run.rs`; the browser half is tests/tests/cpu_engine.rs).

#[path = "gpt_bits/run.rs"]
mod run;

#[test]
fn the_native_engine_gives_the_pinned_bits() {
    assert_eq!(run::digest(), run::EXPECTED);
}

#[test]
fn the_native_mlp_gives_the_pinned_bits() {
    assert_eq!(run::mlp_digest(), run::MLP_EXPECTED);
}

#[test]
fn the_conv_net_gives_the_pinned_bits() {
    assert_eq!(run::conv_digest(), run::CONV_EXPECTED);
}
