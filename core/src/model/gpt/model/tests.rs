//! The whole model's gradient against finite differences, at tiny and
//! awkward sizes: two heads of an odd size (3), T = 1, one head, tied and
//! untied heads, q/k LayerNorm, and z-loss. Tolerance as the ops' checks
//! (`ops/tests.rs`), |analytic − numeric| ≤ 2e-3 + 1e-2·|numeric|, with a
//! smaller step h = 3e-3: a LayerNorm over a head of 3 values is curved
//! enough that h = 1e-2's truncation (O(h²·f‴)) reached 5 % there; the
//! rounding of the f32 objective is then about 3e-5,
//! absolute where the exact gradient is 0 (the key bias: a constant added
//! to every key of a query shifts all its scores alike; `k_ln.bias` too).

use super::*;
use crate::model::gpt::testing::values;

fn shape(t: usize, c: usize, h: usize, blocks: usize, tie: bool, qk: bool) -> GptShape {
    GptShape {
        vocab_size: 5,
        context: t,
        embed: c,
        heads: h,
        blocks,
        mlp_ratio: 2,
        tie_embeddings: tie,
        qk_layernorm: qk,
    }
}

#[test]
fn the_whole_gpts_gradient_matches_finite_differences() {
    let cases = [
        (shape(3, 6, 2, 2, true, false), 2, 0.0f32),
        (shape(3, 6, 2, 1, false, true), 2, 0.1),
        (shape(1, 4, 1, 1, true, false), 3, 0.0),
        (shape(4, 3, 1, 2, false, false), 1, 0.05),
    ];
    for (i, (s, batch, z_loss)) in cases.into_iter().enumerate() {
        let gpt = Gpt::new(s);
        let n = s.parameter_count();
        // Parameters large enough that every op's gradient is far from 0.
        let mut p: Vec<f32> = values(n, 30 + i as u64).iter().map(|v| 0.5 * v).collect();
        for t in gpt.tensors.iter().filter(|t| t.name.contains("ln") && t.name.ends_with("weight")) {
            for w in &mut p[t.offset..t.offset + t.len] {
                *w += 1.0;
            }
        }
        let rows = batch * s.context;
        let tokens: Vec<u32> = (0..rows + 1).map(|k| ((k * 7 + i) % s.vocab_size) as u32).collect();
        let (inp, targets) = (&tokens[..rows], &tokens[1..rows + 1]);
        let mut acts = GptActivations::default();
        let objective = |p: &[f32]| {
            let mut acts = GptActivations::default();
            let (ce, z) = gpt.forward(&mut acts, p, inp, targets);
            ce as f64 + z_loss as f64 * z as f64
        };
        gpt.forward(&mut acts, &p, inp, targets);
        let mut g = vec![0.0; n];
        gpt.backward(&mut g, &mut acts, &mut GptScratch::default(), &p, inp, targets, z_loss, 1.0);
        const H: f32 = 3e-3;
        for tensor in &gpt.tensors {
            for k in tensor.offset..tensor.offset + tensor.len {
                let (mut plus, mut minus) = (p.clone(), p.clone());
                plus[k] += H;
                minus[k] -= H;
                let numeric = (objective(&plus) - objective(&minus)) / (2.0 * H as f64);
                let analytic = g[k] as f64;
                assert!(
                    (analytic - numeric).abs() <= 2e-3 + 1e-2 * numeric.abs(),
                    "case {i}: {}[{}]: analytic {analytic}, numeric {numeric}",
                    tensor.name,
                    k - tensor.offset
                );
            }
        }
        // The key bias's exact gradient is 0 (with q/k LayerNorm, that of
        // k_ln.bias instead: the key bias then goes through the norm): the
        // float one is rounding.
        let c = s.embed;
        for block in 0..s.blocks {
            let (name, range) = if s.qk_layernorm {
                (format!("transformer.h.{block}.attn.k_ln.bias"), 0..c / s.heads)
            } else {
                (format!("transformer.h.{block}.attn.c_attn.bias"), c..2 * c)
            };
            let bias = gpt.tensors.iter().find(|t| t.name == name).unwrap();
            let key = &g[bias.offset + range.start..bias.offset + range.end];
            assert!(key.iter().all(|d| d.abs() < 1e-5), "case {i}: {name} {key:?}");
        }
    }
}

#[test]
fn a_scaled_backward_adds_into_the_gradients() {
    let s = shape(3, 6, 2, 1, true, false);
    let gpt = Gpt::new(s);
    let p: Vec<f32> = values(s.parameter_count(), 40).iter().map(|v| 0.3 * v).collect();
    let tokens = [0u32, 1, 2, 3, 4, 0, 1];
    let mut acts = GptActivations::default();
    gpt.forward(&mut acts, &p, &tokens[..6], &tokens[1..]);
    let mut once = vec![0.0; p.len()];
    gpt.backward(&mut once, &mut acts, &mut GptScratch::default(), &p, &tokens[..6], &tokens[1..], 0.0, 1.0);
    let mut halves = vec![0.0; p.len()];
    for _ in 0..2 {
        gpt.backward(&mut halves, &mut acts, &mut GptScratch::default(), &p, &tokens[..6], &tokens[1..], 0.0, 0.5);
    }
    for (a, b) in once.iter().zip(&halves) {
        assert!((a - b).abs() <= 1e-6 + 1e-5 * a.abs(), "{a} vs {b}");
    }
}

/// Activation checkpointing recomputes each block's forward from its kept
/// input: the same gradients bit for bit, and the buffers the sizes
/// `memory_floats` predicts, with and without it.
#[test]
fn checkpointing_gives_the_same_bits_and_the_predicted_memory() {
    for (s, batch) in [(shape(3, 6, 2, 2, true, false), 2), (shape(4, 6, 3, 3, false, true), 3)] {
        let gpt = Gpt::new(s);
        let p: Vec<f32> = values(s.parameter_count(), 50).iter().map(|v| 0.3 * v).collect();
        let rows = batch * s.context;
        let tokens: Vec<u32> = (0..rows + 1).map(|k| ((k * 3) % s.vocab_size) as u32).collect();
        let (inp, targets) = (&tokens[..rows], &tokens[1..]);
        let mut results = Vec::new();
        for checkpointing in [false, true] {
            let mut acts = GptActivations { checkpointing, ..GptActivations::default() };
            let mut scratch = GptScratch::default();
            let loss = gpt.forward(&mut acts, &p, inp, targets);
            let mut g = vec![0.0; p.len()];
            gpt.backward(&mut g, &mut acts, &mut scratch, &p, inp, targets, 0.01, 1.0);
            let (activations, attention) = acts.bytes();
            let (a, att, sc) = memory_floats(&s, batch, checkpointing);
            assert_eq!((activations, attention, scratch.bytes()), (4 * a as u64, 4 * att as u64, 4 * sc as u64));
            results.push((loss, g, activations));
        }
        assert_eq!((results[0].0, &results[0].1), (results[1].0, &results[1].1));
        assert!(results[1].2 < results[0].2, "checkpointing keeps less");
    }
}
