//! A transformer run whose every bit is pinned: the native build (AVX-512,
//! AVX2 or plain, whichever this CPU has) and the browser's WebAssembly
//! build (simd128) must both give `EXPECTED`, because the CPU engine sums
//! in one order at every vector width (ARCHITECTURE.md, "One matrix
//! product"). Shared by `core/tests/gpt_bits.rs` (native) and
//! `tests/tests/cpu_engine.rs` (in the browser).

use stepscope_core::data::{Dataset, TokenText, MAX_VOCABULARY};
use stepscope_core::{CpuEngine, Experiment};

const TEXT: &str =
    "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\
Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief,\n";

/// FNV-1a over the losses, gradient norms and final parameters' bits of
/// two runs: an awkward one (C/H = 4, T = 7, untied head, q/k LayerNorm,
/// z-loss, accumulation) and one wide enough for every gemm block width.
pub fn digest() -> String {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bits: u32| {
        for byte in bits.to_le_bytes() {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    };
    let vocabulary = TokenText::read(TEXT.as_bytes(), 1, MAX_VOCABULARY).unwrap().vocabulary.len();
    for (model, batch, extra) in [
        (
            r#""context": 7, "embed": 12, "heads": 3, "blocks": 2, "tie_embeddings": false, "qk_layernorm": true"#,
            3,
            r#", "z_loss": 0.001, "grad_accumulation": 2"#,
        ),
        (r#""context": 16, "embed": 64, "heads": 2, "blocks": 1"#, 8, ""),
    ] {
        let e = Experiment::from_json(&format!(
            r#"{{"seed": 4, "model": {{"kind": "gpt", "vocab_size": {vocabulary}, {model}}}, "loss": "cross_entropy",
                "optimizer": {{"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1}},
                "batch_size": {batch}, "clip_grad_norm": 1.0{extra}, "data": {{"source": "text"}}}}"#
        ))
        .unwrap();
        let text = TokenText::read(TEXT.as_bytes(), e.gpt().unwrap().context, MAX_VOCABULARY).unwrap();
        let mut engine = CpuEngine::new(&e, Dataset::load_text(&e, &text).unwrap()).unwrap();
        for _ in 0..4 {
            let m = engine.step().unwrap();
            eat(m.loss.to_bits());
            eat(m.grad_norm.to_bits());
        }
        for p in engine.params() {
            eat(p.to_bits());
        }
    }
    format!("{hash:016x}")
}

/// What every build computes.
pub const EXPECTED: &str = "73fa0133438633fd";
