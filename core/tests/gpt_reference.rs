//! The CPU GPT (`model::gpt`) against PyTorch, tensor by tensor, as llm.c's
//! `test_gpt2.c` checks `train_gpt2.c`: the loss, the z-loss and every
//! parameter's gradient of a tiny model, from
//! `fixtures/gpt_reference.safetensors` (written in float64 by
//! `fixtures/make_gpt_reference.py`: nanoGPT's module with
//! `F.scaled_dot_product_attention`, exact GELU, a tied and an untied head,
//! q/k LayerNorm and z-loss).
//!
//! Tolerance: the f32 model against the float64 reference, |Δ| ≤ 2e-5 +
//! 1e-4·|reference| per element (f32 rounding through a few hundred
//! operations of values O(1)).

use safetensors::SafeTensors;
use stepscope_core::model::gpt::{Gpt, GptActivations, GptScratch, GptShape};

fn read(st: &SafeTensors, name: &str) -> Vec<f64> {
    let t = st.tensor(name).unwrap_or_else(|_| panic!("{name} in the fixture"));
    t.data().chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
}

fn check(prefix: &str, shape: GptShape, batch: usize) {
    let bytes =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpt_reference.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let gpt = Gpt::new(shape);
    let mut p = vec![0.0f32; shape.parameter_count()];
    for t in &gpt.tensors {
        let values = read(&st, &format!("{prefix}{}", t.name));
        assert_eq!(values.len(), t.len, "{}", t.name);
        for (slot, v) in p[t.offset..t.offset + t.len].iter_mut().zip(values) {
            *slot = v as f32;
        }
    }
    let idx: Vec<u32> = read(&st, &format!("{prefix}idx")).iter().map(|&v| v as u32).collect();
    let targets: Vec<u32> = read(&st, &format!("{prefix}targets")).iter().map(|&v| v as u32).collect();
    assert_eq!(idx.len(), batch * shape.context);
    let z_coef = read(&st, &format!("{prefix}z_coef"))[0] as f32;
    let mut acts = GptActivations::default();
    let (ce, z) = gpt.forward(&mut acts, &p, &idx, &targets);
    let (want_ce, want_z) = (read(&st, &format!("{prefix}loss"))[0], read(&st, &format!("{prefix}z_loss"))[0]);
    assert!((ce as f64 - want_ce).abs() <= 2e-5 + 1e-4 * want_ce.abs(), "{prefix}loss {ce} vs {want_ce}");
    assert!((z as f64 - want_z).abs() <= 2e-5 + 1e-4 * want_z.abs(), "{prefix}z_loss {z} vs {want_z}");
    let mut g = vec![0.0f32; p.len()];
    gpt.backward(&mut g, &mut acts, &mut GptScratch::default(), &p, &idx, &targets, z_coef, 1.0);
    for t in &gpt.tensors {
        let want = read(&st, &format!("{prefix}grad.{}", t.name));
        for (k, (&got, &want)) in g[t.offset..t.offset + t.len].iter().zip(&want).enumerate() {
            assert!(
                (got as f64 - want).abs() <= 2e-5 + 1e-4 * want.abs(),
                "{prefix}{}[{k}]: {got} vs PyTorch {want}",
                t.name
            );
        }
    }
}

#[test]
fn a_tied_gpt_matches_pytorch_tensor_by_tensor() {
    let shape = GptShape {
        vocab_size: 7,
        context: 5,
        embed: 6,
        heads: 2,
        blocks: 2,
        mlp_ratio: 4,
        tie_embeddings: true,
        qk_layernorm: false,
    };
    check("tied.", shape, 2);
}

#[test]
fn an_untied_gpt_with_qk_layernorm_and_z_loss_matches_pytorch() {
    let shape = GptShape {
        vocab_size: 5,
        context: 3,
        embed: 4,
        heads: 1,
        blocks: 1,
        mlp_ratio: 2,
        tie_embeddings: false,
        qk_layernorm: true,
    };
    check("untied.", shape, 3);
}
