//! Pooling over a batch of images in (C, H, W) order: PyTorch's
//! `F.max_pool2d` and `F.avg_pool2d` (no padding, floor mode), each a
//! `_forward` / `_backward` pair. Max pooling sends the gradient to each
//! window's first maximum in row-major order (or its last NaN), as
//! PyTorch's CPU kernel; its common windows (2 × 2 and 3 × 3, moved by
//! their size) run a row of outputs at a time, vectorised, with the same
//! results (`model::conv`'s tests hold them to the plain loop).

use super::wide::widest;
use crate::experiment::out_side;

/// A pooling window: `kernel` × `kernel`, moved by `stride`, over `c`
/// channels of `h` × `w` (no padding, floor mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2d {
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub kernel: usize,
    pub stride: usize,
}

impl Pool2d {
    pub fn out_h(&self) -> usize {
        out_side(self.h, self.kernel, self.stride, 0).unwrap_or(0)
    }

    pub fn out_w(&self) -> usize {
        out_side(self.w, self.kernel, self.stride, 0).unwrap_or(0)
    }

    pub fn in_len(&self) -> usize {
        self.c * self.h * self.w
    }

    pub fn out_len(&self) -> usize {
        self.c * self.out_h() * self.out_w()
    }
}

/// Calls `each(out_index, window_start)` for every output of a batch, in
/// order; a window's element (ki, kj) is at window_start + ki·W + kj.
fn windows(batch: usize, s: &Pool2d, mut each: impl FnMut(usize, usize)) {
    let (oh, ow) = (s.out_h(), s.out_w());
    let mut out = 0;
    for plane in 0..batch * s.c {
        for oy in 0..oh {
            for ox in 0..ow {
                each(out, plane * s.h * s.w + oy * s.stride * s.w + ox * s.stride);
                out += 1;
            }
        }
    }
}

/// out = the maximum of each window, and `argmax` the index in x of the
/// value taken: the first maximum in row-major order, or the last NaN (as
/// PyTorch's CPU kernel: a value replaces the maximum when it is greater or
/// NaN).
pub fn max_pool2d_forward(out: &mut [f32], argmax: &mut [u32], x: &[f32], batch: usize, s: &Pool2d) {
    // Window by window, each in row-major order; the common shapes get a
    // kernel known at compile time (unrolled, no bounds checks), the same
    // compares in the same order.
    match (s.kernel, s.stride) {
        (2, 2) => max_pool_2(out, argmax, x, batch, s),
        (3, 3) => max_pool_3(out, argmax, x, batch, s),
        _ => max_pool_any(out, argmax, x, batch, s),
    }
}

/// `max_pool2d_forward` for a K × K window moved by K (no overlap), the
/// common case, a row of outputs at a time: with K known, the loop over a
/// row's outputs vectorises (its loads are K interleaved streams), and the
/// compares and selects are vector blends, not branches (where the maximum
/// lies is data: a branch on it mispredicts about every other compare).
/// Every window still sees its elements in row-major order, so each lane
/// computes what the scalar loop would.
#[inline(always)]
fn max_pool_k<const K: usize>(out: &mut [f32], argmax: &mut [u32], x: &[f32], batch: usize, s: &Pool2d) {
    let (oh, ow, w) = (s.out_h(), s.out_w(), s.w);
    let plane_len = s.h * s.w;
    let mut o = 0;
    for plane in 0..batch * s.c {
        let base = plane * plane_len;
        let p = &x[base..base + plane_len];
        for oy in 0..oh {
            let top = oy * K * w;
            let rows: [&[f32]; K] = std::array::from_fn(|ki| &p[top + ki * w..top + ki * w + ow * K]);
            let (out, argmax) = (&mut out[o..o + ow], &mut argmax[o..o + ow]);
            let first = (base + top) as u32;
            for ox in 0..ow {
                let (mut best, mut at) = (f32::NEG_INFINITY, 0u32);
                for (ki, row) in rows.iter().enumerate() {
                    for kj in 0..K {
                        let v = row[ox * K + kj];
                        let take = (v > best) | v.is_nan();
                        best = if take { v } else { best };
                        at = if take { (ki * w + kj) as u32 } else { at };
                    }
                }
                out[ox] = best;
                argmax[ox] = first + (ox * K) as u32 + at;
            }
            o += ow;
        }
    }
}

widest! {
    /// `max_pool_k` for 2 × 2 windows, as wide as the CPU allows.
    fn max_pool_2(out: &mut [f32], argmax: &mut [u32], x: &[f32], batch: usize, s: &Pool2d) {
        max_pool_k::<2>(out, argmax, x, batch, s)
    }
}

widest! {
    /// `max_pool_k` for 3 × 3 windows, as wide as the CPU allows.
    fn max_pool_3(out: &mut [f32], argmax: &mut [u32], x: &[f32], batch: usize, s: &Pool2d) {
        max_pool_k::<3>(out, argmax, x, batch, s)
    }
}

/// `max_pool2d_forward` for any window.
pub(super) fn max_pool_any(out: &mut [f32], argmax: &mut [u32], x: &[f32], batch: usize, s: &Pool2d) {
    windows(batch, s, |o, first| {
        let (mut best, mut at) = (f32::NEG_INFINITY, first);
        for ki in 0..s.kernel {
            for kj in 0..s.kernel {
                let i = first + ki * s.w + kj;
                let v = x[i];
                let take = (v > best) | v.is_nan();
                best = if take { v } else { best };
                at = if take { i } else { at };
            }
        }
        out[o] = best;
        argmax[o] = at as u32;
    });
}

/// dx = 0, then each output's gradient added at its `argmax`, outputs in
/// order (overlapping windows that chose the same input add up).
pub fn max_pool2d_backward(dx: &mut [f32], dout: &[f32], argmax: &[u32], batch: usize, s: &Pool2d) {
    dx[..batch * s.in_len()].fill(0.0);
    for (&d, &i) in dout[..batch * s.out_len()].iter().zip(argmax) {
        dx[i as usize] += d;
    }
}

/// out = each window's sum, row-major from 0, divided by K² (PyTorch's
/// `sum / divide_factor`).
pub fn avg_pool2d_forward(out: &mut [f32], x: &[f32], batch: usize, s: &Pool2d) {
    let area = (s.kernel * s.kernel) as f32;
    windows(batch, s, |o, at| {
        let mut sum = 0.0f32;
        for ki in 0..s.kernel {
            for kj in 0..s.kernel {
                sum += x[at + ki * s.w + kj];
            }
        }
        out[o] = sum / area;
    });
}

/// dx = 0, then dout / K² added to each element of its window, outputs in
/// order, each window row-major.
pub fn avg_pool2d_backward(dx: &mut [f32], dout: &[f32], batch: usize, s: &Pool2d) {
    let area = (s.kernel * s.kernel) as f32;
    dx[..batch * s.in_len()].fill(0.0);
    windows(batch, s, |o, at| {
        let share = dout[o] / area;
        for ki in 0..s.kernel {
            for kj in 0..s.kernel {
                dx[at + ki * s.w + kj] += share;
            }
        }
    });
}
