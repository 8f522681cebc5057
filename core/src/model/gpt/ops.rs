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
use math::{erf, erf_and_gauss, exp};

mod attention;
pub mod math;

pub use attention::{attention_backward, attention_forward, attention_scratch};

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
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)] // rows side by side by index
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
        let (mut m, mut s) = ([0.0f32; GROUP], [0.0f32; GROUP]);
        m[..g].copy_from_slice(&mean[r0..r0 + g]);
        s[..g].copy_from_slice(&rstd[r0..r0 + g]);
        let (x, dy) = (&inp[r0 * c..(r0 + g) * c], &dout[r0 * c..(r0 + g) * c]);
        for (i, &w) in weight[..c].iter().enumerate() {
            for j in 0..g {
                let gi = w * dy[j * c + i];
                g_mean[j] += gi;
                gn_mean[j] += gi * (x[j * c + i] - m[j]) * s[j];
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
