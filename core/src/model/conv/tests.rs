//! The convolution and the pools: worked cases, PyTorch's own numbers,
//! the written-out sums bit for bit, and finite-difference checks of every
//! backward (as `gpt::ops::tests`: J = Σ g ⊙ f(x) for a fixed g, central
//! differences with h = 1e-2 summed in f64; accepted
//! |analytic − numeric| ≤ 2e-3 + 1e-2·|numeric|).

use super::*;
use crate::model::gpt::testing::{check, dot, values};

/// Values with few bits (multiples of 1/d), so that every sum below is
/// exact in f32 and PyTorch's numbers are ours whatever its order.
fn dyadic(n: usize, a: usize, m: usize, off: f32, d: f32) -> Vec<f32> {
    (0..n).map(|i| ((i * a) % m) as f32 - off).map(|v| v / d).collect()
}

/// Worked by hand: one 3 × 3 image [[1, 2, 3], [4, 5, 6], [7, 8, 9]], one
/// 2 × 2 filter [[1, 0], [0, −1]], bias 10, stride 1, no padding:
///   z = [[1 − 5, 2 − 6], [4 − 8, 5 − 9]] + 10 = [[6, 6], [6, 6]].
/// With dz = [[1, 0], [0, 2]]: dW[ki, kj] = Σ dz·x at the shifted window
///   = [[1·1 + 2·5, 1·2 + 2·6], [1·4 + 2·8, 1·5 + 2·9]] = [[11, 14], [20, 23]],
/// db = 3, and dx = dz scattered through the filter:
///   dx[0,0] = 1, dx[1,1] = −1 + 2 = 1, dx[2,2] = −2, the rest 0.
#[test]
fn worked_by_hand() {
    let s = Conv2d { c_in: 1, h: 3, w: 3, filters: 1, kernel: 2, stride: 1, padding: 0 };
    let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
    let (w, b) = ([1.0, 0.0, 0.0, -1.0], [10.0]);
    let (mut z, mut scratch) = (vec![0.0; 4], Vec::new());
    conv2d_forward(&mut z, &x, &w, &b, 1, &s, &mut scratch);
    assert_eq!(z, [6.0; 4]);
    let (mut dx, mut dw, mut db) = (vec![9.0; 9], vec![0.0; 4], vec![0.0]);
    conv2d_backward(Some(&mut dx), &mut dw, &mut db, &[1.0, 0.0, 0.0, 2.0], &x, &w, 1, &s, &mut scratch);
    assert_eq!(dw, [11.0, 14.0, 20.0, 23.0]);
    assert_eq!(db, [3.0]);
    assert_eq!(dx, [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -2.0]);
}

#[test]
fn output_sides_follow_pytorch_and_refuse_what_does_not_fit() {
    assert_eq!(out_side(28, 5, 1, 2), Some(28));
    assert_eq!(out_side(14, 3, 3, 0), Some(4)); // ConvNetJS's second pool: ⌊(14 − 3)/3⌋ + 1
    assert_eq!(out_side(5, 3, 2, 1), Some(3));
    assert_eq!(out_side(2, 3, 1, 0), None);
    assert_eq!(out_side(4, 3, 0, 0), None);
    assert_eq!(out_side(usize::MAX, 3, 1, 1), None);
}

const Z: [f32; 36] = [
    -0.4375, 0.8125, -1.0625, -1.9375, -2.0, -0.8125, 0.875, 1.25, 0.8125, -2.03125, 0.09375, -0.0625, 0.46875,
    -1.0625, 2.0, 0.96875, 0.46875, 0.0, -1.5625, -2.25, 1.28125, 2.59375, 0.34375, -1.46875, -1.15625, -0.53125,
    -0.03125, 0.75, -0.0625, 1.375, 2.0, 2.90625, 0.375, -0.0625, 0.5625, 1.8125,
];
const DW: [f32; 54] = [
    2.625, -4.375, 1.5, 3.125, -1.625, 1.625, 1.125, 2.25, -3.625, 0.5, 4.25, 0.375, -1.5, -6.5, 4.875, 1.75, -4.75,
    0.75, -0.75, 1.125, 1.125, -0.875, 2.625, 0.125, -4.0, 2.5, -3.125, 0.25, -3.75, 2.75, 3.75, -5.125, 0.5, -0.25,
    2.125, 1.375, 1.125, 2.25, -3.625, 0.375, 2.5, -5.75, 0.5, 1.0, 0.875, 1.75, -4.75, 0.75, -0.625, 3.25, 3.125,
    1.25, -1.5, -3.25,
];
const DB: [f32; 3] = [0.0, -0.5, -1.0];
const DX: [f32; 80] = [
    -0.6875, 0.125, 0.75, 0.125, -0.375, 0.375, 0.625, -2.125, 1.3125, -0.5, -1.1875, 0.125, -0.125, 2.875, 0.0,
    -0.375, 0.25, 0.1875, -0.9375, 0.125, -0.9375, -0.25, 0.625, 0.0, -0.625, 0.125, 0.625, -1.4375, 1.3125, -0.375,
    -1.0625, 0.25, 0.125, -0.25, 0.0625, 1.0625, 0.5, 0.375, -1.0, 0.0625, 0.25, 0.1875, -0.9375, 0.125, 0.125, 1.0,
    -0.1875, -0.375, 0.5, 0.0, -0.6875, 0.125, -0.0625, -0.875, -0.375, 1.8125, 0.75, -0.625, 1.3125, -0.75, 0.5,
    0.375, -1.0, 0.0625, 0.4375, -1.0625, -0.5, 1.375, 0.5625, -0.1875, -0.9375, -0.125, -0.125, -1.875, -0.625, -0.5,
    0.625, -0.75, 1.3125, -0.75,
];
const MAX: [f32; 8] = [2.0, 3.0, 3.0, 2.0, 3.0, 3.0, 3.0, 3.0];
const DMAX: [f32; 50] = [
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.5, 0.0, 0.0, 0.0, 0.0, 1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5, 0.0, 0.0, 0.0,
    0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.5,
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
];
const AVG: [f32; 32] = [
    -0.3125, -0.1875, -0.0625, 0.0625, 0.3125, 0.4375, -0.25, -0.125, 0.125, 0.25, -0.4375, -0.3125, -0.0625, 0.0625,
    0.1875, 0.3125, -0.4375, -0.3125, -0.1875, -0.0625, 0.1875, 0.3125, 0.4375, -0.25, 0.0, 0.125, 0.25, -0.4375,
    -0.1875, -0.0625, 0.0625, 0.1875,
];
const DAVG: [f32; 50] = [
    -0.375, -0.375, 0.375, 0.25, -0.125, -0.125, -0.375, 0.25, 0.0, -0.5, 0.25, 0.375, 0.125, -0.125, -0.125, -0.25,
    0.25, 0.0, -0.25, 0.25, -0.25, -0.125, -0.25, -0.375, 0.0, 0.375, 0.25, 0.125, 0.0, -0.25, 0.5, 0.0, -0.25, 0.375,
    0.125, 0.0, -0.125, -0.375, 0.25, 0.5, -0.5, -0.25, 0.375, 0.125, 0.0, -0.375, -0.375, 0.375, 0.25, -0.125,
];

/// PyTorch 2.15's `F.conv2d` (batch 2, 2 channels of 5 × 4, 3 filters of
/// 3 × 3, stride 2, padding 1) and its backward, on dyadic values (the
/// generator is in `scripts/conv_reference.py`): the same numbers exactly.
#[test]
fn conv2d_matches_pytorch() {
    let s = Conv2d { c_in: 2, h: 5, w: 4, filters: 3, kernel: 3, stride: 2, padding: 1 };
    assert_eq!((s.out_h(), s.out_w()), (3, 2));
    let x = dyadic(2 * s.in_len(), 7, 13, 6.0, 4.0);
    let w = dyadic(s.filters * s.patch(), 5, 11, 5.0, 8.0);
    let b: Vec<f32> = (0..3).map(|i| (i as f32 - 1.0) / 2.0).collect();
    let (mut z, mut scratch) = (vec![0.0; 2 * s.out_len()], Vec::new());
    conv2d_forward(&mut z, &x, &w, &b, 2, &s, &mut scratch);
    assert_eq!(z, Z);
    let dz = dyadic(z.len(), 3, 7, 3.0, 2.0);
    let (mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; 3]);
    conv2d_backward(Some(&mut dx), &mut dw, &mut db, &dz, &x, &w, 2, &s, &mut scratch);
    assert_eq!((dw.as_slice(), db.as_slice(), dx.as_slice()), (&DW[..], &DB[..], &DX[..]));
}

/// PyTorch's `F.max_pool2d(x, 2, 2)` on a 2 × 5 × 5 image full of ties (the
/// first maximum in row-major order takes the gradient) and
/// `F.avg_pool2d(x, 2, 1)`, with their backwards.
#[test]
fn pools_match_pytorch() {
    let s = Pool2d { c: 2, h: 5, w: 5, kernel: 2, stride: 2 };
    let x: Vec<f32> = (0..50).map(|i| ((i * 5) % 4) as f32).collect();
    let (mut out, mut arg) = (vec![0.0; s.out_len()], vec![0; s.out_len()]);
    max_pool2d_forward(&mut out, &mut arg, &x, 1, &s);
    assert_eq!(out, MAX);
    let mut dx = vec![7.0; 50];
    max_pool2d_backward(&mut dx, &dyadic(out.len(), 3, 7, 3.0, 2.0), &arg, 1, &s);
    assert_eq!(dx, DMAX);

    let s = Pool2d { stride: 1, ..s };
    let x = dyadic(50, 7, 13, 6.0, 4.0);
    let mut out = vec![0.0; s.out_len()];
    avg_pool2d_forward(&mut out, &x, 1, &s);
    assert_eq!(out, AVG);
    let mut dx = vec![7.0; 50];
    avg_pool2d_backward(&mut dx, &dyadic(out.len(), 3, 7, 3.0, 2.0), 1, &s);
    assert_eq!(dx, DAVG);
}

/// The patch-matrix lowering sums in the written-out order: the same bits
/// on values that round, at shapes with every awkward edge (one channel, a
/// stride past the kernel, padding wider than the kernel's reach, a batch
/// of three, widths around the product's register blocks).
#[test]
fn forward_is_the_written_out_sums_bit_for_bit() {
    let shapes = [
        Conv2d { c_in: 1, h: 28, w: 28, filters: 8, kernel: 5, stride: 1, padding: 2 },
        Conv2d { c_in: 8, h: 14, w: 14, filters: 16, kernel: 5, stride: 1, padding: 2 },
        Conv2d { c_in: 3, h: 7, w: 9, filters: 5, kernel: 2, stride: 3, padding: 0 },
        Conv2d { c_in: 2, h: 4, w: 3, filters: 33, kernel: 3, stride: 1, padding: 3 },
        Conv2d { c_in: 1, h: 1, w: 1, filters: 1, kernel: 1, stride: 1, padding: 0 },
        // Output the input's size (the rows copied whole, then the
        // wrapped columns zeroed): narrow, short, kernel past the image.
        Conv2d { c_in: 2, h: 3, w: 6, filters: 4, kernel: 3, stride: 1, padding: 1 },
        Conv2d { c_in: 1, h: 2, w: 1, filters: 2, kernel: 3, stride: 1, padding: 1 },
        Conv2d { c_in: 2, h: 2, w: 5, filters: 3, kernel: 7, stride: 1, padding: 3 },
        Conv2d { c_in: 1, h: 9, w: 2, filters: 2, kernel: 1, stride: 1, padding: 0 },
    ];
    for (n, s) in shapes.iter().enumerate() {
        let batch = 3;
        let x = values(batch * s.in_len(), 10 + n as u64);
        let w = values(s.filters * s.patch(), 20 + n as u64);
        let b = values(s.filters, 30 + n as u64);
        let (mut fast, mut slow, mut scratch) =
            (vec![0.0; batch * s.out_len()], vec![1.0; batch * s.out_len()], Vec::new());
        conv2d_forward(&mut fast, &x, &w, &b, batch, s, &mut scratch);
        conv2d_forward_reference(&mut slow, &x, &w, &b, batch, s);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fast), bits(&slow), "{s:?}");
    }
}

#[test]
fn conv2d_backward_matches_finite_differences() {
    for s in [
        Conv2d { c_in: 2, h: 5, w: 4, filters: 3, kernel: 3, stride: 2, padding: 1 },
        Conv2d { c_in: 1, h: 6, w: 6, filters: 2, kernel: 2, stride: 2, padding: 0 },
        Conv2d { c_in: 3, h: 3, w: 3, filters: 2, kernel: 3, stride: 1, padding: 2 },
    ] {
        let batch = 2;
        let (x, w, b) = (values(batch * s.in_len(), 1), values(s.filters * s.patch(), 2), values(s.filters, 3));
        let g = values(batch * s.out_len(), 4);
        let objective = |x: &[f32], w: &[f32], b: &[f32]| {
            let mut z = vec![0.0; batch * s.out_len()];
            conv2d_forward(&mut z, x, w, b, batch, &s, &mut Vec::new());
            dot(&g, &z)
        };
        let (mut dx, mut dw, mut db, mut scratch) =
            (vec![0.0; x.len()], vec![0.0; w.len()], vec![0.0; b.len()], Vec::new());
        conv2d_backward(Some(&mut dx), &mut dw, &mut db, &g, &x, &w, batch, &s, &mut scratch);
        check("dx", &x, &dx, |x| objective(x, &w, &b));
        check("dw", &w, &dw, |w| objective(&x, w, &b));
        check("db", &b, &db, |b| objective(&x, &w, b));
        // Gradients accumulate; dx is overwritten, and skipped for the first layer.
        let (dw1, db1) = (dw.clone(), db.clone());
        conv2d_backward(None, &mut dw, &mut db, &g, &x, &w, batch, &s, &mut scratch);
        // (∂W's terms are added one by one onto its value: twice it within rounding.)
        assert!(dw.iter().zip(&dw1).all(|(a, b)| (a - 2.0 * b).abs() <= 1e-5 * (1.0 + b.abs())), "{dw:?} {dw1:?}");
        assert!(db.iter().zip(&db1).all(|(a, b)| *a == 2.0 * b));
    }
}

#[test]
fn pool_backwards_match_finite_differences() {
    let s = Pool2d { c: 2, h: 5, w: 6, kernel: 2, stride: 2 };
    // Distinct values, far enough apart that h moves no maximum.
    let x: Vec<f32> = (0..2 * s.in_len()).map(|i| ((i * 37) % 61) as f32 * 0.1).collect();
    let g = values(2 * s.out_len(), 5);
    let max = |x: &[f32]| {
        let (mut out, mut arg) = (vec![0.0; g.len()], vec![0; g.len()]);
        max_pool2d_forward(&mut out, &mut arg, x, 2, &s);
        dot(&g, &out)
    };
    let (mut out, mut arg, mut dx) = (vec![0.0; g.len()], vec![0; g.len()], vec![0.0; x.len()]);
    max_pool2d_forward(&mut out, &mut arg, &x, 2, &s);
    max_pool2d_backward(&mut dx, &g, &arg, 2, &s);
    check("max dx", &x, &dx, max);

    let s = Pool2d { kernel: 3, stride: 1, ..s };
    let g = values(2 * s.out_len(), 6);
    let avg = |x: &[f32]| {
        let mut out = vec![0.0; g.len()];
        avg_pool2d_forward(&mut out, x, 2, &s);
        dot(&g, &out)
    };
    let mut dx = vec![0.0; x.len()];
    avg_pool2d_backward(&mut dx, &g, 2, &s);
    check("avg dx", &x, &dx, avg);
}

#[test]
fn max_pool_takes_the_first_maximum_and_propagates_nan() {
    let s = Pool2d { c: 1, h: 2, w: 2, kernel: 2, stride: 2 };
    let (mut out, mut arg) = ([0.0], [9]);
    max_pool2d_forward(&mut out, &mut arg, &[1.0, 3.0, 3.0, 2.0], 1, &s);
    assert_eq!((out, arg), ([3.0], [1]));
    max_pool2d_forward(&mut out, &mut arg, &[1.0, f32::NAN, 3.0, 2.0], 1, &s);
    assert!(out[0].is_nan() && arg == [1]);
}

/// The 2 × 2 and 3 × 3 paths (vectorised across a row's outputs) give what
/// the window-by-window loop gives, bit for bit and index for index: on
/// ties, NaNs, infinities and negative zeros, over rows long enough for
/// full vectors and their remainders, and sides that leave a floor.
#[test]
fn the_vectorised_max_pools_equal_the_plain_one() {
    let pick = [0.0, -0.0, 1.0, 1.0, 2.0, -3.0, f32::NAN, f32::NEG_INFINITY, f32::INFINITY, 0.5];
    for (c, h, w, k) in [(3, 9, 37, 2), (2, 10, 50, 3), (1, 5, 8, 2), (2, 7, 67, 3), (1, 2, 2, 2)] {
        let s = Pool2d { c, h, w, kernel: k, stride: k };
        let batch = 2;
        let x: Vec<f32> = (0..batch * s.in_len()).map(|i| pick[(i * 7 + i / 3) % pick.len()]).collect();
        let n = batch * s.out_len();
        let (mut out, mut arg) = (vec![0.0; n], vec![0; n]);
        let (mut want, mut want_arg) = (vec![0.0; n], vec![0; n]);
        max_pool2d_forward(&mut out, &mut arg, &x, batch, &s);
        max_pool_any(&mut want, &mut want_arg, &x, batch, &s);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&out), bits(&want), "{c}×{h}×{w} k{k}");
        assert_eq!(arg, want_arg, "{c}×{h}×{w} k{k}");
    }
}
