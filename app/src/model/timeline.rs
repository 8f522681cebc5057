//! The step timeline: where each step's wall-clock time went.
//!
//! The engine measures data, forward, backward and optimizer per step (GPU:
//! timestamp queries; CPU: the clock); the page measures its checkpoint
//! (the in-memory copy of the run) and logging (reading statistics back,
//! evaluating, updating the views) per frame and spreads them over the
//! frame's steps. A step's wall time is the frame's busy time divided by
//! its steps. Measured parts can overlap (a GPU pass runs while the CPU
//! waits for it), so, as PyTorch's profiler does, time is assigned by a
//! fixed priority: forward, backward, optimizer, data, checkpoint, logging,
//! each taking at most what is left of the wall time; "other" is the rest.
//! The parts therefore always sum to the wall time.

/// Phase names in display order; `other` last.
pub const PHASES: [&str; 7] = ["data", "forward", "backward", "optimizer", "checkpoint", "logging", "other"];

/// Priority in which measured time is assigned (indices into PHASES).
const PRIORITY: [usize; 6] = [1, 2, 3, 0, 4, 5];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTiming {
    pub step: u64,
    pub wall_ms: f64,
    /// Milliseconds per phase, in PHASES order; sums to `wall_ms`.
    pub parts: [f64; 7],
}

/// Splits `wall_ms` into the seven parts from measured times (in PHASES
/// order, without `other`).
pub fn assign(wall_ms: f64, measured: [f64; 6]) -> [f64; 7] {
    let mut parts = [0.0; 7];
    let mut left = wall_ms.max(0.0);
    for &i in &PRIORITY {
        let take = measured[i].max(0.0).min(left);
        parts[i] = take;
        left -= take;
    }
    parts[6] = left;
    parts
}

/// Means over `entries` of the wall time and of each part.
pub fn means(entries: &[StepTiming]) -> (f64, [f64; 7]) {
    if entries.is_empty() {
        return (0.0, [0.0; 7]);
    }
    let n = entries.len() as f64;
    let mut parts = [0.0; 7];
    for e in entries {
        for (sum, v) in parts.iter_mut().zip(e.parts) {
            *sum += v / n;
        }
    }
    (entries.iter().map(|e| e.wall_ms).sum::<f64>() / n, parts)
}

/// FLOPs of one optimizer step from the network's shape: forward 2·B·Σ I·O
/// per micro-batch; backward twice that (dW and dX), less the first layer's
/// dX, which is not needed.
pub fn step_flops(widths: &[usize], batch: usize, accumulation: usize) -> (f64, f64) {
    let pairs: Vec<(f64, f64)> = widths.windows(2).map(|w| (w[0] as f64, w[1] as f64)).collect();
    let rows = (batch * accumulation) as f64;
    let forward: f64 = pairs.iter().map(|(i, o)| 2.0 * rows * i * o).sum();
    let first_dx = pairs.first().map_or(0.0, |(i, o)| 2.0 * rows * i * o);
    (forward, 2.0 * forward - first_dx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_always_sum_to_the_wall_time() {
        for (wall, measured) in [
            (10.0, [1.0, 2.0, 4.0, 1.0, 0.5, 0.5]),
            (5.0, [1.0, 3.0, 4.0, 1.0, 0.5, 0.5]),
            (0.0, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
        ] {
            let parts = assign(wall, measured);
            assert!((parts.iter().sum::<f64>() - wall).abs() < 1e-12, "{parts:?}");
            assert!(parts.iter().all(|p| *p >= 0.0));
        }
        // Overlap: forward and backward take what they measured first.
        let parts = assign(5.0, [1.0, 3.0, 4.0, 1.0, 0.5, 0.5]);
        assert_eq!(parts, [0.0, 3.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
        // Room to spare goes to "other".
        assert_eq!(assign(10.0, [1.0, 2.0, 4.0, 1.0, 0.5, 0.5])[6], 1.0);
    }

    #[test]
    fn backward_costs_about_twice_the_forward() {
        // 2-16-16-1 at batch 32: forward 2·32·(32 + 256 + 16) FLOPs.
        let (f, b) = step_flops(&[2, 16, 16, 1], 32, 1);
        assert_eq!(f, 2.0 * 32.0 * (32.0 + 256.0 + 16.0));
        assert_eq!(b, 2.0 * f - 2.0 * 32.0 * 32.0);
        let (f, b) = step_flops(&[784, 512, 512, 10], 1024, 1);
        assert!((b / f - 2.0).abs() < 0.65);
    }
}
