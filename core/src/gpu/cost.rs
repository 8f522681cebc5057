//! What a submit of K steps costs, as `calibrate` measures it and the
//! engine keeps it (`GpuEngine::submit_cost`).

/// Wall time of a submit of K steps ≈ `fixed_ms` + K · `per_step_ms`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SubmitCost {
    pub fixed_ms: f64,
    pub per_step_ms: f64,
}

impl SubmitCost {
    /// Predicted steps per second at `k` steps per submit.
    pub fn steps_per_second(&self, k: usize) -> f64 {
        k as f64 * 1e3 / (self.fixed_ms + self.per_step_ms * k as f64)
    }

    /// Steps per submit so that a submit takes about `target_ms`, or
    /// twice the fixed cost where that is more (fewer steps would spend
    /// most of the time on it), within 1..=`max`.
    pub fn steps_for(&self, target_ms: f64, max: usize) -> usize {
        let target = target_ms.max(2.0 * self.fixed_ms);
        (((target - self.fixed_ms) / self.per_step_ms.max(1e-6)) as usize).clamp(1, max)
    }
}
