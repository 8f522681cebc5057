//! A transformer run and an MLP run whose every bit is pinned: the native
//! build (AVX-512, AVX2 or plain, whichever this CPU has) and the browser's
//! WebAssembly build (simd128) must both give `EXPECTED` and
//! `MLP_EXPECTED`, because the CPU engine sums in one order at every vector
//! width (ARCHITECTURE.md, "One matrix product") and computes exp, erf,
//! tanh and σ as straight-line arithmetic of its own, not the platform's
//! libm (`model::gpt::ops::math`). Shared by `core/tests/gpt_bits.rs` (native) and
//! `tests/tests/cpu_engine.rs` (in the browser).

use stepscope_core::data::{read_csv, Dataset, TokenText, MAX_VOCABULARY};
use stepscope_core::{CpuEngine, Experiment};

const TEXT: &str =
    "ROMEO:\nBut, soft! what light through yonder window breaks?\nIt is the east, and Juliet is the sun.\n\
Arise, fair sun, and kill the envious moon,\nWho is already sick and pale with grief,\n";

/// FNV-1a over the losses, gradient norms and final parameters' bits of
/// two runs: an awkward one (C/H = 4, T = 7, untied head, q/k LayerNorm,
/// z-loss, accumulation) and one wide enough for every gemm block width.
pub fn digest() -> String {
    let mut hash = Fnv::new();
    let mut eat = |bits: u32| hash.eat(bits);
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
    hash.hex()
}

/// What every build computes.
pub const EXPECTED: &str = "73fa0133438633fd";

/// FNV-1a over the losses, gradient norms and final parameters' bits of an
/// MLP with every activation that takes an exp (tanh, σ, GELU, SiLU) and
/// the two that do not (ReLU, leaky ReLU), 30 AdamW steps of each loss
/// (mean squared error, BCE with logits, cross-entropy over three classes)
/// on a CSV written here: the losses take exp, ln and ln(1 + x) from
/// `math` too, and the data no libm function, so nothing could part the
/// builds.
pub fn mlp_digest() -> String {
    let layers = ["tanh", "sigmoid", "gelu_tanh", "silu", "relu", "leaky_relu"]
        .map(|a| format!(r#"{{"units": 9, "activation": "{a}"}}, "#))
        .concat();
    let mut hash = Fnv::new();
    for (loss, outputs) in [("mse", 1), ("bce_with_logits", 1), ("cross_entropy", 3)] {
        let mut csv = String::from("x1,x2,y\n");
        for i in 0..96 {
            let (x1, x2) = ((i % 12) as f32 / 3.0 - 2.0, (i / 12) as f32 / 2.0 - 2.0);
            let y = x1 * x2 - 0.5 * x1 + 0.25;
            let target = match loss {
                "mse" => y.to_string(),
                "bce_with_logits" => u8::from(y > 0.0).to_string(),
                _ => (u8::from(y > -1.0) + u8::from(y > 1.0)).to_string(),
            };
            csv += &format!("{x1},{x2},{target}\n");
        }
        let e = Experiment::from_json(&format!(
            r#"{{"seed": 3, "model": {{"inputs": 2, "layers": [{layers}{{"units": {outputs}, "activation": "linear"}}]}},
                "loss": "{loss}", "optimizer": {{"kind": "adamw", "lr": 0.02}}, "batch_size": 16,
                "data": {{"source": "csv"}}}}"#
        ))
        .unwrap();
        train_into(&mut hash, &e, &csv, 30);
    }
    hash.hex()
}

/// `steps` steps of `e` on `csv`: each step's loss and gradient norm, then
/// the parameters, into `hash`.
fn train_into(hash: &mut Fnv, e: &Experiment, csv: &str, steps: usize) {
    let table = read_csv(csv).unwrap();
    let mut engine = CpuEngine::new(e, Dataset::load(e, Some(&table)).unwrap()).unwrap();
    for _ in 0..steps {
        let m = engine.step().unwrap();
        hash.eat(m.loss.to_bits());
        hash.eat(m.grad_norm.to_bits());
    }
    for p in engine.params() {
        hash.eat(p.to_bits());
    }
}

/// What every build computes.
pub const MLP_EXPECTED: &str = "ea46c2222da049e0";

/// A conv net (issue 41): conv 3×3×4 with padding and relu, a max pool,
/// conv 2×2×5 with stride 2 and tanh, an average pool, a dense output, on
/// 1 × 6 × 6 images of a CSV written here, 20 AdamW steps of cross-entropy
/// over three classes: the patch-matrix products and the pools keep one
/// order in every build.
pub fn conv_digest() -> String {
    let mut csv = (0..36).map(|i| format!("x{i}")).collect::<Vec<_>>().join(",") + ",y\n";
    for n in 0..48 {
        let pixels: Vec<String> = (0..36).map(|i| (((i * 7 + n * 5) % 11) as f32 / 4.0 - 1.0).to_string()).collect();
        csv += &format!("{},{}\n", pixels.join(","), n % 3);
    }
    let e = Experiment::from_json(
        r#"{"seed": 5, "model": {"input_shape": [1, 6, 6], "layers": [
              {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
              {"kind": "max_pool2d", "kernel": 2, "stride": 1},
              {"kind": "conv2d", "filters": 5, "kernel": 2, "stride": 2, "activation": "tanh"},
              {"kind": "avg_pool2d", "kernel": 2},
              {"units": 3, "activation": "linear"}]},
            "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 0.02}, "batch_size": 12,
            "data": {"source": "csv"}}"#,
    )
    .unwrap();
    let mut hash = Fnv::new();
    train_into(&mut hash, &e, &csv, 20);
    hash.hex()
}

/// What every build computes.
pub const CONV_EXPECTED: &str = "99c2bebc99c3c398";

struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    fn eat(&mut self, bits: u32) {
        for byte in bits.to_le_bytes() {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}
