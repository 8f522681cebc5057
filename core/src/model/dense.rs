//! Dense layer: z = x·Wᵀ + b.
//! Shapes: x (B, I), weight (O, I) row-major, bias (O), z (B, O).

/// z = x·Wᵀ + b. Stores nothing: backward needs x, which the caller keeps
/// (it is the previous layer's output).
pub fn dense_forward(
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
    for o in 0..units {
        let dw_row = &mut dweight[o * inputs..(o + 1) * inputs];
        let mut db = 0.0f32;
        for b in 0..batch {
            let d = dz[b * units + o];
            db += d;
            let x_row = &x[b * inputs..(b + 1) * inputs];
            for i in 0..inputs {
                dw_row[i] += d * x_row[i];
            }
        }
        dbias[o] += db;
    }
    if let Some(dx) = dx {
        for b in 0..batch {
            let dx_row = &mut dx[b * inputs..(b + 1) * inputs];
            dx_row.fill(0.0);
            for o in 0..units {
                let d = dz[b * units + o];
                let w_row = &weight[o * inputs..(o + 1) * inputs];
                for i in 0..inputs {
                    dx_row[i] += d * w_row[i];
                }
            }
        }
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
}
