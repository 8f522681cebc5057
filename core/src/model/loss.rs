//! Losses with mean reduction, as PyTorch. `y` are the last layer's
//! outputs (logits for the two classification losses), (B, O).
//! Targets: (B, O) floats for mse and bce_with_logits, (B, 1) class
//! indices for cross_entropy.
//!
//! exp, ln, ln(1 + x) and σ are the engine's own straight-line f32
//! (`gpt::ops::math`, with their stated errors), not the platform's libm:
//! the same bits natively and in the browser, and the elementwise parts
//! vectorise (`widest`). Every sum runs in element order.

use crate::experiment::Loss;
use crate::model::gpt::ops::math::{exp, ln, ln_1p, sigmoid};
use crate::model::wide::widest;

/// Elements per chunk of BCE terms computed at once before they are summed
/// in order.
const CHUNK: usize = 256;

widest! {
    /// BCE with logits per element, in its stable form.
    fn bce_terms(out: &mut [f32], y: &[f32], t: &[f32]) {
        for ((o, &y), &t) in out.iter_mut().zip(y).zip(t) {
            *o = y.max(0.0) - y * t + ln_1p(exp(-y.abs()));
        }
    }
}

widest! {
    /// dy = k (σ(y) − t).
    fn bce_gradient(dy: &mut [f32], y: &[f32], t: &[f32], k: f32) {
        for ((d, &y), &t) in dy.iter_mut().zip(y).zip(t) {
            *d = k * (sigmoid(y) - t);
        }
    }
}

/// Mean loss over the batch (and over all elements for mse and bce).
#[inline(never)]
pub fn loss_forward(y: &[f32], targets: &[f32], loss: Loss, batch: usize, outputs: usize) -> f32 {
    match loss {
        // (1/(B·O)) Σ (y − t)²
        Loss::Mse => {
            let sum: f32 = y.iter().zip(targets).map(|(y, t)| (y - t) * (y - t)).sum();
            sum / (batch * outputs) as f32
        }
        // Stable form: max(y, 0) − y·t + log(1 + e^(−|y|)), mean over elements
        // (<https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html>).
        Loss::BceWithLogits => {
            let mut terms = [0.0f32; CHUNK];
            let mut sum = 0.0f32;
            for (y, t) in y.chunks(CHUNK).zip(targets.chunks(CHUNK)) {
                let terms = &mut terms[..y.len()];
                bce_terms(terms, y, t);
                for &term in terms.iter() {
                    sum += term;
                }
            }
            sum / (batch * outputs) as f32
        }
        // Per row: logsumexp(y) − y[class], mean over rows.
        Loss::CrossEntropy => {
            let mut sum = 0.0f32;
            for b in 0..batch {
                let row = &y[b * outputs..(b + 1) * outputs];
                let class = targets[b] as usize;
                sum += log_sum_exp(row) - row[class];
            }
            sum / batch as f32
        }
    }
}

fn log_sum_exp(row: &[f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0.0f32;
    for &v in row {
        sum += exp(v - max);
    }
    max + ln(sum)
}

/// dy = scale · ∂L/∂y, overwritten. `scale` is 1/k under gradient
/// accumulation over k micro-batches.
///   mse:           2 (y − t) / (B·O)
///   bce:           (σ(y) − t) / (B·O)
///   cross_entropy: (softmax(y) − onehot(t)) / B
#[inline(never)]
pub fn loss_backward(dy: &mut [f32], y: &[f32], targets: &[f32], loss: Loss, batch: usize, outputs: usize, scale: f32) {
    match loss {
        Loss::Mse => {
            let k = 2.0 * scale / (batch * outputs) as f32;
            for i in 0..dy.len() {
                dy[i] = k * (y[i] - targets[i]);
            }
        }
        Loss::BceWithLogits => {
            bce_gradient(dy, y, targets, scale / (batch * outputs) as f32);
        }
        Loss::CrossEntropy => {
            let k = scale / batch as f32;
            for b in 0..batch {
                let row = &y[b * outputs..(b + 1) * outputs];
                let lse = log_sum_exp(row);
                let class = targets[b] as usize;
                for o in 0..outputs {
                    let softmax = exp(row[o] - lse);
                    let onehot = f32::from(o == class);
                    dy[b * outputs + o] = k * (softmax - onehot);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Central differences in f64 around f32 losses, h = 1e-2: smooth
    /// losses of O(1) values, so truncation ≈ h² ≈ 1e-4 and rounding
    /// ≈ 1e-7/1e-2 = 1e-5; tolerance 5e-4 absolute.
    #[test]
    fn finite_difference_check_every_loss() {
        let y = [0.3f32, -1.2, 2.1, 0.05, -0.4, 1.4];
        for (loss, targets) in [
            (Loss::Mse, vec![0.5, -1.0, 1.0, 0.0, 0.2, -0.3]),
            (Loss::BceWithLogits, vec![1.0, 0.0, 1.0, 0.0, 0.3, 1.0]),
            (Loss::CrossEntropy, vec![2.0, 0.0]),
        ] {
            let (batch, outputs) = (2, 3);
            let mut dy = [0.0f32; 6];
            loss_backward(&mut dy, &y, &targets, loss, batch, outputs, 1.0);
            for i in 0..6 {
                let h = 1e-2f32;
                let (mut plus, mut minus) = (y, y);
                plus[i] += h;
                minus[i] -= h;
                let numeric = (loss_forward(&plus, &targets, loss, batch, outputs) as f64
                    - loss_forward(&minus, &targets, loss, batch, outputs) as f64)
                    / (2.0 * h as f64);
                assert!((numeric - dy[i] as f64).abs() < 5e-4, "{loss:?} [{i}]: {} vs {numeric}", dy[i]);
            }
        }
    }

    /// Values computed with PyTorch's definitions by hand:
    /// mse([1, 3], [0, 0]) = (1 + 9)/2 = 5;
    /// bce_with_logits(0, t) = log 2 for any t;
    /// cross_entropy([0, 0], class 1) = log 2.
    #[test]
    fn worked_by_hand() {
        assert_eq!(loss_forward(&[1.0, 3.0], &[0.0, 0.0], Loss::Mse, 1, 2), 5.0);
        let ln2 = std::f32::consts::LN_2;
        assert!((loss_forward(&[0.0], &[0.7], Loss::BceWithLogits, 1, 1) - ln2).abs() < 1e-7);
        assert!((loss_forward(&[0.0, 0.0], &[1.0], Loss::CrossEntropy, 1, 2) - ln2).abs() < 1e-7);
        // Stable for large logits: no overflow to inf.
        assert!(loss_forward(&[200.0], &[0.0], Loss::BceWithLogits, 1, 1).is_finite());
        assert!(loss_forward(&[500.0, -500.0], &[1.0], Loss::CrossEntropy, 1, 2).is_finite());
    }
}
