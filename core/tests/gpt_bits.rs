//! The native half of the transformer's cross-build check (`gpt_bits/run.rs`;
//! the browser half is tests/tests/cpu_engine.rs).

#[path = "gpt_bits/run.rs"]
mod run;

#[test]
fn the_native_engine_gives_the_pinned_bits() {
    assert_eq!(run::digest(), run::EXPECTED);
}
