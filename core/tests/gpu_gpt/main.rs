//! The transformer's kernels against their CPU twins (issue 27): GELU, the
//! embeddings, the cross-entropy and the residual add here; the LayerNorms
//! in `norms.rs`, attention in `attention.rs`. Shared helpers: tensors
//! packed into a flat buffer with guard gaps, and bit patterns.

#[cfg(not(target_arch = "wasm32"))]
#[path = "../gpu_common/mod.rs"]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

#[path = "attention.rs"]
mod attention;
#[path = "norms.rs"]
mod norms;

use gpu_common::{random, run_launch, SIZES};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::model::gpt::ops;

fn gelu_inputs(n: usize, seed: u64) -> Vec<f32> {
    let points = [0.0, -0.0, 1e-4, -1e-4, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 5.5, -5.5, 10.0, -10.0, 30.0, -30.0];
    let mut x = random(n, seed, 10.0);
    for (v, p) in x.iter_mut().zip(points) {
        *v = p;
    }
    x
}

/// The bound both kernels are held to. erf_as (Abramowitz & Stegun
/// 7.1.26) is within 1.5e-7 of erf over the reals; in f32 its polynomial
/// (five multiply-adds of values below 1.5) and WGSL's exp (within 3 + 2|x|
/// ulp) add at most a few ulps of 1, so |Δerf| < 4e-7 and
/// |ΔGELU| = 0.5|x|·|Δerf| plus the rounding of 0.5·x·(1 + erf) < 3e-7·(1 + |x|).
fn gelu_tolerance(x: f32) -> f32 {
    3e-7 * (1.0 + x.abs())
}

async fn gelu_forward_matches_cpu() {
    let mut worst = 0.0f32;
    for (case, &n) in SIZES.iter().chain(&[70_000]).enumerate() {
        let x = gelu_inputs(n, case as u64);
        let mut want = vec![0.0; n];
        ops::gelu_forward(&mut want, &x);
        let l = launch::gelu_forward(n);
        let got = to_f32(&run_launch(&l, [Arg::Out(&f32_bytes(&vec![f32::NAN; n])), Arg::In(&f32_bytes(&x))]).await[0]);
        for i in 0..n {
            let err = (got[i] - want[i]).abs();
            assert!(
                err <= gelu_tolerance(x[i]),
                "n {n}: gelu({}) = {} on the GPU, {} on the CPU",
                x[i],
                got[i],
                want[i]
            );
            worst = worst.max(err / gelu_tolerance(x[i]));
        }
    }
    println!("gelu_forward: the worst error is {worst:.3} of the bound");
}
gpu_common::twin_test!(gelu_forward_matches_cpu);

/// Backward accumulates into a gradient already there: the bound is the
/// derivative's (Φ within half of erf's, x·φ within a few ulps: 3e-7·(1 +
/// |x|)) times |∂L/∂y|, plus an ulp of the sum's terms.
async fn gelu_backward_matches_cpu() {
    for (case, &n) in SIZES.iter().chain(&[70_000]).enumerate() {
        let x = gelu_inputs(n, case as u64 + 10);
        let dout = random(n, case as u64 + 20, 2.0);
        let before = random(n, case as u64 + 30, 1.0);
        let mut want = before.clone();
        ops::gelu_backward(&mut want, &x, &dout);
        let l = launch::gelu_backward(n, true);
        let args = [Arg::Out(&f32_bytes(&before)), Arg::In(&f32_bytes(&x)), Arg::In(&f32_bytes(&dout))];
        let got = to_f32(&run_launch(&l, args).await[0]);
        for i in 0..n {
            let tol = gelu_tolerance(x[i]) * dout[i].abs() + 1.2e-7 * (before[i].abs() + want[i].abs());
            assert!(
                (got[i] - want[i]).abs() <= tol,
                "n {n}: at x = {}, dout {}: {} on the GPU, {} on the CPU",
                x[i],
                dout[i],
                got[i],
                want[i]
            );
        }
    }
}
gpu_common::twin_test!(gelu_backward_matches_cpu);

/// Tensors packed into one flat buffer as the engine holds them, each
/// after a gap of 5 floats (so offsets are awkward and a kernel reading or
/// writing past its tensor shows): the buffer and each tensor's offset.
fn packed(parts: &[&[f32]]) -> (Vec<f32>, Vec<usize>) {
    let (mut flat, mut offsets) = (Vec::new(), Vec::new());
    for part in parts {
        flat.extend_from_slice(&[-7.5; 5]);
        offsets.push(flat.len());
        flat.extend_from_slice(part);
    }
    flat.extend_from_slice(&[-7.5; 5]);
    (flat, offsets)
}

/// The tensor at `offset` of `len` in `flat`, and whether every gap kept
/// its -7.5.
fn unpacked(flat: &[f32], offsets: &[usize], lens: &[usize]) -> Vec<Vec<f32>> {
    let mut inside = vec![false; flat.len()];
    for (&o, &n) in offsets.iter().zip(lens) {
        inside[o..o + n].iter_mut().for_each(|v| *v = true);
    }
    assert!(flat.iter().zip(&inside).all(|(&v, &is)| is || v == -7.5), "a kernel wrote outside its tensors");
    offsets.iter().zip(lens).map(|(&o, &n)| flat[o..o + n].to_vec()).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The embeddings: forward is one addition per element and backward adds
/// each element's rows in the twin's order, so both are the same bits.
/// Vocabularies around a workgroup, windows of several lengths, a batch
/// where tokens repeat; a value that is not a token id writes NaN.
async fn encoder_matches_cpu_bitwise() {
    for &(vocab, t, c, b) in &[(1, 1, 1, 1), (65, 8, 7, 3), (257, 64, 65, 2), (3, 5, 64, 33)] {
        let rows = b * t;
        let seed = (vocab * 100 + t * 10 + c) as u64;
        let mut rng = stepscope_core::rng::Rng::new(seed, 3);
        let tokens: Vec<u32> = (0..rows).map(|_| rng.below(vocab as u64) as u32).collect();
        let (wte, wpe) = (random(vocab * c, seed + 1, 1.0), random(t * c, seed + 2, 1.0));
        let mut want = vec![0.0; rows * c];
        ops::encoder_forward(&mut want, &tokens, &wte, &wpe, t, c);
        let (params, at) = packed(&[&wpe, &wte]);
        let emb = launch::EmbeddingsAt { wte: at[1], wpe: at[0] };
        let l = launch::encoder_forward(rows, t, c, vocab, emb);
        // The ids as the gathered batch holds them, in f32.
        let token_bytes = f32_bytes(&tokens.iter().map(|&t| t as f32).collect::<Vec<_>>());
        let args =
            [Arg::Out(&f32_bytes(&vec![f32::NAN; rows * c])), Arg::In(&token_bytes), Arg::In(&f32_bytes(&params))];
        let got = to_f32(&run_launch(&l, args).await[0]);
        assert_eq!(bits(&got), bits(&want), "forward, vocab {vocab} t {t} c {c} b {b}");

        let dout = random(rows * c, seed + 3, 1.0);
        let (dwte0, dwpe0) = (random(vocab * c, seed + 4, 0.5), random(t * c, seed + 5, 0.5));
        let (mut dwte, mut dwpe) = (dwte0.clone(), dwpe0.clone());
        ops::encoder_backward(&mut dwte, &mut dwpe, &dout, &tokens, t, c);
        let (grads, at) = packed(&[&dwpe0, &dwte0]);
        let l = launch::encoder_backward(rows, t, c, vocab, launch::EmbeddingsAt { wte: at[1], wpe: at[0] });
        let args = [Arg::Out(&f32_bytes(&grads)), Arg::In(&f32_bytes(&dout)), Arg::In(&token_bytes)];
        let out = unpacked(&to_f32(&run_launch(&l, args).await[0]), &at, &[t * c, vocab * c]);
        assert_eq!(bits(&out[1]), bits(&dwte), "dwte, vocab {vocab} t {t} c {c} b {b}");
        assert_eq!(bits(&out[0]), bits(&dwpe), "dwpe, vocab {vocab} t {t} c {c} b {b}");
    }
    // Values that are not token ids (past the vocabulary, negative,
    // fractional): NaN where their rows are, nothing read past wte.
    let (params, at) = packed(&[&[1.0; 12], &[0.5; 15]]);
    let l = launch::encoder_forward(4, 5, 3, 4, launch::EmbeddingsAt { wte: at[0], wpe: at[1] });
    let args =
        [Arg::Out(&f32_bytes(&[0.0; 12])), Arg::In(&f32_bytes(&[1.0, 9.0, -1.0, 2.5])), Arg::In(&f32_bytes(&params))];
    let got = to_f32(&run_launch(&l, args).await[0]);
    assert_eq!(&got[..3], &[1.5; 3]);
    assert!(got[3..].iter().all(|v| v.is_nan()), "{got:?}");
}
gpu_common::twin_test!(encoder_matches_cpu_bitwise);

/// The cross-entropy with z-loss: only exp and log differ from the
/// twin's (WGSL's within a few ulp): lse within 2e-6·(1 + |lse|), each
/// probability within 3e-6·(2 + |lse|) of its size, and the gradient that
/// times its factor and scale. The means are summed in the twin's order
/// from the rows the GPU stored: the cross-entropy's bits exactly, the
/// z-loss within an FMA's difference. A target that is not a token id
/// makes the loss NaN and sets the non-finite flag of the loss phase.
async fn cross_entropy_matches_cpu() {
    let mut worst = 0.0f32;
    for &(rows, v) in &[(1, 1), (7, 65), (100, 300), (3, 4096)] {
        for z_loss in [0.0f32, 1e-3] {
            let seed = (rows * 10_000 + v) as u64;
            let logits = random(rows * v, seed, 8.0);
            let mut rng = stepscope_core::rng::Rng::new(seed, 5);
            let targets: Vec<u32> = (0..rows).map(|_| rng.below(v as u64) as u32).collect();
            let scale = 1.0 / (2 * rows) as f32;
            let mut lse = vec![0.0; rows];
            let (ce, z) = ops::cross_entropy_forward(&mut lse, &logits, &targets, rows, v);
            let mut dlogits = vec![0.0; rows * v];
            ops::cross_entropy_backward(&mut dlogits, &logits, &lse, &targets, rows, v, z_loss, scale);

            let target_f: Vec<f32> = targets.iter().map(|&t| t as f32).collect();
            let l = launch::cross_entropy_forward_backward(rows, v, z_loss, scale);
            let args = [
                Arg::Out(&f32_bytes(&vec![f32::NAN; rows * v])),
                Arg::Out(&f32_bytes(&vec![f32::NAN; 2 * rows])),
                Arg::In(&f32_bytes(&logits)),
                Arg::In(&f32_bytes(&target_f)),
            ];
            let out = run_launch(&l, args).await;
            let (g, losses) = (to_f32(&out[0]), to_f32(&out[1]));
            for r in 0..rows {
                let (gce, glse) = (losses[2 * r], losses[2 * r + 1]);
                let tol = 2e-6 * (1.0 + lse[r].abs());
                assert!((glse - lse[r]).abs() <= tol, "rows {rows} v {v}: lse {glse} vs {}", lse[r]);
                let want_ce = lse[r] - logits[r * v + targets[r] as usize];
                assert!((gce - want_ce).abs() <= tol + 1.2e-7 * want_ce.abs(), "ce {gce} vs {want_ce}");
                let factor = 1.0 + 2.0 * z_loss * lse[r];
                for i in 0..v {
                    let k = r * v + i;
                    let p = (logits[k] - lse[r]).exp();
                    let tol =
                        scale * p * factor.abs() * 3e-6 * (2.0 + lse[r].abs()) + 1.2e-7 * dlogits[k].abs() + 1e-12;
                    let err = (g[k] - dlogits[k]).abs();
                    assert!(err <= tol, "rows {rows} v {v} z {z_loss}: dlogits[{k}] {} vs {}", g[k], dlogits[k]);
                    worst = worst.max(err / tol);
                }
            }
            // The means, from the rows the GPU stored, in order.
            let l = launch::cross_entropy_loss(rows, 9);
            let flags: Vec<u8> = bytemuck::cast_slice(&[u32::MAX, 0, 0, 0]).to_vec();
            let args = [Arg::Out(&f32_bytes(&[0.5; 4])), Arg::Out(&flags), Arg::In(&f32_bytes(&losses))];
            let out = run_launch(&l, args).await;
            let stats = to_f32(&out[0]);
            let (mut ce_sum, mut z_sum) = (0.0f32, 0.0f32);
            for r in 0..rows {
                ce_sum += losses[2 * r];
                z_sum += losses[2 * r + 1] * losses[2 * r + 1];
            }
            assert_eq!(stats[0], 0.5 + ce_sum / rows as f32, "the cross-entropy's mean, added");
            let z_tol = rows as f32 * 1.2e-7 * z_sum / rows as f32;
            assert!((stats[3] - (0.5 + z_sum / rows as f32)).abs() <= z_tol + 1e-7, "z {} vs {}", stats[3], z_sum);
            assert!((stats[0] - 0.5 - ce).abs() <= 4e-6 * (1.0 + ce.abs()), "ce mean {} vs {ce}", stats[0] - 0.5);
            assert!((stats[3] - 0.5 - z).abs() <= 8e-6 * (1.0 + z.abs()), "z mean {} vs {z}", stats[3] - 0.5);
            assert_eq!(bytemuck::cast_slice::<u8, u32>(&out[1])[0], u32::MAX, "no flag for finite losses");
        }
    }
    // Targets that are not token ids: the loss is NaN and flagged.
    let l = launch::cross_entropy_forward_backward(3, 4, 0.0, 1.0);
    let args = [
        Arg::Out(&f32_bytes(&[0.0; 12])),
        Arg::Out(&f32_bytes(&[0.0; 6])),
        Arg::In(&f32_bytes(&[0.0; 12])),
        Arg::In(&f32_bytes(&[1.0, 4.0, 0.5])),
    ];
    let losses = to_f32(&run_launch(&l, args).await[1]);
    assert!((losses[0] - 4f32.ln()).abs() < 1e-6 && losses[2].is_nan() && losses[4].is_nan(), "{losses:?}");
    let l = launch::cross_entropy_loss(3, 9);
    let flags: Vec<u8> = bytemuck::cast_slice(&[u32::MAX, 2, 0, 0]).to_vec();
    let args = [Arg::Out(&f32_bytes(&[0.0; 12])), Arg::Out(&flags), Arg::In(&f32_bytes(&losses))];
    let out = run_launch(&l, args).await;
    assert_eq!(bytemuck::cast_slice::<u8, u32>(&out[1])[0], (2 << 16) | (2 << 8) | 9, "the loss phase's code");
    println!("cross_entropy: the worst gradient error is {worst:.3} of the bound");
}
gpu_common::twin_test!(cross_entropy_matches_cpu);

/// The residual add: one addition each, the twin's bits.
async fn residual_matches_cpu_bitwise() {
    for &n in SIZES.iter().chain(&[70_000]) {
        let (a, x) = (random(n, n as u64, 3.0), random(n, n as u64 + 1, 3.0));
        let mut want = vec![0.0; n];
        ops::residual_forward(&mut want, &a, &x);
        let got = to_f32(
            &run_launch(&launch::residual_forward(n), [Arg::Out(&f32_bytes(&a)), Arg::In(&f32_bytes(&x))]).await[0],
        );
        assert_eq!(bits(&got), bits(&want), "n {n}");
    }
}
gpu_common::twin_test!(residual_matches_cpu_bitwise);
