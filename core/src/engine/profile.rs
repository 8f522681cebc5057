//! Profiled steps: phase times that mean something at every size.
//!
//! A small network's phases take microseconds, below what a browser's clock
//! resolves (100 µs in a worker without cross-origin isolation, 5 µs with
//! it), and the fused GPU step has one time for all its phases. So, as
//! `torch.profiler`'s schedule does, a few steps are profiled: every
//! `ProfileSchedule::every` steps one step is taken so that its phases are
//! timed apart and resolved.
//!
//! - CPU (`CpuEngine::profile_step`): the step is the real one, and each
//!   phase is also repeated in a burst long enough for the clock
//!   (`Burst`): forward is pure and repeats as it is; backward and the
//!   optimizer repeat on restored copies of what they change, and the time
//!   of the restores alone is measured and taken off. The real phases run
//!   once, after the bursts, so the step's bits are those of an unprofiled
//!   step.
//! - GPU: the step is taken on the phased kernels with a timestamp pair
//!   per phase (the fused step otherwise), one step in its own submit.
//!
//! Each figure carries its uncertainty from the clock's resolution: a
//! burst of `reps` repetitions read with a clock of resolution r is off by
//! at most 2·r/reps per repetition (two reads), twice that when the
//! restores' time is taken off.

use serde::{Deserialize, Serialize};
use web_time::Instant;

/// Which steps are profiled: step `s` when `s % every == offset` (steps
/// before `offset` are warm-up, as in `torch.profiler.schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSchedule {
    pub every: u64,
    pub offset: u64,
}

impl Default for ProfileSchedule {
    /// Steps 2, 102, 202, …: the first two steps warm caches and code up.
    fn default() -> ProfileSchedule {
        ProfileSchedule { every: 100, offset: 2 }
    }
}

impl ProfileSchedule {
    /// Whether step `step` (0-based) is profiled.
    pub fn profiles(&self, step: u64) -> bool {
        self.every > 0 && step % self.every == self.offset % self.every
    }
}

/// How a profiled step's phases were timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfilePath {
    /// CPU engine, each phase repeated in a burst timed by the clock.
    CpuBurst,
    /// CPU engine, a step long enough that one reading of each phase is
    /// resolved: no burst.
    CpuClock,
    /// GPU engine: the phased kernels, each phase its own pass with a
    /// timestamp pair.
    GpuTimestamps,
}

/// One phase's time in a profiled step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Milliseconds per step (all micro-batches).
    pub ms: f64,
    /// The most the clock's resolution can put it off by, in ms.
    pub uncertainty_ms: f64,
    /// Repetitions timed per micro-batch (1: the step's own reading).
    pub reps: u32,
}

impl Measured {
    /// Whether the figure is larger than its uncertainty.
    pub fn resolved(&self) -> bool {
        self.ms > self.uncertainty_ms
    }
}

/// What a profiled step measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseProfile {
    /// The profiled step (0-based).
    pub step: u64,
    pub path: ProfilePath,
    pub forward: Measured,
    pub backward: Measured,
    pub optimizer: Measured,
    /// The resolution of the clock that timed it (ms).
    pub resolution_ms: f64,
}

impl PhaseProfile {
    /// From one reading of each phase with a clock of resolution `r`.
    pub fn single(step: u64, path: ProfilePath, phases: &super::PhaseTimes, r: f64, micro_batches: usize) -> Self {
        // Each micro-batch's phase is one reading (two clock reads).
        let one = |ms: f64, readings: usize| Measured { ms, uncertainty_ms: 2.0 * r * readings as f64, reps: 1 };
        PhaseProfile {
            step,
            path,
            forward: one(phases.forward_ms, micro_batches),
            backward: one(phases.backward_ms, micro_batches),
            optimizer: one(phases.optimizer_ms, 1),
            resolution_ms: r,
        }
    }
}

impl PhaseProfile {
    /// Splits `compute_ms`, an ordinary step's forward + backward +
    /// optimizer as the clock read them, in this profile's proportions:
    /// what the timeline shows for a step whose phases are each below what
    /// the clock resolves. Each share carries the bound the profile's own
    /// uncertainties put on it (interval arithmetic: the share with its
    /// phase at the top of its bound and the others at the bottom of
    /// theirs, and the other way round), in ms of `compute_ms`.
    pub fn split(&self, compute_ms: f64) -> [Measured; 3] {
        let phases = [self.forward, self.backward, self.optimizer];
        let total: f64 = phases.iter().map(|m| m.ms).sum();
        let mut out = [Measured::default(); 3];
        if total <= 0.0 {
            return out;
        }
        for (i, m) in phases.iter().enumerate() {
            let others: f64 = phases.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, o)| o.ms).sum();
            let others_bound: f64 =
                phases.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, o)| o.uncertainty_ms).sum();
            let share = m.ms / total;
            let high = m.ms + m.uncertainty_ms;
            let low = (m.ms - m.uncertainty_ms).max(0.0);
            let hi = high / (high + (others - others_bound).max(0.0)).max(f64::MIN_POSITIVE);
            let lo = low / (low + others + others_bound).max(f64::MIN_POSITIVE);
            out[i] = Measured {
                ms: compute_ms * share,
                uncertainty_ms: compute_ms * (hi - share).max(share - lo).max(0.0),
                reps: m.reps,
            };
        }
        out
    }

    /// The profile's forward + backward + optimizer (ms) and its bound.
    pub fn compute(&self) -> Measured {
        let phases = [self.forward, self.backward, self.optimizer];
        Measured {
            ms: phases.iter().map(|m| m.ms).sum(),
            uncertainty_ms: phases.iter().map(|m| m.uncertainty_ms).sum(),
            reps: phases.iter().map(|m| m.reps).min().unwrap_or(1),
        }
    }
}

/// How long a phase must last for one reading of it, with a clock of
/// resolution `r` ms, to be resolved: 100 ticks (the reading's bound of 2
/// ticks is then 2 % of it), and at least 0.2 ms. Below it a step's
/// phases are profiled in bursts, and the timeline splits ordinary steps
/// as the profile does (`PhaseProfile::split`).
pub fn resolved_ms(r: f64) -> f64 {
    (100.0 * r).max(0.2)
}

/// FLOPs of one optimizer step of an MLP from its widths: forward
/// 2·B·Σ I·O per micro-batch; backward twice that (dW and dX), less the
/// first layer's dX, which is not needed. What the anatomy sets the
/// measured forward : backward beside.
pub fn step_flops(widths: &[usize], batch: usize, accumulation: usize) -> (f64, f64) {
    let macs: Vec<usize> = widths.windows(2).map(|w| w[0] * w[1]).collect();
    layers_step_flops(&macs, batch, accumulation)
}

impl crate::experiment::Experiment {
    /// FLOPs of one optimizer step's forwards and backwards, all its
    /// micro-batches: an MLP's from its widths, a transformer's from its
    /// shape (`GptShape::step_flops`).
    pub fn step_flops(&self) -> (f64, f64) {
        let rows = self.batch_size * self.grad_accumulation;
        match self.gpt() {
            Some(g) => g.shape().step_flops(rows),
            None => {
                let macs: Vec<usize> = crate::model::Layout::new(self).layers.iter().map(|l| l.macs()).collect();
                crate::engine::profile::layers_step_flops(&macs, self.batch_size, self.grad_accumulation)
            }
        }
    }
}

/// `step_flops` from each layer's multiply-adds a row (`LayerShape::macs`:
/// a conv layer's F·C·K·K·P, a pool's 0): the first layer's ∂x is left out
/// of backward, as the engine skips it.
pub fn layers_step_flops(macs: &[usize], batch: usize, accumulation: usize) -> (f64, f64) {
    let rows = (batch * accumulation) as f64;
    let forward: f64 = macs.iter().map(|&m| 2.0 * rows * m as f64).sum();
    let first_dx = macs.first().map_or(0.0, |&m| 2.0 * rows * m as f64);
    (forward, 2.0 * forward - first_dx)
}

/// How long a burst runs: long enough that the clock's resolution is a
/// small part of it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Burst {
    /// A burst stops once it ran this long…
    pub target_ms: f64,
    /// … or after this many repetitions.
    pub max_reps: u32,
    /// The clock's resolution (ms).
    pub resolution_ms: f64,
    /// A phase that lasts this long is resolved by its one reading, and
    /// its step is profiled without bursts.
    pub resolved_ms: f64,
}

impl Burst {
    /// Bursts of 100 clock ticks (at least 0.2 ms), at most 1,000
    /// repetitions: each figure within 2 % of itself from the clock.
    pub fn for_clock() -> Burst {
        let r = clock_resolution_ms();
        let target_ms = resolved_ms(r);
        Burst { target_ms, max_reps: 1000, resolution_ms: r, resolved_ms: target_ms }
    }

    /// Repeats `f` until the burst ran `target_ms` (at least once), after
    /// one untimed repetition (warm caches), in `ROUNDS` rounds of the same
    /// repetitions: the fastest round's total ms and the repetitions. The
    /// fastest, because a round the thread was taken off the core for (a
    /// shared machine, the browser's other threads) only ever reads longer;
    /// one such round read backward 10× forward on a busy machine.
    pub fn run<E>(&self, mut f: impl FnMut() -> Result<(), E>) -> Result<(f64, u32), E> {
        f()?;
        let t0 = Instant::now();
        let mut reps = 0;
        let first = loop {
            f()?;
            reps += 1;
            let elapsed = ms(t0);
            if elapsed >= self.target_ms || reps >= self.max_reps {
                break elapsed;
            }
        };
        let mut best = first;
        for _ in 1..ROUNDS {
            let t0 = Instant::now();
            for _ in 0..reps {
                f()?;
            }
            best = best.min(ms(t0));
        }
        Ok((best, reps))
    }

    /// Repeats `f` exactly `reps` times, in `ROUNDS` rounds: the fastest
    /// round's total ms.
    pub fn fixed(reps: u32, mut f: impl FnMut()) -> f64 {
        (0..ROUNDS)
            .map(|_| {
                let t0 = Instant::now();
                for _ in 0..reps {
                    f();
                }
                ms(t0)
            })
            .fold(f64::INFINITY, f64::min)
    }
}

/// Rounds of a burst; the fastest counts (`Burst::run`).
pub const ROUNDS: usize = 3;

/// Sums bursts into a phase's figure (one burst per micro-batch).
#[derive(Clone, Copy, Debug, Default)]
pub struct BurstSum {
    ms: f64,
    uncertainty_ms: f64,
    reps: u32,
}

impl BurstSum {
    /// Adds a burst of `reps` repetitions that took `total_ms`, less
    /// `restore_ms` for the same number of restores (0 when none).
    pub fn add(&mut self, total_ms: f64, restore_ms: Option<f64>, reps: u32, r: f64) {
        let reads = if restore_ms.is_some() { 4.0 } else { 2.0 };
        self.ms += ((total_ms - restore_ms.unwrap_or(0.0)) / reps as f64).max(0.0);
        self.uncertainty_ms += reads * r / reps as f64;
        self.reps = if self.reps == 0 { reps } else { self.reps.min(reps) };
    }

    pub fn measured(&self) -> Measured {
        Measured { ms: self.ms, uncertainty_ms: self.uncertainty_ms, reps: self.reps }
    }
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}

/// The resolution of the clock (`web_time::Instant`: `performance.now()`
/// on the web) in ms: the smallest step it was seen to take, measured once.
pub fn clock_resolution_ms() -> f64 {
    static RESOLUTION: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RESOLUTION.get_or_init(measure_resolution)
}

fn measure_resolution() -> f64 {
    let start = Instant::now();
    let mut smallest = f64::INFINITY;
    let mut last = start;
    let mut ticks = 0;
    // Up to 20 ticks of the clock, or 5 ms.
    while ticks < 20 && start.elapsed().as_secs_f64() < 5e-3 {
        let now = Instant::now();
        let step = (now - last).as_secs_f64() * 1e3;
        if step > 0.0 {
            smallest = smallest.min(step);
            ticks += 1;
            last = now;
        }
    }
    if smallest.is_finite() {
        smallest
    } else {
        5.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_profiles_one_step_in_every() {
        let s = ProfileSchedule::default();
        let profiled: Vec<u64> = (0..350).filter(|&t| s.profiles(t)).collect();
        assert_eq!(profiled, [2, 102, 202, 302]);
        assert!(!ProfileSchedule { every: 0, offset: 0 }.profiles(0));
    }

    #[test]
    fn a_burst_runs_to_its_target_and_states_its_uncertainty() {
        let burst = Burst {
            target_ms: 1.0,
            max_reps: 1_000_000,
            resolution_ms: clock_resolution_ms(),
            resolved_ms: f64::INFINITY,
        };
        let mut x = 0u64;
        let (total, reps) = burst
            .run(|| {
                for i in 0..1000 {
                    x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
                }
                Ok::<(), ()>(())
            })
            .unwrap();
        // The fastest of the rounds may be under the target the first ran to.
        assert!(total > 0.0 && reps >= 1, "{total} ms in {reps}");
        let mut sum = BurstSum::default();
        sum.add(total, None, reps, burst.resolution_ms);
        sum.add(total, Some(total / 2.0), reps, burst.resolution_ms);
        let m = sum.measured();
        assert!((m.ms - 1.5 * total / reps as f64).abs() < 1e-12);
        assert!((m.uncertainty_ms - 6.0 * burst.resolution_ms / reps as f64).abs() < 1e-15);
        // A restore that took longer than the whole burst reads 0, not less.
        let mut odd = BurstSum::default();
        odd.add(1.0, Some(2.0), 1, 0.001);
        assert_eq!(odd.measured().ms, 0.0);
    }

    #[test]
    fn a_split_keeps_the_profile_s_proportions_and_bounds_them() {
        let m = |ms: f64, u: f64| Measured { ms, uncertainty_ms: u, reps: 100 };
        let profile = PhaseProfile {
            step: 7,
            path: ProfilePath::CpuBurst,
            forward: m(0.016, 0.0001),
            backward: m(0.030, 0.0001),
            optimizer: m(0.004, 0.0001),
            resolution_ms: 0.005,
        };
        // A step whose phases the clock read as 0.1 ms in all.
        let [f, b, o] = profile.split(0.1);
        assert!((f.ms + b.ms + o.ms - 0.1).abs() < 1e-15);
        assert!((f.ms - 0.032).abs() < 1e-12 && (b.ms - 0.06).abs() < 1e-12, "{f:?} {b:?}");
        assert!((b.ms / f.ms - 0.030 / 0.016).abs() < 1e-9);
        // forward at its top: 0.0161 / (0.0161 + 0.0338) = 0.32265, off
        // 0.00265 of the share; at its bottom 0.0159 / 0.0501 = 0.31737.
        assert!((f.uncertainty_ms - 0.1 * (0.0161 / 0.0499 - 0.32)).abs() < 1e-12, "{f:?}");
        assert!(profile.compute().ms == 0.05 && (profile.compute().uncertainty_ms - 0.0003).abs() < 1e-15);
        // Nothing profiled: nothing to split by.
        let none = PhaseProfile { forward: m(0.0, 0.0), backward: m(0.0, 0.0), optimizer: m(0.0, 0.0), ..profile };
        assert_eq!(none.split(1.0)[0].ms, 0.0);
        assert_eq!(resolved_ms(0.005), 0.5);
        assert_eq!(resolved_ms(1e-6), 0.2);
    }

    #[test]
    fn the_clock_resolution_is_measured() {
        let r = clock_resolution_ms();
        assert!(r > 0.0 && r < 1.0, "{r} ms");
    }
}
