//! Loss-spike detection: a step's loss far above the recent typical loss
//! pauses training and offers the last good checkpoint; a jump in the
//! gradient norm is flagged as the earlier warning.
//!
//! The reference is the median of the last `WINDOW` steps (robust to the
//! spike itself and to mini-batch noise). A loss spike is a loss above
//! `LOSS_FACTOR` × the median and at least `LOSS_FLOOR` above it (near-zero
//! losses jump by large ratios from noise alone); a gradient-norm jump is
//! one above `GRAD_FACTOR` × its median.

use std::collections::VecDeque;

pub const WINDOW: usize = 50;
/// Steps of history before anything is judged.
pub const MIN_HISTORY: usize = 20;
pub const LOSS_FACTOR: f32 = 3.0;
pub const LOSS_FLOOR: f32 = 0.1;
pub const GRAD_FACTOR: f32 = 10.0;

/// What a step looked like against the recent ones.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Normal,
    /// The gradient norm jumped: (norm, median).
    GradJump(f32, f32),
    /// The loss spiked: (loss, median loss, gradient norm, median norm).
    LossSpike(f32, f32, f32, f32),
}

/// Recent losses and gradient norms.
#[derive(Clone, Debug, Default)]
pub struct Detector {
    losses: VecDeque<f32>,
    norms: VecDeque<f32>,
}

fn median(values: &VecDeque<f32>) -> f32 {
    let mut v: Vec<f32> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f32::NAN;
    }
    v.sort_by(f32::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

impl Detector {
    pub fn clear(&mut self) {
        self.losses.clear();
        self.norms.clear();
    }

    /// Judges one step against the window, then adds it (a spike is not
    /// added, so it does not raise the reference).
    pub fn observe(&mut self, loss: f32, grad_norm: f32) -> Verdict {
        let verdict = if self.losses.len() < MIN_HISTORY {
            Verdict::Normal
        } else {
            let (m, g) = (median(&self.losses), median(&self.norms));
            if loss > LOSS_FACTOR * m && loss > m + LOSS_FLOOR {
                Verdict::LossSpike(loss, m, grad_norm, g)
            } else if grad_norm > GRAD_FACTOR * g {
                Verdict::GradJump(grad_norm, g)
            } else {
                Verdict::Normal
            }
        };
        if !matches!(verdict, Verdict::LossSpike(..)) {
            self.losses.push_back(loss);
            self.norms.push_back(grad_norm);
            if self.losses.len() > WINDOW {
                self.losses.pop_front();
                self.norms.pop_front();
            }
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn warmed(loss: impl Fn(usize) -> f32) -> Detector {
        let mut d = Detector::default();
        for i in 0..40 {
            assert_eq!(d.observe(loss(i), 1.0), Verdict::Normal, "step {i}");
        }
        d
    }

    #[test]
    fn noisy_but_steady_training_raises_nothing() {
        // ±40 % noise around 0.5.
        let mut d = warmed(|i| 0.5 * (1.0 + 0.4 * ((i * 7 % 11) as f32 / 5.0 - 1.0)));
        assert_eq!(d.observe(0.69, 1.3), Verdict::Normal);
    }

    #[test]
    fn a_loss_far_above_the_median_is_a_spike_and_stays_out_of_the_window() {
        let mut d = warmed(|_| 0.4);
        assert_eq!(d.observe(1.5, 30.0), Verdict::LossSpike(1.5, 0.4, 30.0, 1.0));
        // The spike did not enter the reference: the next one is judged alike.
        assert_eq!(d.observe(1.3, 1.0), Verdict::LossSpike(1.3, 0.4, 1.0, 1.0));
    }

    #[test]
    fn tiny_losses_need_an_absolute_jump_too() {
        let mut d = warmed(|_| 0.001);
        assert_eq!(d.observe(0.01, 1.0), Verdict::Normal, "10× but only +0.009");
        assert!(matches!(d.observe(0.2, 1.0), Verdict::LossSpike(..)));
    }

    #[test]
    fn the_gradient_norm_warns_first() {
        let mut d = warmed(|_| 0.4);
        assert_eq!(d.observe(0.45, 12.0), Verdict::GradJump(12.0, 1.0));
    }

    #[test]
    fn nothing_is_judged_before_enough_history() {
        let mut d = Detector::default();
        for _ in 0..MIN_HISTORY {
            assert_eq!(d.observe(100.0, 100.0), Verdict::Normal);
        }
        assert_eq!(d.observe(0.1, 1.0), Verdict::Normal);
    }
}
