//! Dense layer: z = x·Wᵀ + b.
//! Shapes: x (B, I), weight (O, I) row-major, bias (O), z (B, O).

use super::gemm::{gemm, gemm_from, Lhs, Start};

/// Weights (inputs × units) up to which Wᵀ is written row by row.
const SMALL: usize = 4096;

std::thread_local! {
    /// Wᵀ for `dense_forward`, reused between calls.
    static TRANSPOSED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// z = x·Wᵀ + b. Stores nothing: backward needs x, which the caller keeps
/// (it is the previous layer's output).
///
/// Each z[b, o] is summed as bias[o] + x[b,0]·W[o,0] + x[b,1]·W[o,1] + …,
/// in that order, exactly as a dot product per output would sum it (see
/// `dense_forward_reference`, which the tests hold it equal to bit for bit).
/// It is `gemm` over x and Wᵀ from z = bias: register-blocked and as wide
/// as the CPU allows (`simd128` in the browser, AVX2 or AVX-512 natively),
/// without changing any sum's order.
pub fn dense_forward(
    z: &mut [f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    batch: usize,
    inputs: usize,
    units: usize,
) {
    TRANSPOSED.with(|cell| {
        let mut wt = cell.borrow_mut();
        wt.clear();
        wt.resize(inputs * units, 0.0);
        if inputs * units <= SMALL {
            // Row by row: at this size every write stays in cache anyway,
            // and the tiles' loop overhead was half the transpose's cost.
            for (o, row) in weight.chunks_exact(inputs).take(units).enumerate() {
                for (i, &w) in row.iter().enumerate() {
                    wt[i * units + o] = w;
                }
            }
        } else {
            // In tiles of 8 × 8, so that the writes, strided by `units`,
            // stay in a few cache lines.
            for o0 in (0..units).step_by(8) {
                for i0 in (0..inputs).step_by(8) {
                    for o in o0..(o0 + 8).min(units) {
                        for i in i0..(i0 + 8).min(inputs) {
                            wt[i * units + o] = weight[o * inputs + i];
                        }
                    }
                }
            }
        }
        let x = Lhs { data: x, row_stride: inputs, k_stride: 1 };
        gemm_from(Start::Row(&bias[..units]), z, units, x, &wt, units, batch, units, inputs);
    });
}

/// `dense_forward` as a dot product per output: the order of every sum
/// that `dense_forward` must keep.
pub fn dense_forward_reference(
    z: &mut [f32],
    x: &[f32],
    weight: &[f32],
    bias: &[f32],
    batch: usize,
    inputs: usize,
    units: usize,
) {
    for b in 0..batch {
        let x_row = &x[b * inputs..(b + 1) * inputs];
        for o in 0..units {
            let w_row = &weight[o * inputs..(o + 1) * inputs];
            let mut sum = bias[o];
            for i in 0..inputs {
                sum += x_row[i] * w_row[i];
            }
            z[b * units + o] = sum;
        }
    }
}

/// Given dz = ∂L/∂z (B, O):
///   dweight += dzᵀ·x   (O, I)
///   dbias   += Σ_b dz   (O)
///   dx       = dz·W    (B, I), overwritten; skipped when `dx` is None
///                      (the first layer: inputs need no gradient).
#[allow(clippy::too_many_arguments)]
pub fn dense_backward(
    dx: Option<&mut [f32]>,
    dweight: &mut [f32],
    dbias: &mut [f32],
    dz: &[f32],
    x: &[f32],
    weight: &[f32],
    batch: usize,
    inputs: usize,
    units: usize,
) {
    // dW (O, I) += dzᵀ·x: each dW[o, i] sums over b in order.
    let dz_t = Lhs { data: dz, row_stride: 1, k_stride: units };
    gemm(dweight, inputs, dz_t, x, inputs, units, inputs, batch);
    // db[o] += (dz[0, o] + dz[1, o] + …): the rows in order, each row's
    // outputs side by side (SIMD), into per-output sums started at 0.
    let mut sums = vec![0.0f32; units];
    for dz_row in dz[..batch * units].chunks_exact(units.max(1)) {
        for (sum, &d) in sums.iter_mut().zip(dz_row) {
            *sum += d;
        }
    }
    for (db, sum) in dbias[..units].iter_mut().zip(sums) {
        *db += sum;
    }
    // dx (B, I) = dz·W, each dx[b, i] summed over o in order from 0.
    if let Some(dx) = dx {
        let dz = Lhs { data: dz, row_stride: units, k_stride: 1 };
        gemm_from(Start::Zero, dx, inputs, dz, weight, inputs, batch, inputs, units);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Worked by hand: x = [[1, 2]], W = [[3, 4]], b = [5]
    ///   z = 1·3 + 2·4 + 5 = 16.
    /// With L = z (dz = [[1]]): dW = dzᵀx = [[1, 2]], db = 1, dx = dz·W = [[3, 4]].
    /// A second backward accumulates: dW = [[2, 4]], db = 2; dx is overwritten.
    #[test]
    fn worked_by_hand() {
        let (x, w, b) = ([1.0, 2.0], [3.0, 4.0], [5.0]);
        let mut z = [0.0];
        dense_forward(&mut z, &x, &w, &b, 1, 2, 1);
        assert_eq!(z, [16.0]);
        let (mut dx, mut dw, mut db) = ([0.0; 2], [0.0; 2], [0.0]);
        dense_backward(Some(&mut dx), &mut dw, &mut db, &[1.0], &x, &w, 1, 2, 1);
        assert_eq!((dx, dw, db), ([3.0, 4.0], [1.0, 2.0], [1.0]));
        dense_backward(Some(&mut dx), &mut dw, &mut db, &[1.0], &x, &w, 1, 2, 1);
        assert_eq!((dx, dw, db), ([3.0, 4.0], [2.0, 4.0], [2.0]));
    }

    /// The vectorisable forward sums in the reference's order: equal bit
    /// for bit at awkward sizes (rows not a multiple of the block, one
    /// input, one output, widths not a multiple of any SIMD width).
    #[test]
    fn forward_equals_the_reference_bit_for_bit() {
        let mut rng = crate::rng::Rng::new(7, 0);
        for (batch, inputs, units) in [(1, 1, 1), (3, 2, 16), (5, 7, 13), (9, 33, 1), (17, 64, 65), (32, 100, 10)] {
            let mut values = |n: usize| (0..n).map(|_| rng.uniform(-3.0, 3.0) as f32).collect::<Vec<f32>>();
            let (x, w, b) = (values(batch * inputs), values(units * inputs), values(units));
            let mut z = vec![f32::NAN; batch * units];
            let mut want = vec![0.0; batch * units];
            dense_forward(&mut z, &x, &w, &b, batch, inputs, units);
            dense_forward_reference(&mut want, &x, &w, &b, batch, inputs, units);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&z), bits(&want), "B={batch} I={inputs} O={units}");
        }
    }
}
