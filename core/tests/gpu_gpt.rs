//! The transformer's kernels against their CPU twins (issue 27):
//! `gelu_forward` and `gelu_backward` against `ops::gelu_forward` and
//! `ops::gelu_backward`.

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::{random, run_launch, SIZES};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::model::gpt::ops;

/// Inputs where the GELU bends or saturates, then random ones in [−10, 10]
/// to `n` in all: the sizes around a workgroup and past 256 of them.
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
        let l = launch::gelu_backward(n);
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

/// Rows of a LayerNorm's input: random in [−2, 2] around a per-row offset
/// (centring matters), with weight and bias random in [−1.5, 1.5].
fn layernorm_case(rows: usize, c: usize, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut x = random(rows * c, seed, 2.0);
    for (r, row) in x.chunks_mut(c).enumerate() {
        row.iter_mut().for_each(|v| *v += (r % 5) as f32 - 2.0);
    }
    (x, random(c, seed + 1, 1.5), random(c, seed + 2, 1.5))
}

const ROWS: [usize; 3] = [1, 33, 100];

/// The twin sums each row left to right, the kernel in 64 strided partial
/// sums and a tree: each of μ and σ² is within c·ε of the other's
/// relative to the row's scale (ε = 2⁻²⁴; c ≤ 257, rows of |x| ≤ 4), so n
/// = (x − μ)·r is within 4e-6·(1 + |n|), and y = n·w + b within that
/// times |w| plus an ulp of |y|.
#[allow(clippy::needless_range_loop)] // (row, feature) indices into several arrays
async fn layernorm_forward_matches_cpu() {
    let mut worst = 0.0f32;
    for &rows in &ROWS {
        for &c in &SIZES {
            let (x, w, b) = layernorm_case(rows, c, (rows * 1000 + c) as u64);
            let (mut y, mut mean, mut rstd) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            ops::layernorm_forward(&mut y, &mut mean, &mut rstd, &x, &w, &b, rows, c);
            let nan = |n: usize| f32_bytes(&vec![f32::NAN; n]);
            let l = launch::layernorm_forward(rows, c);
            let args = [
                Arg::Out(&nan(rows * c)),
                Arg::Out(&nan(rows)),
                Arg::Out(&nan(rows)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&w)),
                Arg::In(&f32_bytes(&b)),
            ];
            let out = run_launch(&l, args).await;
            let (gy, gm, gr) = (to_f32(&out[0]), to_f32(&out[1]), to_f32(&out[2]));
            for r in 0..rows {
                assert!(
                    (gm[r] - mean[r]).abs() <= 1e-6 * (1.0 + mean[r].abs()),
                    "rows {rows} c {c}: mean {} vs {}",
                    gm[r],
                    mean[r]
                );
                assert!((gr[r] - rstd[r]).abs() <= 4e-6 * rstd[r], "rows {rows} c {c}: rstd {} vs {}", gr[r], rstd[r]);
                for i in 0..c {
                    let k = r * c + i;
                    let n = (x[k] - mean[r]) * rstd[r];
                    let tol = 4e-6 * (1.0 + n.abs()) * w[i].abs() + 1.2e-7 * y[k].abs();
                    let err = (gy[k] - y[k]).abs();
                    assert!(err <= tol, "rows {rows} c {c} at ({r}, {i}): {} on the GPU, {} on the CPU", gy[k], y[k]);
                    worst = worst.max(err / tol);
                }
            }
        }
    }
    println!("layernorm_forward: the worst error is {worst:.3} of the bound");
}
gpu_common::twin_test!(layernorm_forward_matches_cpu);

/// ∂L/∂x: the two row means differ from the twin's by the order of their
/// sums (c·ε of the sum of their terms' sizes); dγ and dβ, summed over the
/// rows in 64 strided parts and a tree, by rows·ε of theirs.
#[allow(clippy::needless_range_loop)] // (row, feature) indices into several arrays
async fn layernorm_backward_matches_cpu() {
    let (mut worst_x, mut worst_p) = (0.0f32, 0.0f32);
    for &rows in &ROWS {
        for &c in &SIZES {
            let seed = (rows * 1000 + c) as u64 + 7;
            let (x, w, b) = layernorm_case(rows, c, seed);
            let (mut y, mut mean, mut rstd) = (vec![0.0; rows * c], vec![0.0; rows], vec![0.0; rows]);
            ops::layernorm_forward(&mut y, &mut mean, &mut rstd, &x, &w, &b, rows, c);
            let dy = random(rows * c, seed + 3, 1.0);
            let (dx0, dw0, db0) = (random(rows * c, seed + 4, 0.5), random(c, seed + 5, 0.5), random(c, seed + 6, 0.5));
            let (mut dx, mut dw, mut db) = (dx0.clone(), dw0.clone(), db0.clone());
            ops::layernorm_backward(&mut dx, &mut dw, &mut db, &dy, &x, &w, &mean, &rstd, rows, c);
            let l = launch::layernorm_backward_input(rows, c);
            let args = [
                Arg::Out(&f32_bytes(&dx0)),
                Arg::In(&f32_bytes(&dy)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&w)),
                Arg::In(&f32_bytes(&mean)),
                Arg::In(&f32_bytes(&rstd)),
            ];
            let gdx = to_f32(&run_launch(&l, args).await[0]);
            for r in 0..rows {
                // The size of the terms of ∂L/∂x's row: r·(|g| + mean|g| + |n|·mean|g·n|).
                let g: Vec<f32> = (0..c).map(|i| (w[i] * dy[r * c + i]).abs()).collect();
                let g_mean = g.iter().sum::<f32>() / c as f32;
                for i in 0..c {
                    let k = r * c + i;
                    let n = ((x[k] - mean[r]) * rstd[r]).abs();
                    let scale = rstd[r] * (g[i] + g_mean * (1.0 + n * 4.0));
                    let tol = 1e-6 * scale * (c as f32).sqrt().max(1.0) + 1.2e-7 * (dx0[k].abs() + dx[k].abs());
                    let err = (gdx[k] - dx[k]).abs();
                    assert!(
                        err <= tol,
                        "rows {rows} c {c} at ({r}, {i}): dx {} on the GPU, {} on the CPU",
                        gdx[k],
                        dx[k]
                    );
                    worst_x = worst_x.max(err / tol);
                }
            }
            let l = launch::layernorm_backward_params(rows, c);
            let args = [
                Arg::Out(&f32_bytes(&dw0)),
                Arg::Out(&f32_bytes(&db0)),
                Arg::In(&f32_bytes(&dy)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&mean)),
                Arg::In(&f32_bytes(&rstd)),
            ];
            let out = run_launch(&l, args).await;
            let (gdw, gdb) = (to_f32(&out[0]), to_f32(&out[1]));
            for i in 0..c {
                // Σ_rows of terms up to |n·dy| ≤ 4·1 and |dy| ≤ 1.
                let sum_w: f32 = (0..rows).map(|r| (dy[r * c + i] * (x[r * c + i] - mean[r]) * rstd[r]).abs()).sum();
                let sum_b: f32 = (0..rows).map(|r| dy[r * c + i].abs()).sum();
                let eps = 1.2e-7 * rows as f32;
                let (tol_w, tol_b) =
                    (eps * sum_w + 1.2e-7 * dw[i].abs() + 1e-9, eps * sum_b + 1.2e-7 * db[i].abs() + 1e-9);
                let (ew, eb) = ((gdw[i] - dw[i]).abs(), (gdb[i] - db[i]).abs());
                assert!(ew <= tol_w, "rows {rows} c {c} feature {i}: dγ {} on the GPU, {} on the CPU", gdw[i], dw[i]);
                assert!(eb <= tol_b, "rows {rows} c {c} feature {i}: dβ {} on the GPU, {} on the CPU", gdb[i], db[i]);
                worst_p = worst_p.max((ew / tol_w).max(eb / tol_b));
            }
        }
    }
    println!("layernorm_backward: the worst errors are {worst_x:.3} (∂L/∂x) and {worst_p:.3} (dγ, dβ) of their bounds");
}
gpu_common::twin_test!(layernorm_backward_matches_cpu);

/// The embeddings: forward is one addition per element and backward adds
/// each element's rows in the twin's order, so both are the same bits.
/// Vocabularies around a workgroup, windows of several lengths, a batch
/// where tokens repeat; a token past the vocabulary writes NaN.
async fn encoder_matches_cpu_bitwise() {
    for &(vocab, t, c, b) in &[(1, 1, 1, 1), (65, 8, 7, 3), (257, 64, 65, 2), (3, 5, 64, 33)] {
        let rows = b * t;
        let seed = (vocab * 100 + t * 10 + c) as u64;
        let mut rng = stepscope_core::rng::Rng::new(seed, 3);
        let tokens: Vec<u32> = (0..rows).map(|_| rng.below(vocab as u64) as u32).collect();
        let (wte, wpe) = (random(vocab * c, seed + 1, 1.0), random(t * c, seed + 2, 1.0));
        let mut want = vec![0.0; rows * c];
        ops::encoder_forward(&mut want, &tokens, &wte, &wpe, t, c);
        let l = launch::encoder_forward(rows, t, c, vocab);
        let token_bytes: Vec<u8> = bytemuck::cast_slice(&tokens).to_vec();
        let args = [
            Arg::Out(&f32_bytes(&vec![f32::NAN; rows * c])),
            Arg::In(&token_bytes),
            Arg::In(&f32_bytes(&wte)),
            Arg::In(&f32_bytes(&wpe)),
        ];
        let got = to_f32(&run_launch(&l, args).await[0]);
        assert_eq!(bits(&got), bits(&want), "forward, vocab {vocab} t {t} c {c} b {b}");

        let dout = random(rows * c, seed + 3, 1.0);
        let (dwte0, dwpe0) = (random(vocab * c, seed + 4, 0.5), random(t * c, seed + 5, 0.5));
        let (mut dwte, mut dwpe) = (dwte0.clone(), dwpe0.clone());
        ops::encoder_backward(&mut dwte, &mut dwpe, &dout, &tokens, t, c);
        let l = launch::encoder_backward(rows, t, c, vocab);
        let args = [
            Arg::Out(&f32_bytes(&dwte0)),
            Arg::Out(&f32_bytes(&dwpe0)),
            Arg::In(&f32_bytes(&dout)),
            Arg::In(&token_bytes),
        ];
        let out = run_launch(&l, args).await;
        assert_eq!(bits(&to_f32(&out[0])), bits(&dwte), "dwte, vocab {vocab} t {t} c {c} b {b}");
        assert_eq!(bits(&to_f32(&out[1])), bits(&dwpe), "dwpe, vocab {vocab} t {t} c {c} b {b}");
    }
    // A token id past the vocabulary: NaN where its row is, nothing read past wte.
    let l = launch::encoder_forward(2, 2, 3, 4);
    let tokens: Vec<u8> = bytemuck::cast_slice(&[1u32, 9]).to_vec();
    let args = [
        Arg::Out(&f32_bytes(&[0.0; 6])),
        Arg::In(&tokens),
        Arg::In(&f32_bytes(&[1.0; 12])),
        Arg::In(&f32_bytes(&[0.5; 6])),
    ];
    let got = to_f32(&run_launch(&l, args).await[0]);
    assert_eq!(&got[..3], &[1.5; 3]);
    assert!(got[3..].iter().all(|v| v.is_nan()), "{got:?}");
}
gpu_common::twin_test!(encoder_matches_cpu_bitwise);

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Attention forward: every score and output is summed in the twin's
/// order; only exp differs (WGSL's, within a few ulp, against libm's), so
/// each probability is within 2e-6 of its size (plus 1e-9 where it
/// underflows) and each output within 2e-6 of Σ P·|v|. Windows of 1, 7,
/// 64 and 65 tokens, heads of 1 to 16 wide.
#[allow(clippy::needless_range_loop)] // (query, key) indices into several arrays
async fn attention_forward_matches_cpu() {
    let (mut worst_p, mut worst_y) = (0.0f32, 0.0f32);
    for &(b, t, c, h) in &[(1, 1, 4, 1), (2, 7, 12, 3), (3, 64, 32, 4), (2, 65, 64, 4), (1, 130, 16, 1)] {
        let seed = (b * 1000 + t * 10 + c) as u64;
        let inp = random(b * t * 3 * c, seed, 2.0);
        let (mut y, mut att) = (vec![0.0; b * t * c], vec![0.0; b * h * t * t]);
        ops::attention_forward(&mut y, &mut att, &inp, b, t, c, h);
        let l = launch::attention_forward(b, t, c, h);
        let args = [
            Arg::Out(&f32_bytes(&vec![f32::NAN; b * t * c])),
            Arg::Out(&f32_bytes(&vec![f32::NAN; b * h * t * t])),
            Arg::In(&f32_bytes(&inp)),
        ];
        let out = run_launch(&l, args).await;
        let (gy, gatt) = (to_f32(&out[0]), to_f32(&out[1]));
        for k in 0..att.len() {
            let tol = 2e-6 * att[k] + 1e-9;
            let err = (gatt[k] - att[k]).abs();
            assert!(err <= tol, "b {b} t {t} c {c} h {h}: P[{k}] {} on the GPU, {} on the CPU", gatt[k], att[k]);
            worst_p = worst_p.max(err / tol);
        }
        let hs = c / h;
        for bi in 0..b {
            for ti in 0..t {
                for hi in 0..h {
                    let p_row = &att[((bi * h + hi) * t + ti) * t..][..t];
                    for i in 0..hs {
                        let v = |t2: usize| inp[(bi * t + t2) * 3 * c + 2 * c + hi * hs + i];
                        let size: f32 = (0..=ti).map(|t2| p_row[t2] * v(t2).abs()).sum();
                        let k = (bi * t + ti) * c + hi * hs + i;
                        let tol = 2e-6 * size + 1e-9;
                        let err = (gy[k] - y[k]).abs();
                        assert!(
                            err <= tol,
                            "b {b} t {t} c {c} h {h}: y[{k}] {} on the GPU, {} on the CPU",
                            gy[k],
                            y[k]
                        );
                        worst_y = worst_y.max(err / tol);
                    }
                }
            }
        }
    }
    println!("attention_forward: the worst errors are {worst_p:.3} (P) and {worst_y:.3} (y) of their bounds");
}
gpu_common::twin_test!(attention_forward_matches_cpu);
