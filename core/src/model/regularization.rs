//! L1 / L2 regularization over weights only (biases excluded), as the
//! TensorFlow Playground controls:
//!   l1: rate · Σ|w|,     gradient rate · sign(w)   (sign(0) = 0, as torch.sign)
//!   l2: rate · Σ w² / 2, gradient rate · w
//! Added once per optimizer step; the reported loss stays the data loss.

use super::TensorInfo;
use crate::experiment::{Regularization, RegularizationKind};

pub fn regularization_forward(params: &[f32], tensors: &[TensorInfo], reg: &Regularization) -> f32 {
    let rate = reg.rate as f32;
    let mut sum = 0.0f32;
    for t in tensors.iter().filter(|t| t.is_weight) {
        for &w in &params[t.offset..t.offset + t.len] {
            sum += match reg.kind {
                RegularizationKind::L1 => w.abs(),
                RegularizationKind::L2 => 0.5 * w * w,
            };
        }
    }
    rate * sum
}

/// grads += ∂(regularization)/∂params.
pub fn regularization_backward(grads: &mut [f32], params: &[f32], tensors: &[TensorInfo], reg: &Regularization) {
    let rate = reg.rate as f32;
    for t in tensors.iter().filter(|t| t.is_weight) {
        let range = t.offset..t.offset + t.len;
        for (g, &w) in grads[range.clone()].iter_mut().zip(&params[range]) {
            *g += match reg.kind {
                RegularizationKind::L1 => rate * sign(w),
                RegularizationKind::L2 => rate * w,
            };
        }
    }
}

fn sign(w: f32) -> f32 {
    if w > 0.0 {
        1.0
    } else if w < 0.0 {
        -1.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors() -> Vec<TensorInfo> {
        vec![
            TensorInfo { name: "w".into(), shape: vec![3], offset: 0, len: 3, is_weight: true, decays: true },
            TensorInfo { name: "b".into(), shape: vec![1], offset: 3, len: 1, is_weight: false, decays: true },
        ]
    }

    /// By hand, params [0.5, -2, 0, 7] (7 is a bias): l1 = 0.1·2.5 = 0.25,
    /// l2 = 0.1·(0.25 + 4)/2 = 0.2125. Finite differences (h = 1e-3) away
    /// from w = 0 check the gradients; tolerance 1e-3.
    #[test]
    fn values_and_finite_difference_check() {
        let params = [0.5f32, -2.0, 0.0, 7.0];
        for (kind, value) in [(RegularizationKind::L1, 0.25), (RegularizationKind::L2, 0.2125)] {
            let reg = Regularization { kind, rate: 0.1 };
            assert!((regularization_forward(&params, &tensors(), &reg) - value).abs() < 1e-6);
            let mut grads = [0.0f32; 4];
            regularization_backward(&mut grads, &params, &tensors(), &reg);
            assert_eq!(grads[2], 0.0);
            assert_eq!(grads[3], 0.0, "bias is not regularized");
            for i in 0..2 {
                let h = 1e-3;
                let (mut plus, mut minus) = (params, params);
                plus[i] += h;
                minus[i] -= h;
                let numeric = (regularization_forward(&plus, &tensors(), &reg)
                    - regularization_forward(&minus, &tensors(), &reg))
                    / (2.0 * h);
                assert!((numeric - grads[i]).abs() < 1e-3, "{kind:?} {i}");
            }
        }
    }
}
