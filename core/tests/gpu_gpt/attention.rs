//! Attention's kernels against their twins: forward and backward, both
//! variants of the query rows' half.

use super::gpu_common::{self, random, run_launch};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::model::gpt::ops;

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
