//! Which steps the loop profiles (`stepscope_core::engine::profile`), and
//! what the profiles found.
//!
//! - CPU: a profiled step has the same bits as any other, so it is chosen
//!   by time: one step a second, the first a second after training began
//!   (the warm-up: WebAssembly starts in a baseline tier and compiles hot
//!   code again, optimized, within the first steps, so a step profiled at
//!   once would time the slower code). Each phase's burst runs three
//!   rounds and keeps the fastest (`Burst::run`), which costs about 0.4 %
//!   of a second with a 5 µs clock; with a coarser one the next profile
//!   waits 50 times the last one's cost, so that profiling never takes
//!   more than 2 % of training. A step whose compute lasts `LONG_STEP_MS`
//!   is resolved by the clock without a burst and is profiled by its own
//!   reading, taken in parts as usual.
//! - GPU: the profiled step runs the phased kernels, which agree with the
//!   fused step within the twin tolerances but not bit for bit, so it is
//!   chosen by step number (`ProfileSchedule`): runs with the same steps
//!   stay the same, raced or not. Without timestamp queries nothing times
//!   the GPU's phases apart and no step is profiled.

use stepscope_core::engine::profile::{PhaseProfile, ProfilePath, ProfileSchedule};
use stepscope_core::StepMetrics;
use web_time::Instant;

use crate::model::clock::ms_since;

/// Training time between two profiled CPU steps.
pub const CPU_PROFILE_EVERY_MS: f64 = 1000.0;
/// A CPU step whose phases took this long is profiled by its own reading.
pub const LONG_STEP_MS: f64 = 20.0;

#[derive(Default)]
pub struct Profiler {
    /// When the last CPU step was profiled, or (before the first) when
    /// training began.
    last_at: Option<Instant>,
    /// Compute time (data, forward, backward, update) of the last step.
    last_step_ms: f64,
    /// What the last profiled step's bursts cost beyond the step.
    last_cost_ms: f64,
    /// A long CPU step being taken in parts is profiled when it ends.
    pending_single: bool,
    /// Profiles found since the last frame report.
    pub found: Vec<PhaseProfile>,
    /// Time the profiled steps spent beyond their own phases (the bursts),
    /// since the last frame report.
    pub extra_ms: f64,
}

impl Profiler {
    pub fn schedule() -> ProfileSchedule {
        ProfileSchedule::default()
    }

    /// CPU, at a step boundary: whether step `step` is profiled, and
    /// whether with bursts (false: by its own reading).
    pub fn cpu_due(&mut self, step: u64) -> Option<bool> {
        let since = *self.last_at.get_or_insert_with(Instant::now);
        let wait = CPU_PROFILE_EVERY_MS.max(50.0 * self.last_cost_ms);
        let due = step >= Self::schedule().offset && ms_since(since) >= wait;
        if !due {
            return None;
        }
        self.last_at = Some(Instant::now());
        let burst = self.last_step_ms < LONG_STEP_MS;
        self.pending_single = !burst;
        Some(burst)
    }

    /// A step ended (CPU): the pending profile by its own reading, if any.
    pub fn finished(&mut self, m: &StepMetrics, r: f64, micro_batches: usize) {
        let p = &m.phases;
        self.last_step_ms = p.data_ms + p.forward_ms + p.backward_ms + p.optimizer_ms;
        if std::mem::take(&mut self.pending_single) {
            self.found.push(PhaseProfile::single(m.step, ProfilePath::CpuClock, p, r, micro_batches));
        }
    }

    /// A profiled CPU step took `total_ms` in all.
    pub fn bursts_took(&mut self, m: &StepMetrics, profile: PhaseProfile, total_ms: f64) {
        let p = &m.phases;
        self.last_step_ms = p.data_ms + p.forward_ms + p.backward_ms + p.optimizer_ms;
        self.last_cost_ms = (total_ms - self.last_step_ms).max(0.0);
        self.extra_ms += self.last_cost_ms;
        self.found.push(profile);
    }

    /// An abandoned step leaves nothing pending.
    pub fn forget_pending(&mut self) {
        self.pending_single = false;
    }
}
