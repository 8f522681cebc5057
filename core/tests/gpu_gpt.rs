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
            let (params, at) = packed(&[&w, &b]);
            let l = launch::layernorm_forward(rows, c, launch::NormAt { weight: at[0], bias: at[1] });
            let args = [
                Arg::Out(&nan(rows * c)),
                Arg::Out(&nan(rows)),
                Arg::Out(&nan(rows)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&params)),
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
            let (params, at) = packed(&[&b, &w]);
            let l = launch::layernorm_backward_input(rows, c, launch::NormAt { weight: at[1], bias: at[0] }, true);
            let args = [
                Arg::Out(&f32_bytes(&dx0)),
                Arg::In(&f32_bytes(&dy)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&params)),
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
            let (grads, at) = packed(&[&dw0, &db0]);
            let l = launch::layernorm_backward_params(rows, c, launch::NormAt { weight: at[0], bias: at[1] });
            let args = [
                Arg::Out(&f32_bytes(&grads)),
                Arg::In(&f32_bytes(&dy)),
                Arg::In(&f32_bytes(&x)),
                Arg::In(&f32_bytes(&mean)),
                Arg::In(&f32_bytes(&rstd)),
            ];
            let out = unpacked(&to_f32(&run_launch(&l, args).await[0]), &at, &[c, c]);
            let (gdw, gdb) = (&out[0], &out[1]);
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

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Attention forward: every score and output is summed in the twin's
/// order; only exp differs (WGSL's, within a few ulp, against the twin's
/// `ops::math::exp`), so each probability is within 2e-6 of its size (plus
/// 1e-9 where it underflows) and each output within 2e-6 of Σ P·|v|.
/// Windows of 1, 7, 64 and 65 tokens, heads of 1 to 16 wide.
#[allow(clippy::needless_range_loop)] // (query, key) indices into several arrays
async fn attention_forward_matches_cpu() {
    let (mut worst_p, mut worst_y) = (0.0f32, 0.0f32);
    for &(b, t, c, h) in &[(1, 1, 4, 1), (2, 7, 12, 3), (3, 64, 32, 4), (2, 65, 64, 4), (1, 130, 16, 1)] {
        let seed = (b * 1000 + t * 10 + c) as u64;
        let inp = random(b * t * 3 * c, seed, 2.0);
        let (mut y, mut att) = (vec![0.0; b * t * c], vec![0.0; b * h * t * t]);
        ops::attention_forward(&mut y, &mut att, &inp, b, t, c, h);
        for l in [launch::attention_forward(b, t, c, h), launch::attention_forward_rows(b, t, c, h)] {
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
    }
    println!("attention_forward: the worst errors are {worst_p:.3} (P) and {worst_y:.3} (y) of their bounds");
}
gpu_common::twin_test!(attention_forward_matches_cpu);

/// Attention backward, both variants of the query rows' half: every sum
/// runs in the twin's order and there is no exp, so the two differ only where a compiler contracts a multiply and
/// an add into an FMA: within the summation bound 2(hs + T + 4)·ε of each
/// output's terms taken in absolute value (dA, Σ a·dA, dS, then dq, dk,
/// dv from them). The same windows and heads as forward's test, with P
/// from the CPU's forward.
#[allow(clippy::needless_range_loop)] // (query, key) indices into several arrays
async fn attention_backward_matches_cpu() {
    let mut worst = 0.0f32;
    for &(b, t, c, h) in &[(1, 1, 4, 1), (2, 7, 12, 3), (3, 64, 32, 4), (2, 65, 64, 4), (1, 130, 16, 1)] {
        let seed = (b * 1000 + t * 10 + c) as u64 + 77;
        let inp = random(b * t * 3 * c, seed, 2.0);
        let dout = random(b * t * c, seed + 1, 1.0);
        let (mut y, mut att) = (vec![0.0; b * t * c], vec![0.0; b * h * t * t]);
        ops::attention_forward(&mut y, &mut att, &inp, b, t, c, h);
        let hs = c / h;
        let mut want = vec![0.0; b * t * 3 * c];
        let mut scratch = vec![0.0; ops::attention_scratch(t, hs)];
        ops::attention_backward(&mut want, &mut scratch, &dout, &inp, &att, b, t, c, h);

        let nan = |n: usize| f32_bytes(&vec![f32::NAN; n]);
        for q in [launch::attention_backward_query(b, t, c, h), launch::attention_backward_query_rows(b, t, c, h)] {
            let args = [
                Arg::Out(&nan(b * t * 3 * c)),
                Arg::Out(&nan(b * h * t * t)),
                Arg::In(&f32_bytes(&dout)),
                Arg::In(&f32_bytes(&inp)),
                Arg::In(&f32_bytes(&att)),
            ];
            let out = run_launch(&q, args).await;
            let (dinp_q, ds) = (to_f32(&out[0]), to_f32(&out[1]));
            let k = launch::attention_backward_key(b, t, c, h);
            let args = [
                Arg::Out(&f32_bytes(&dinp_q)),
                Arg::In(&f32_bytes(&dout)),
                Arg::In(&f32_bytes(&inp)),
                Arg::In(&f32_bytes(&att)),
                Arg::In(&f32_bytes(&ds)),
            ];
            let got = to_f32(&run_launch(&k, args).await[0]);

            // The sizes of every output's terms.
            let scale = 1.0 / (hs as f32).sqrt();
            let mut size = vec![0.0f32; b * t * 3 * c];
            for bi in 0..b {
                for hi in 0..h {
                    let at = |ti: usize, t2: usize| att[((bi * h + hi) * t + ti) * t + t2];
                    let col = |ti: usize, part: usize, i: usize| (bi * t + ti) * 3 * c + part * c + hi * hs + i;
                    let dy = |ti: usize, i: usize| dout[(bi * t + ti) * c + hi * hs + i].abs();
                    for ti in 0..t {
                        let da: Vec<f32> =
                            (0..=ti).map(|t2| (0..hs).map(|i| dy(ti, i) * inp[col(t2, 2, i)].abs()).sum()).collect();
                        let w: f32 = (0..=ti).map(|t2| at(ti, t2) * da[t2]).sum();
                        for t2 in 0..=ti {
                            let ds_size = at(ti, t2) * (da[t2] + w) * scale;
                            for i in 0..hs {
                                size[col(ti, 0, i)] += ds_size * inp[col(t2, 1, i)].abs();
                                size[col(t2, 1, i)] += ds_size * inp[col(ti, 0, i)].abs();
                                size[col(t2, 2, i)] += at(ti, t2) * dy(ti, i);
                            }
                        }
                    }
                }
            }
            let eps = f32::EPSILON / 2.0;
            for j in 0..want.len() {
                let tol = 2.0 * (hs + t + 4) as f32 * eps * size[j] + 1e-12;
                let err = (got[j] - want[j]).abs();
                assert!(err <= tol, "b {b} t {t} c {c} h {h}: dinp[{j}] {} on the GPU, {} on the CPU", got[j], want[j]);
                worst = worst.max(err / tol);
            }
        }
    }
    println!("attention_backward: the worst error is {worst:.3} of the bound");
}
gpu_common::twin_test!(attention_backward_matches_cpu);

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

/// The q/k LayerNorm: each head's q and k, hs wide, normalised by its own
/// LayerNorm as the twin runs `layernorm_forward`/`layernorm_backward` over
/// each segment, rows then heads, q before k; v copied through. One
/// invocation per segment (per feature for dγ, dβ), every sum in the
/// twin's order: only sqrt and a division's rounding differ, and the
/// contraction of a multiply and an add (within 1e-6 of each value's
/// terms).
#[allow(clippy::needless_range_loop)]
async fn qk_layernorm_matches_cpu() {
    let mut worst = 0.0f32;
    for &(rows, c, h) in &[(1, 4, 1), (7, 12, 3), (33, 64, 4), (65, 32, 1)] {
        let hs = c / h;
        let seed = (rows * 100 + c) as u64 + 5;
        let mut inp = random(rows * 3 * c, seed, 2.0);
        for (r, row) in inp.chunks_mut(3 * c).enumerate() {
            row.iter_mut().for_each(|v| *v += (r % 3) as f32 - 1.0);
        }
        let (qw, qb, kw, kb) = (
            random(hs, seed + 1, 1.5),
            random(hs, seed + 2, 1.5),
            random(hs, seed + 3, 1.5),
            random(hs, seed + 4, 1.5),
        );
        let (params, at) = packed(&[&qw, &qb, &kw, &kb]);
        let (q, k) = (launch::NormAt { weight: at[0], bias: at[1] }, launch::NormAt { weight: at[2], bias: at[3] });
        // The twin: segment by segment.
        let mut want = inp.clone();
        let mut stats = Vec::new();
        for r in 0..rows {
            for j in 0..2 * h {
                let base = r * 3 * c + j * hs;
                let (w, b) = if j < h { (&qw, &qb) } else { (&kw, &kb) };
                let (mut m, mut s) = ([0.0f32], [0.0f32]);
                ops::layernorm_forward(&mut want[base..base + hs], &mut m, &mut s, &inp[base..base + hs], w, b, 1, hs);
                stats.push((m[0], s[0]));
            }
        }
        let nan = |n: usize| f32_bytes(&vec![f32::NAN; n]);
        let l = launch::qk_layernorm_forward(rows, c, h, q, k);
        let args = [
            Arg::Out(&nan(rows * 3 * c)),
            Arg::Out(&nan(rows * 2 * h)),
            Arg::Out(&nan(rows * 2 * h)),
            Arg::In(&f32_bytes(&inp)),
            Arg::In(&f32_bytes(&params)),
        ];
        let out = run_launch(&l, args).await;
        let (got, mean, rstd) = (to_f32(&out[0]), to_f32(&out[1]), to_f32(&out[2]));
        for i in 0..want.len() {
            let tol = 1e-6 * (1.0 + want[i].abs()) * 4.0;
            assert!((got[i] - want[i]).abs() <= tol, "rows {rows} c {c} h {h}: y[{i}] {} vs {}", got[i], want[i]);
            worst = worst.max((got[i] - want[i]).abs() / tol);
        }
        for (s, &(m, r)) in stats.iter().enumerate() {
            assert!((mean[s] - m).abs() <= 1e-6 * (1.0 + m.abs()) && (rstd[s] - r).abs() <= 1e-6 * r, "segment {s}");
        }

        // Backward: ∂L/∂x (v passes through) and the two LayerNorms' dγ, dβ.
        let dout = random(rows * 3 * c, seed + 6, 1.0);
        let mut want_dx = dout.clone(); // v's part passes through
        let grads0: Vec<Vec<f32>> = (0..4).map(|i| random(hs, seed + 10 + i, 0.5)).collect();
        let mut g = grads0.clone();
        for r in 0..rows {
            for j in 0..2 * h {
                let base = r * 3 * c + j * hs;
                let s = r * 2 * h + j;
                let (w, gi) = if j < h { (&qw, 0) } else { (&kw, 2) };
                want_dx[base..base + hs].fill(0.0);
                let (head, tail) = g.split_at_mut(gi + 1);
                let (dw, db) = (&mut head[gi], &mut tail[0]);
                let (m, rs) = ([stats[s].0], [stats[s].1]);
                let (x, dy) = (&inp[base..base + hs], &dout[base..base + hs]);
                ops::layernorm_backward(&mut want_dx[base..base + hs], dw, db, dy, x, w, &m, &rs, 1, hs);
            }
        }
        let l = launch::qk_layernorm_backward_input(rows, c, h, q, k);
        let args = [
            Arg::Out(&nan(rows * 3 * c)),
            Arg::In(&f32_bytes(&dout)),
            Arg::In(&f32_bytes(&inp)),
            Arg::In(&f32_bytes(&params)),
            Arg::In(&f32_bytes(&mean)),
            Arg::In(&f32_bytes(&rstd)),
        ];
        let got_dx = to_f32(&run_launch(&l, args).await[0]);
        for i in 0..want_dx.len() {
            let tol = 4e-6 * (1.0 + want_dx[i].abs()) * (hs as f32).sqrt();
            assert!(
                (got_dx[i] - want_dx[i]).abs() <= tol,
                "rows {rows} c {c} h {h}: dx[{i}] {} vs {}",
                got_dx[i],
                want_dx[i]
            );
        }
        let (grads, gat) = packed(&[&grads0[0], &grads0[1], &grads0[2], &grads0[3]]);
        let gq = launch::NormAt { weight: gat[0], bias: gat[1] };
        let gk = launch::NormAt { weight: gat[2], bias: gat[3] };
        let l = launch::qk_layernorm_backward_params(rows, c, h, gq, gk);
        let args = [
            Arg::Out(&f32_bytes(&grads)),
            Arg::In(&f32_bytes(&dout)),
            Arg::In(&f32_bytes(&inp)),
            Arg::In(&f32_bytes(&mean)),
            Arg::In(&f32_bytes(&rstd)),
        ];
        let got_g = unpacked(&to_f32(&run_launch(&l, args).await[0]), &gat, &[hs; 4]);
        for (t, (gg, wg)) in got_g.iter().zip(&g).enumerate() {
            for e in 0..hs {
                let tol = 1e-6 * (rows * h) as f32 * (1.0 + wg[e].abs());
                assert!((gg[e] - wg[e]).abs() <= tol, "rows {rows} c {c} h {h}: grad {t}[{e}] {} vs {}", gg[e], wg[e]);
            }
        }
    }
    println!("qk_layernorm: the worst forward error is {worst:.3} of the bound");
}
gpu_common::twin_test!(qk_layernorm_matches_cpu);
