//! The step timeline: where each step's wall-clock time went, every part
//! named and measured.
//!
//! A step's wall time is the page's frame (from the animation frame to the
//! report drawn) divided by its steps. The frame is cut into measured
//! intervals, each spread evenly over the frame's steps:
//! - on the engine's side (the worker's frame, its own clock): each step's
//!   data, forward, backward and optimizer (GPU: timestamp queries; CPU:
//!   the clock); `unsplit`, a GPU step timed only whole (the fused step,
//!   one pass per step, or no timestamp queries); checkpoint and logging
//!   (views and statistics); `profiling`, the bursts of profiled steps
//!   beyond their own phases; and `engine`, the rest of the worker's
//!   frame: commands, the calls between phases, spike checks, and on the
//!   GPU submitting and awaiting readbacks;
//! - `messaging`: the page's wait beyond the worker's frame (messages,
//!   their encoding, the worker's scheduling);
//! - `page`: the page's own part of the frame (choosing the engine, taking
//!   in the report).
//!
//! Measured parts can overlap (a GPU pass runs while the CPU waits for it),
//! so, as PyTorch's profiler does, time is assigned by a fixed priority,
//! each part taking at most what is left of the wall time; `other` is what
//! no measurement claims (clock rounding between the page's and the
//! worker's clocks). The parts therefore always sum to the wall time.

/// Part names in display order; `other` last.
pub const PHASES: [&str; 12] = [
    "data",
    "forward",
    "backward",
    "optimizer",
    "unsplit",
    "checkpoint",
    "logging",
    "profiling",
    "engine",
    "messaging",
    "page",
    "other",
];

/// What each part is, for the legend's titles.
pub const MEANINGS: [&str; 12] = [
    "the step's rows: batching on the CPU, gathering on the GPU, waits for a slow loader",
    "forward pass and loss",
    "backward pass and regularization",
    "gradient norm, clipping, learning rate and the update",
    "a GPU step timed only whole (the fused step, or no per-phase timestamps)",
    "automatic checkpoints: the loop's wait",
    "views and per-layer statistics",
    "profiled steps: their bursts beyond the step itself",
    "the engine's own bookkeeping: commands, calls between phases, spike checks; on the GPU, submits and readbacks",
    "messages between the page and the worker: encoding, posting, scheduling",
    "the page taking in the report",
    "what no measurement claims: clock rounding",
];

/// Indices of the parts in PHASES, for the views that read one by name.
pub mod part {
    pub const DATA: usize = 0;
    pub const FORWARD: usize = 1;
    pub const UNSPLIT: usize = 4;
    pub const LOGGING: usize = 6;
}

/// Index of `other` in PHASES.
pub const OTHER: usize = 11;

/// Priority in which measured time is assigned (indices into PHASES).
const PRIORITY: [usize; 11] = [1, 2, 3, 4, 0, 5, 6, 7, 8, 9, 10];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTiming {
    pub step: u64,
    pub wall_ms: f64,
    /// Milliseconds per part, in PHASES order; sums to `wall_ms`.
    pub parts: [f64; 12],
}

/// Splits `wall_ms` into the parts from measured times (in PHASES order,
/// without `other`).
pub fn assign(wall_ms: f64, measured: [f64; 11]) -> [f64; 12] {
    let mut parts = [0.0; 12];
    let mut left = wall_ms.max(0.0);
    for &i in &PRIORITY {
        let take = measured[i].max(0.0).min(left);
        parts[i] = take;
        left -= take;
    }
    parts[OTHER] = left;
    parts
}

/// Means over `entries` of the wall time and of each part.
pub fn means(entries: &[StepTiming]) -> (f64, [f64; 12]) {
    if entries.is_empty() {
        return (0.0, [0.0; 12]);
    }
    let n = entries.len() as f64;
    let mut parts = [0.0; 12];
    for e in entries {
        for (sum, v) in parts.iter_mut().zip(e.parts) {
            *sum += v / n;
        }
    }
    (entries.iter().map(|e| e.wall_ms).sum::<f64>() / n, parts)
}

pub use stepscope_core::engine::profile::step_flops;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_always_sum_to_the_wall_time() {
        let m = [1.0, 2.0, 4.0, 1.0, 0.0, 0.5, 0.5, 0.2, 0.3, 0.2, 0.1];
        for (wall, measured) in [(20.0, m), (5.0, m), (0.0, m)] {
            let parts = assign(wall, measured);
            assert!((parts.iter().sum::<f64>() - wall).abs() < 1e-12, "{parts:?}");
            assert!(parts.iter().all(|p| *p >= 0.0));
        }
        // Overlap: forward and backward take what they measured first.
        let parts = assign(5.0, m);
        assert_eq!(parts[..4], [0.0, 2.0, 3.0, 0.0]);
        assert!(parts[4..].iter().all(|&p| p == 0.0));
        // Room to spare goes to "other".
        assert!((assign(20.0, m)[OTHER] - (20.0 - m.iter().sum::<f64>())).abs() < 1e-12);
    }

    #[test]
    fn the_named_indices_name_their_parts() {
        assert_eq!(
            [PHASES[part::DATA], PHASES[part::FORWARD], PHASES[part::UNSPLIT], PHASES[part::LOGGING], PHASES[OTHER]],
            ["data", "forward", "unsplit", "logging", "other"]
        );
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
