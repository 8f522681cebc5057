//! A profiled GPU step (`engine::profile`): one step on the phased kernels,
//! each phase its own pass with a timestamp pair, in its own submit. The
//! fused step runs every phase in one dispatch, so its steps are timed only
//! whole; the profiled step is how its anatomy is measured.

use super::GpuEngine;
use crate::error::Result;

impl GpuEngine {
    /// Submits one step on the phased kernels with per-phase timestamps,
    /// whatever path the run takes otherwise; collected like any submit.
    /// The phased and fused kernels give the same run within the twin
    /// tolerances.
    pub fn submit_profiled(&mut self) -> Result<()> {
        let (fused, phased) = (self.use_fused, self.phase_timing);
        (self.use_fused, self.phase_timing) = (false, true);
        let submitted = self.submit(1);
        (self.use_fused, self.phase_timing) = (fused, phased);
        submitted
    }

    /// The resolution of the last timestamps read (ms): None before any,
    /// or without timestamp queries.
    pub fn timestamp_resolution_ms(&self) -> Option<f64> {
        self.timestamp_quantum_ms
    }
}

/// The step of the timestamps `ticks` (period `period_ms`): the largest
/// power of ten of nanoseconds, up to 1 ms, that divides them all. A
/// browser may round timestamps (Chrome to 100 µs without its developer
/// features), which makes each reading that coarse.
pub(super) fn timestamp_quantum_ms(ticks: &[u64], period_ms: f64) -> f64 {
    let ns: Vec<u64> = ticks.iter().map(|&t| (t as f64 * period_ms * 1e6).round() as u64).collect();
    if ns.iter().all(|&t| t == 0) {
        return period_ms;
    }
    for step in [1_000_000u64, 100_000, 10_000, 1_000, 100, 10] {
        if ns.iter().all(|t| t % step == 0) {
            return (step as f64 / 1e6).max(period_ms);
        }
    }
    period_ms
}

#[cfg(test)]
mod tests {
    use super::timestamp_quantum_ms;

    #[test]
    fn rounded_timestamps_are_seen_as_coarse() {
        // Chrome's 100 µs rounding, in 1 ns ticks.
        assert_eq!(timestamp_quantum_ms(&[1_200_000, 1_300_000, 5_000_000], 1e-6), 0.1);
        assert_eq!(timestamp_quantum_ms(&[1_234_567, 1_300_001], 1e-6), 1e-6);
        // A 40 ns period: no rounding beyond it.
        assert!((timestamp_quantum_ms(&[3, 7, 11], 4e-5) - 4e-5).abs() < 1e-15);
    }
}
