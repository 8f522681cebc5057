//! Causal self-attention, forward and backward (llm.c's
//! `attention_forward`/`attention_backward`), its products as `gemm`s in
//! blocks of query rows that skip the causal mask's zeros.

use super::exp_shifted;
use crate::model::{gemm, gemm_from, Lhs, Start};

/// Causal self-attention (`F.scaled_dot_product_attention(q, k, v,
/// is_causal=True)`): `inp` (B·T, 3C) holds q, k, v side by side, each C
/// wide as H heads of hs; for each head, a = softmax(q·kᵀ/√hs) over the
/// positions up to the query's, y = a·v. `att` (B, H, T, T) keeps the
/// probabilities for backward (zero above the diagonal); `out` (B·T, C)
/// has the heads side by side.
///
/// Per (b, h), in blocks of `CAUSAL` query rows, each against the keys up
/// to its last row (the causal mask skips the rest): the scores are a
/// `gemm`, S = Q·Kᵀ over a transposed copy of K (a transient (hs, T)
/// buffer), each summed over i = 0..hs in order from 0, then times 1/√hs.
/// Softmax per row: the max, exp(s − max) (`math::exp`), their sum left to
/// right, each divided by the sum. Y = A·V is a `gemm` from 0, summed over
/// t2 = 0.. in order up to the block's last row (the terms past a row's
/// own position are exact zeros and change no sum).
pub fn attention_forward(out: &mut [f32], att: &mut [f32], inp: &[f32], b: usize, t: usize, c: usize, h: usize) {
    let (hs, c3) = (c / h, 3 * c);
    let scale = 1.0 / (hs as f32).sqrt();
    let mut kt = vec![0.0f32; hs * t];
    for bi in 0..b {
        let rows = &inp[bi * t * c3..(bi + 1) * t * c3];
        for hi in 0..h {
            transpose_head(&mut kt, rows, c + hi * hs, t, hs, c3);
            let s = &mut att[(bi * h + hi) * t * t..][..t * t];
            for (r0, m) in causal_blocks(t) {
                let q = Lhs { data: &rows[r0 * c3 + hi * hs..], row_stride: c3, k_stride: 1 };
                gemm_from(Start::Zero, &mut s[r0 * t..], t, q, &kt, t, m, r0 + m, hs);
            }
            for (ti, a) in s.chunks_exact_mut(t).enumerate() {
                let mut max = f32::NEG_INFINITY;
                for v in &mut a[..=ti] {
                    *v *= scale;
                    max = max.max(*v);
                }
                exp_shifted(&mut a[..=ti], max);
                let sum = a[..=ti].iter().fold(0.0f32, |s, &v| s + v);
                for v in &mut a[..=ti] {
                    *v /= sum;
                }
                a[ti + 1..].fill(0.0);
            }
            let y = &mut out[bi * t * c + hi * hs..];
            for (r0, m) in causal_blocks(t) {
                let a = Lhs { data: &s[r0 * t..], row_stride: t, k_stride: 1 };
                gemm_from(Start::Zero, &mut y[r0 * c..], c, a, &rows[2 * c + hi * hs..], c3, m, hs, r0 + m);
            }
        }
    }
}

/// Query rows per block of the causal attention's products: a multiple of
/// every `gemm` blocking's rows.
const CAUSAL: usize = 8;

/// (first row, rows) of each block of `CAUSAL` rows of T.
fn causal_blocks(t: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..t).step_by(CAUSAL).map(move |r0| (r0, CAUSAL.min(t - r0)))
}

/// dst (hs, T) = the head's columns `col..col + hs` of `rows` (T rows of
/// `stride`), transposed.
fn transpose_head(dst: &mut [f32], rows: &[f32], col: usize, t: usize, hs: usize, stride: usize) {
    for t2 in 0..t {
        for (i, &x) in rows[t2 * stride + col..][..hs].iter().enumerate() {
            dst[i * t + t2] = x;
        }
    }
}

/// Scratch `attention_backward` needs: T² + hs·T floats.
pub fn attention_scratch(t: usize, hs: usize) -> usize {
    t * t + hs * t
}

/// Per query row (b, h, t) with probabilities a and ∂L/∂y = dy:
/// ∂L/∂a[t2] = dy·v[t2]; ∂L/∂v[t2] += a[t2]·dy;
/// softmax: ∂L/∂s[t2] = a[t2]·(∂L/∂a[t2] − Σ_t3 a[t3]·∂L/∂a[t3]) (the
/// Jacobian a_i(δ_ij − a_j) applied in O(T), not as llm.c's T² loop);
/// scores s = q·k/√hs: ∂L/∂q += Σ_t2 ∂L/∂s[t2]·k[t2]/√hs,
/// ∂L/∂k[t2] += ∂L/∂s[t2]·q/√hs. `scratch` holds `attention_scratch`
/// floats.
///
/// Per (b, h), as `gemm`s in blocks of `CAUSAL` rows (the causal mask
/// skips the products of the terms it zeroes): dA = dY·Vᵀ (each summed
/// over i in order from 0); dV += Aᵀ·dY and dK += dSᵀ·Q (over the queries
/// in order, from the block's first row: the earlier queries' terms are
/// zero), dQ += dS·K (over the keys in order); Σ a·da left to right per row.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    dinp: &mut [f32],
    scratch: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    att: &[f32],
    b: usize,
    t: usize,
    c: usize,
    h: usize,
) {
    let (hs, c3) = (c / h, 3 * c);
    let scale = 1.0 / (hs as f32).sqrt();
    let (ds, vt) = scratch[..attention_scratch(t, hs)].split_at_mut(t * t);
    for bi in 0..b {
        let rows = &inp[bi * t * c3..(bi + 1) * t * c3];
        let drows = &mut dinp[bi * t * c3..(bi + 1) * t * c3];
        let dy = &dout[bi * t * c..(bi + 1) * t * c];
        for hi in 0..h {
            let a = &att[(bi * h + hi) * t * t..][..t * t];
            transpose_head(vt, rows, 2 * c + hi * hs, t, hs, c3);
            for (r0, m) in causal_blocks(t) {
                // dA = dY·Vᵀ into ds, the block's rows against keys 0..r0 + m.
                let dy_h = Lhs { data: &dy[r0 * c + hi * hs..], row_stride: c, k_stride: 1 };
                gemm_from(Start::Zero, &mut ds[r0 * t..], t, dy_h, vt, t, m, r0 + m, hs);
                // dV += Aᵀ·dY for keys r0..r0 + m, over queries r0..T.
                let a_t = Lhs { data: &a[r0 * t + r0..], row_stride: 1, k_stride: t };
                let dv = &mut drows[r0 * c3 + 2 * c + hi * hs..];
                gemm(dv, c3, a_t, &dy[r0 * c + hi * hs..], c, m, hs, t - r0);
            }
            // dS = A ⊙ (dA − Σ a·dA) / √hs, row by row, in place.
            for (ti, (d, a)) in ds.chunks_exact_mut(t).zip(a.chunks_exact(t)).enumerate() {
                let mut weighted = 0.0f32;
                for t2 in 0..=ti {
                    weighted += a[t2] * d[t2];
                }
                for t2 in 0..=ti {
                    d[t2] = a[t2] * (d[t2] - weighted) * scale;
                }
                d[ti + 1..].fill(0.0);
            }
            for (r0, m) in causal_blocks(t) {
                // dQ += dS·K for queries r0..r0 + m, over keys 0..r0 + m.
                let ds_rows = Lhs { data: &ds[r0 * t..], row_stride: t, k_stride: 1 };
                let dq = &mut drows[r0 * c3 + hi * hs..];
                gemm(dq, c3, ds_rows, &rows[c + hi * hs..], c3, m, hs, r0 + m);
                // dK += dSᵀ·Q for keys r0..r0 + m, over queries r0..T.
                let ds_t = Lhs { data: &ds[r0 * t + r0..], row_stride: 1, k_stride: t };
                let dk = &mut drows[r0 * c3 + c + hi * hs..];
                gemm(dk, c3, ds_t, &rows[r0 * c3 + hi * hs..], c3, m, hs, t - r0);
            }
        }
    }
}
