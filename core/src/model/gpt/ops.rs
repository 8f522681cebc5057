//! The GPT's ops, one `_forward`/`_backward` pair each (llm.c's
//! `train_gpt2.c` structure, nanoGPT's `model.py` semantics with
//! `bias=True`, `dropout=0`, in PyTorch's definitions). B batch, T context,
//! C width, H heads of `hs = C/H`, V vocabulary; every tensor row-major,
//! activations (B, T, ·) stored as (B·T) rows. Backward functions add into
//! their parameters' gradients (`+=`), as gradients accumulate over a
//! step's micro-batches and over a tensor's several uses (a tied head), and
//! into their inputs' gradients, except `matmul_backward`, which writes it.
//!
//! Summation orders (what a GPU twin must state its tolerance against):
//! the linear layers are the MLP's `dense_forward`/`dense_backward`, with
//! their orders;
//! every dot product and every sum over a row runs from index 0 upwards in
//! one f32 accumulator; sums over rows (weight and bias gradients) run over
//! rows in order, row 0 first.

use crate::model::wide::widest;
use crate::model::{dense_backward, dense_forward};
use crate::model::{gemm, gemm_from, Lhs, Start};
use math::{erf, erf_and_gauss, exp};

pub mod math;

/// x[b, t] = wte[inp[b, t]] + wpe[t]: `out` (B·T, C).
pub fn encoder_forward(out: &mut [f32], inp: &[u32], wte: &[f32], wpe: &[f32], t: usize, c: usize) {
    for (row, &token) in inp.iter().enumerate() {
        let (tok, pos) = (&wte[token as usize * c..][..c], &wpe[(row % t) * c..][..c]);
        for ((o, &a), &p) in out[row * c..][..c].iter_mut().zip(tok).zip(pos) {
            *o = a + p;
        }
    }
}

/// ∂L/∂wte[v] = Σ over rows whose token is v of ∂L/∂x[row];
/// ∂L/∂wpe[p] = Σ over rows at position p of ∂L/∂x[row].
pub fn encoder_backward(dwte: &mut [f32], dwpe: &mut [f32], dout: &[f32], inp: &[u32], t: usize, c: usize) {
    for (row, &token) in inp.iter().enumerate() {
        let d = &dout[row * c..][..c];
        for (w, &g) in dwte[token as usize * c..][..c].iter_mut().zip(d) {
            *w += g;
        }
        for (w, &g) in dwpe[(row % t) * c..][..c].iter_mut().zip(d) {
            *w += g;
        }
    }
}

/// Rows whose per-row sums run side by side in the LayerNorms: each row
/// still sums from index 0 upwards in its own accumulator (the same bits),
/// but GROUP independent additions are in flight instead of one.
const GROUP: usize = 8;

/// LayerNorm over the last dimension (PyTorch: biased variance, eps 1e-5):
/// y = (x − μ)·r·w + b with r = 1/√(σ² + eps). Keeps μ and r per row for
/// backward. `rows` rows of `c`.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // rows side by side by index
pub fn layernorm_forward(
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    rows: usize,
    c: usize,
) {
    const EPS: f32 = 1e-5;
    for r0 in (0..rows).step_by(GROUP) {
        let g = GROUP.min(rows - r0);
        let x = |j: usize| &inp[(r0 + j) * c..][..c];
        let mut m = [0.0f32; GROUP];
        for i in 0..c {
            for j in 0..g {
                m[j] += x(j)[i];
            }
        }
        let mut v = [0.0f32; GROUP];
        for j in 0..g {
            m[j] /= c as f32;
        }
        for i in 0..c {
            for j in 0..g {
                let d = x(j)[i] - m[j];
                v[j] += d * d;
            }
        }
        for j in 0..g {
            let s = 1.0 / (v[j] / c as f32 + EPS).sqrt();
            let (xj, r) = (x(j), r0 + j);
            for (i, o) in out[r * c..][..c].iter_mut().enumerate() {
                *o = (xj[i] - m[j]) * s * weight[i] + bias[i];
            }
            mean[r] = m[j];
            rstd[r] = s;
        }
    }
}

/// With n = (x − μ)·r and g = w ⊙ ∂L/∂y per row:
/// ∂L/∂x = r·(g − mean(g) − n·mean(g ⊙ n)); ∂L/∂w += Σ_rows n ⊙ ∂L/∂y;
/// ∂L/∂b += Σ_rows ∂L/∂y.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    rows: usize,
    c: usize,
) {
    for r0 in (0..rows).step_by(GROUP) {
        let g = GROUP.min(rows - r0);
        let (mut g_mean, mut gn_mean) = ([0.0f32; GROUP], [0.0f32; GROUP]);
        for i in 0..c {
            for j in 0..g {
                let r = r0 + j;
                let (x, dy) = (inp[r * c + i], dout[r * c + i]);
                let gi = weight[i] * dy;
                g_mean[j] += gi;
                gn_mean[j] += gi * (x - mean[r]) * rstd[r];
            }
        }
        for j in 0..g {
            let r = r0 + j;
            let (x, dy) = (&inp[r * c..][..c], &dout[r * c..][..c]);
            let (m, s) = (mean[r], rstd[r]);
            let (g_mean, gn_mean) = (g_mean[j] / c as f32, gn_mean[j] / c as f32);
            let dx = &mut dinp[r * c..][..c];
            for i in 0..c {
                let n = (x[i] - m) * s;
                dbias[i] += dy[i];
                dweight[i] += n * dy[i];
                dx[i] += (weight[i] * dy[i] - g_mean - n * gn_mean) * s;
            }
        }
    }
}

/// nn.Linear: y = x·Wᵀ + b, `out` (rows, oc), `inp` (rows, c), `weight`
/// (oc, c) as PyTorch stores it, `bias` (oc) or none (an untied head). The
/// MLP's `dense_forward` is this op (its sums in the same order, SIMD over
/// the outputs): the two model kinds share it.
pub fn matmul_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    c: usize,
    oc: usize,
) {
    match bias {
        Some(b) => dense_forward(out, inp, weight, b, rows, c, oc),
        None => dense_forward(out, inp, weight, &vec![0.0; oc], rows, c, oc),
    }
}

/// ∂L/∂x[r] = Σ_o ∂L/∂y[r, o]·W[o] (overwritten); ∂L/∂W[o] += Σ_r
/// ∂L/∂y[r, o]·x[r]; ∂L/∂b[o] += Σ_r ∂L/∂y[r, o]. `dinp` None where the
/// input needs no gradient. The MLP's `dense_backward`, shared.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    dinp: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    rows: usize,
    c: usize,
    oc: usize,
) {
    match dbias {
        Some(db) => dense_backward(dinp, dweight, db, dout, inp, weight, rows, c, oc),
        None => dense_backward(dinp, dweight, &mut vec![0.0; oc], dout, inp, weight, rows, c, oc),
    }
}

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

/// ln in f32 from the `libm` crate (musl's, in Rust, under 1 ulp), not the
/// platform's: glibc's `logf` natively and compiler-builtins' in the
/// browser may differ in a last bit, and the engine must give the same
/// bits in both (core/tests/gpt_bits). Once per row, so scalar is cheap.
fn logf(x: f32) -> f32 {
    libm::logf(x)
}

widest! {
    /// Exact GELU (`nn.GELU()`, approximate="none"): y = x·Φ(x) with
    /// Φ(x) = (1 + erf(x/√2))/2, erf from `math` (as PyTorch's vectorised
    /// CPU kernel computes it).
    pub fn gelu_forward(out: &mut [f32], inp: &[f32]) {
        for (y, &x) in out.iter_mut().zip(inp) {
            *y = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
        }
    }
}

widest! {
    /// y' = Φ(x) + x·φ(x), φ(x) = exp(−x²/2)/√(2π) = exp(−z²)/√(2π) with
    /// z = x/√2: the exp that erf(z) takes (`math::erf_and_gauss`).
    pub fn gelu_backward(dinp: &mut [f32], inp: &[f32], dout: &[f32]) {
        const INV_SQRT_2PI: f32 = 0.398_942_3;
        for ((g, &x), &d) in dinp.iter_mut().zip(inp).zip(dout) {
            let (erf, gauss) = erf_and_gauss(x * std::f32::consts::FRAC_1_SQRT_2);
            let cdf = 0.5 * (1.0 + erf);
            let pdf = gauss * INV_SQRT_2PI;
            *g += (cdf + x * pdf) * d;
        }
    }
}

widest! {
    /// x ← exp(x − shift), elementwise (softmax's and the cross-entropy's
    /// exponentials; their sums run apart, in order).
    fn exp_shifted(x: &mut [f32], shift: f32) {
        for v in x.iter_mut() {
            *v = exp(*v - shift);
        }
    }
}

/// y = a + b.
pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    for ((y, &x1), &x2) in out.iter_mut().zip(a).zip(b) {
        *y = x1 + x2;
    }
}

/// ∂L/∂a += ∂L/∂y; ∂L/∂b += ∂L/∂y.
pub fn residual_backward(da: &mut [f32], db: &mut [f32], dout: &[f32]) {
    for ((ga, gb), &d) in da.iter_mut().zip(db.iter_mut()).zip(dout) {
        *ga += d;
        *gb += d;
    }
}

/// Mean cross-entropy over `rows` rows of `v` logits and, beside it, the
/// z-loss mean(logsumexp²) (PaLM): (cross-entropy, z-loss). Keeps each
/// row's logsumexp in `lse` for backward. The objective is ce + c·z; the
/// loss reported is ce.
pub fn cross_entropy_forward(lse: &mut [f32], logits: &[f32], targets: &[u32], rows: usize, v: usize) -> (f32, f32) {
    let (mut ce, mut z) = (0.0f32, 0.0f32);
    let mut e = vec![0.0f32; v];
    for r in 0..rows {
        let x = &logits[r * v..][..v];
        let max = x.iter().fold(f32::NEG_INFINITY, |m, &xi| m.max(xi));
        e.copy_from_slice(x);
        exp_shifted(&mut e, max);
        let sum = e.iter().fold(0.0f32, |s, &ei| s + ei);
        let l = max + logf(sum);
        lse[r] = l;
        ce += l - x[targets[r] as usize];
        z += l * l;
    }
    (ce / rows as f32, z / rows as f32)
}

/// With p = softmax(x) per row and the objective scaled by `scale` (1/rows
/// of the mean, times 1/k for k micro-batches):
/// ∂/∂x_i [lse − x_target + c·lse²] = p_i − δ_i,target + 2c·lse·p_i.
#[allow(clippy::too_many_arguments)]
pub fn cross_entropy_backward(
    dlogits: &mut [f32],
    logits: &[f32],
    lse: &[f32],
    targets: &[u32],
    rows: usize,
    v: usize,
    z_loss: f32,
    scale: f32,
) {
    let mut e = vec![0.0f32; v];
    for r in 0..rows {
        let (x, g) = (&logits[r * v..][..v], &mut dlogits[r * v..][..v]);
        let l = lse[r];
        let factor = 1.0 + 2.0 * z_loss * l;
        e.copy_from_slice(x);
        exp_shifted(&mut e, l);
        for (i, (gi, &p)) in g.iter_mut().zip(&e).enumerate() {
            let target = if i == targets[r] as usize { 1.0 } else { 0.0 };
            *gi += (p * factor - target) * scale;
        }
    }
}

#[cfg(test)]
mod tests;
