//! The LayerNorm kernels against their twins: the blocks' LayerNorm
//! forward and backward, and the q/k LayerNorm of each head.

use super::gpu_common::{self, random, run_launch, SIZES};
use super::{packed, unpacked};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::model::gpt::ops;

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
