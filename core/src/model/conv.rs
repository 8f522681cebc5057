//! Convolution over a batch of images, each row one image in (C, H, W)
//! order (`x.view(N, C, H, W)`): PyTorch's `nn.Conv2d` (a square kernel, a
//! stride, zero padding), as a `_forward` / `_backward` pair. The pools
//! (`F.max_pool2d`, `F.avg_pool2d`) are in `model::pool`, re-exported here
//! beside it.
//!
//! The convolution is lowered to the one matrix product (`gemm`), image by
//! image, through a patch matrix (im2col): for image b,
//!
//!   z_b (F, P) = bias + W (F, C·K·K) · cols_b (C·K·K, P),
//!
//! P = OH·OW the output positions. So every z[b, f, p] is summed as
//! bias[f] + Σ W[f, c, ki, kj]·x[b, c, oy·S + ki − pad, ox·S + kj − pad]
//! over (c, ki, kj) in row-major order, the padding's zeros included as
//! terms; `conv2d_forward_reference` is that sum written out, and the tests
//! hold the two equal bit for bit. The order depends on the shape alone,
//! never on the CPU's vector width, so natively and in the browser the bits
//! are the same. The patch matrix costs C·K·K·P floats, one image at a
//! time (`Conv2d::scratch_floats`); backward builds it again rather than
//! keeping one per image.

use super::gemm::{gemm, gemm_from, Lhs, Start};
#[cfg(test)]
use super::pool::max_pool_any;
pub use super::pool::{avg_pool2d_backward, avg_pool2d_forward, max_pool2d_backward, max_pool2d_forward, Pool2d};
pub use crate::experiment::{layer_output, out_side};

/// A convolution's shape: `c_in` channels of `h` × `w` in, `filters`
/// channels out, a `kernel` × `kernel` window moved by `stride`, over the
/// image with `padding` zeros on every side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub filters: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Conv2d {
    /// Output height (the shape is assumed valid: `out_side` is Some).
    pub fn out_h(&self) -> usize {
        out_side(self.h, self.kernel, self.stride, self.padding).unwrap_or(0)
    }

    pub fn out_w(&self) -> usize {
        out_side(self.w, self.kernel, self.stride, self.padding).unwrap_or(0)
    }

    /// Output positions per image, P = OH·OW.
    pub fn positions(&self) -> usize {
        self.out_h() * self.out_w()
    }

    /// Weights per filter, C·K·K (the patch matrix's rows).
    pub fn patch(&self) -> usize {
        self.c_in * self.kernel * self.kernel
    }

    /// Floats of one input image, C·H·W.
    pub fn in_len(&self) -> usize {
        self.c_in * self.h * self.w
    }

    /// Floats of one output image, F·P.
    pub fn out_len(&self) -> usize {
        self.filters * self.positions()
    }

    /// The scratch backward needs (forward, the first C·K·K·P of it): the
    /// patch matrix of one image and ∂cols (C·K·K·P each), dzᵀ of one
    /// image (P·F) and ∂Wᵀ (C·K·K·F).
    pub fn scratch_floats(&self) -> usize {
        2 * self.patch() * self.positions() + self.filters * (self.positions() + self.patch())
    }

    /// Multiply-adds of one image's forward (F·C·K·K·P).
    pub fn macs(&self) -> usize {
        self.filters * self.patch() * self.positions()
    }
}

/// The output columns ox whose input column ox·S + kj − pad falls inside
/// 0..w: a range lo..hi (every other column reads padding).
fn inside(kj: usize, s: &Conv2d, ow: usize) -> (usize, usize) {
    // ox·S + kj ≥ pad  ⇔  ox ≥ ⌈(pad − kj)/S⌉;  ox·S + kj − pad < w  ⇔  ox < ⌈(w + pad − kj)/S⌉.
    let lo = s.padding.saturating_sub(kj).div_ceil(s.stride).min(ow);
    let hi = (s.w + s.padding).saturating_sub(kj).div_ceil(s.stride).clamp(lo, ow);
    (lo, hi)
}

/// The patch matrix of one image, (C·K·K, P): row (c, ki, kj), column
/// (oy, ox) holds x[c, oy·S + ki − pad, ox·S + kj − pad], 0 outside.
fn im2col(cols: &mut [f32], x: &[f32], s: &Conv2d) {
    let (oh, ow, k) = (s.out_h(), s.out_w(), s.kernel);
    let p = oh * ow;
    for c in 0..s.c_in {
        let plane = &x[c * s.h * s.w..(c + 1) * s.h * s.w];
        for ki in 0..k {
            for kj in 0..k {
                let row = &mut cols[((c * k + ki) * k + kj) * p..][..p];
                let (lo, hi) = inside(kj, s, ow);
                if s.stride == 1 && ow == s.w {
                    same_size_row(row, plane, s, ki, kj, lo, hi);
                    continue;
                }
                if s.padding > 0 {
                    // The padding's zeros in one pass over the row, not
                    // two short fills per line (a call each).
                    row.fill(0.0);
                }
                for oy in 0..oh {
                    let y = (oy * s.stride + ki).wrapping_sub(s.padding);
                    let out = &mut row[oy * ow..(oy + 1) * ow];
                    if y >= s.h {
                        continue;
                    }
                    let line = &plane[y * s.w..(y + 1) * s.w];
                    let first = lo * s.stride + kj - s.padding;
                    if s.stride == 1 {
                        out[lo..hi].copy_from_slice(&line[first..first + (hi - lo)]);
                    } else {
                        for (v, &xv) in out[lo..hi].iter_mut().zip(line[first..].iter().step_by(s.stride)) {
                            *v = xv;
                        }
                    }
                }
            }
        }
    }
}

/// One row (c, ki, kj) of `im2col` where the output is the input's size
/// (stride 1, 2·pad = K − 1, as ConvNetJS's layers): the row is the plane
/// shifted by (ki − pad)·W + (kj − pad), so its lines are copied in one
/// piece, then the few values that wrapped in from the next or last line
/// (the lo columns on the left and the W − hi on the right) set to 0.
/// The same values as the line-by-line copy.
fn same_size_row(row: &mut [f32], plane: &[f32], s: &Conv2d, ki: usize, kj: usize, lo: usize, hi: usize) {
    let (h, w, pad) = (s.h, s.w, s.padding);
    // Lines whose image row y = oy + ki − pad is inside.
    let (top, bottom) = (pad.saturating_sub(ki).min(h), (h + pad).saturating_sub(ki).min(h));
    row[..top * w].fill(0.0);
    row[bottom * w..].fill(0.0);
    if top >= bottom || lo >= hi {
        row[top * w..bottom * w].fill(0.0);
        return;
    }
    // From the first inside value of line `top` to the last of `bottom − 1`.
    let (from, to) = (top * w + lo, (bottom - 1) * w + hi);
    let at = (top + ki - pad) * w + lo + kj - pad;
    row[from..to].copy_from_slice(&plane[at..at + (to - from)]);
    row[top * w..from].fill(0.0);
    row[to..bottom * w].fill(0.0);
    for line in row[top * w..bottom * w].chunks_exact_mut(w) {
        for v in &mut line[..lo] {
            *v = 0.0;
        }
        for v in &mut line[hi..] {
            *v = 0.0;
        }
    }
}

/// z (B, F, OH, OW) = conv2d(x (B, C, H, W), weight (F, C, K, K)) + bias
/// (F), in the order of the module doc. `scratch` holds at least
/// `Conv2d::scratch_floats` floats (reused between calls).
pub fn conv2d_forward(
    z: &mut [f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    batch: usize,
    s: &Conv2d,
    scratch: &mut Vec<f32>,
) {
    let (p, patch, f) = (s.positions(), s.patch(), s.filters);
    if scratch.len() < patch * p {
        scratch.resize(patch * p, 0.0);
    }
    let cols = &mut scratch[..patch * p];
    let w = Lhs { data: weight, row_stride: patch, k_stride: 1 };
    for b in 0..batch {
        im2col(cols, &x[b * s.in_len()..(b + 1) * s.in_len()], s);
        let out = &mut z[b * f * p..(b + 1) * f * p];
        // Each filter's row starts at its bias.
        for (row, &bf) in out.chunks_exact_mut(p.max(1)).zip(bias) {
            row.fill(bf);
        }
        gemm_from(Start::C, out, p, w, cols, p, f, p, patch);
    }
}

/// `conv2d_forward` as the sums of the module doc, written out.
pub fn conv2d_forward_reference(z: &mut [f32], x: &[f32], weight: &[f32], bias: &[f32], batch: usize, s: &Conv2d) {
    let (oh, ow, k) = (s.out_h(), s.out_w(), s.kernel);
    for b in 0..batch {
        let img = &x[b * s.in_len()..];
        for f in 0..s.filters {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = bias[f];
                    for c in 0..s.c_in {
                        for ki in 0..k {
                            for kj in 0..k {
                                let (y, xx) = (
                                    (oy * s.stride + ki).wrapping_sub(s.padding),
                                    (ox * s.stride + kj).wrapping_sub(s.padding),
                                );
                                let v = if y < s.h && xx < s.w { img[(c * s.h + y) * s.w + xx] } else { 0.0 };
                                sum += weight[((f * s.c_in + c) * k + ki) * k + kj] * v;
                            }
                        }
                    }
                    z[((b * s.filters + f) * oh + oy) * ow + ox] = sum;
                }
            }
        }
    }
}

/// Given dz = ∂L/∂z (B, F, OH, OW):
///   dweight += Σ_b dz_b · cols_bᵀ   (F, C·K·K), each element summed over
///                                   (b, oy, ox) in order onto its value;
///   dbias   += Σ_{b, p} dz          (F), summed in order from 0, then added;
///   dx       = the transposed convolution of dz (B, C, H, W), overwritten:
///              ∂cols = Wᵀ·dz_b (each element summed over f in order),
///              scattered onto x's positions in (c, ki, kj) then (oy, ox)
///              order; skipped when `dx` is None (the first layer).
#[allow(clippy::too_many_arguments)]
pub fn conv2d_backward(
    dx: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: &mut [f32],
    dz: &[f32],
    x: &[f32],
    weight: &[f32],
    batch: usize,
    s: &Conv2d,
    scratch: &mut Vec<f32>,
) {
    let (p, patch, f) = (s.positions(), s.patch(), s.filters);
    if scratch.len() < s.scratch_floats() {
        scratch.resize(s.scratch_floats(), 0.0);
    }
    let (cols, rest) = scratch.split_at_mut(patch * p);
    let (dcols, rest) = rest.split_at_mut(patch * p);
    let (dz_t, rest) = rest.split_at_mut(p * f);
    let dw_t = &mut rest[..patch * f];
    // ∂W is accumulated transposed, ∂Wᵀ (C·K·K, F) += cols_b (C·K·K, P) ·
    // dz_bᵀ (P, F): each element still gets its value, then the terms of
    // every (b, oy, ox) in order, one by one; the patch matrix is then
    // read as it is built, row by row.
    transpose(dw_t, dweight, f, patch);
    let mut sums = vec![0.0f32; f];
    let mut dx = dx;
    for b in 0..batch {
        let dz_b = &dz[b * f * p..(b + 1) * f * p];
        im2col(cols, &x[b * s.in_len()..(b + 1) * s.in_len()], s);
        transpose(dz_t, dz_b, f, p);
        let a = Lhs { data: cols, row_stride: p, k_stride: 1 };
        gemm(dw_t, f, a, dz_t, f, patch, f, p);
        // Each filter's bias sum in (oy, ox) order, the filters side by
        // side: a position's F values at once from dz_bᵀ, so the F sums'
        // chains of adds overlap instead of running one after another.
        for row in dz_t.chunks_exact(f.max(1)).take(p) {
            for (sum, &d) in sums.iter_mut().zip(row) {
                *sum += d;
            }
        }
        if let Some(dx) = dx.as_deref_mut() {
            // ∂cols (C·K·K, P) = Wᵀ (C·K·K, F) · dz_b (F, P).
            let wt = Lhs { data: weight, row_stride: 1, k_stride: patch };
            gemm_from(Start::Zero, dcols, p, wt, dz_b, p, patch, p, f);
            col2im(&mut dx[b * s.in_len()..(b + 1) * s.in_len()], dcols, s);
        }
    }
    transpose(dweight, dw_t, patch, f);
    for (db, sum) in dbias[..f].iter_mut().zip(sums) {
        *db += sum;
    }
}

/// out (cols, rows) = the transpose of `from` (rows, cols).
fn transpose(out: &mut [f32], from: &[f32], rows: usize, cols: usize) {
    // Written in order, read down the columns: `rows` (a layer's filters)
    // is small, so its streams are few.
    for (c, line) in out.chunks_exact_mut(rows.max(1)).take(cols).enumerate() {
        for (r, v) in line.iter_mut().enumerate() {
            *v = from[r * cols + c];
        }
    }
}

/// dx (C, H, W) = 0, then += ∂cols[(c, ki, kj), (oy, ox)] at the position
/// it was read from, rows in order, each row's columns in order.
fn col2im(dx: &mut [f32], dcols: &[f32], s: &Conv2d) {
    let (oh, ow, k) = (s.out_h(), s.out_w(), s.kernel);
    let p = oh * ow;
    dx.fill(0.0);
    for c in 0..s.c_in {
        let plane = &mut dx[c * s.h * s.w..(c + 1) * s.h * s.w];
        for ki in 0..k {
            for kj in 0..k {
                let row = &dcols[((c * k + ki) * k + kj) * p..][..p];
                let (lo, hi) = inside(kj, s, ow);
                for oy in 0..oh {
                    let y = (oy * s.stride + ki).wrapping_sub(s.padding);
                    if y >= s.h || lo == hi {
                        continue;
                    }
                    let first = lo * s.stride + kj - s.padding;
                    let line = &mut plane[y * s.w..(y + 1) * s.w];
                    let from = &row[oy * ow + lo..oy * ow + hi];
                    if s.stride == 1 {
                        for (d, &v) in line[first..first + (hi - lo)].iter_mut().zip(from) {
                            *d += v;
                        }
                    } else {
                        for (d, &v) in line[first..].iter_mut().step_by(s.stride).zip(from) {
                            *d += v;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
