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
//! Where the clock cannot resolve a CPU step's phases (each lasts less
//! than `resolved_ms`: a small network's forward takes microseconds, a
//! browser's clock ticks every 5 or 100 µs), one step's readings are
//! mostly rounding, and on a loaded machine one descheduled phase in a
//! few dozen steps outweighs the rest. Such steps keep their compute as
//! the clock read it (data + forward + backward + optimizer, which the
//! step's wall time needs), and forward, backward and optimizer are that
//! compute split as the profiled steps split it (`PhaseProfile::split`,
//! the same summary the profile table shows): the timeline and the
//! profile then agree by construction, and the anatomy says so. Before
//! the first profile the compute is unsplit.
//!
//! Measured parts can overlap (a GPU pass runs while the CPU waits for it),
//! so, as PyTorch's profiler does, time is assigned by a fixed priority,
//! each part taking at most what is left of the wall time; `other` is what
//! no measurement claims (clock rounding between the page's and the
//! worker's clocks). The parts therefore always sum to the wall time.

use stepscope_core::engine::profile::{resolved_ms, Measured, PhaseProfile, ProfilePath};

/// Part names in display order; `other` last.
pub const PHASES: [&str; 13] = [
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
    "communication",
    "other",
];

/// What each part is, for the legend's titles.
pub const MEANINGS: [&str; 13] = [
    "the step's rows: batching on the CPU, gathering on the GPU, waits for a slow loader",
    "forward pass and loss",
    "backward pass and regularization",
    "gradient norm, clipping, learning rate and the update",
    "a step timed only whole: the fused GPU step, no per-phase timestamps, or CPU phases below the clock's resolution before the first profiled step",
    "automatic checkpoints: the loop's wait",
    "views and per-layer statistics",
    "profiled steps: their bursts beyond the step itself",
    "the engine's own bookkeeping: commands, calls between phases, spike checks; on the GPU, submits and readbacks",
    "messages between the page and the worker: encoding, posting, scheduling",
    "the page taking in the report",
    "a sharded run's all-reduce: the shards' gradients summed in order, and the wait for the slowest rank",
    "what no measurement claims: clock rounding",
];

/// Indices of the parts in PHASES, for the views that read one by name.
pub mod part {
    pub const COMMUNICATION: usize = 11;
    pub const DATA: usize = 0;
    pub const FORWARD: usize = 1;
    pub const UNSPLIT: usize = 4;
    pub const LOGGING: usize = 6;
}

/// Index of `other` in PHASES.
pub const OTHER: usize = 12;

/// Priority in which measured time is assigned (indices into PHASES).
const PRIORITY: [usize; 12] = [1, 2, 3, 11, 4, 0, 5, 6, 7, 8, 9, 10];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTiming {
    pub step: u64,
    pub wall_ms: f64,
    /// Milliseconds per part, in PHASES order; sums to `wall_ms`.
    pub parts: [f64; 13],
    /// Where its forward, backward and optimizer come from.
    pub split: Split,
}

/// Where a step's forward, backward and optimizer in the timeline come
/// from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Split {
    /// Each phase as the clock (or the GPU's timestamps) read it.
    #[default]
    Readings,
    /// The step's compute as the clock read it, split as the profiled
    /// steps split theirs: its phases are below the clock's resolution.
    Profiled,
    /// Below the clock's resolution and nothing profiled yet: unsplit.
    Unsplit,
}

/// Splits a frame's CPU steps (`computed`: [data, forward, backward,
/// optimizer, unsplit] ms per step, as the clock read them) where the
/// clock `r` ms does not resolve their phases: when the frame's mean
/// forward, backward or optimizer is under `resolved_ms(r)`, each step's
/// forward + backward + optimizer is split as `profile` splits it, or
/// (none yet) is unsplit. Each step's compute is unchanged.
pub fn split_cpu_frame(computed: &mut [[f64; 5]], profile: Option<&PhaseProfile>, r: f64) -> Split {
    let n = computed.len().max(1) as f64;
    let mean = |i: usize| computed.iter().map(|c| c[i]).sum::<f64>() / n;
    if (1..=3).all(|i| mean(i) >= resolved_ms(r)) {
        return Split::Readings;
    }
    let profile = profile.filter(|p| p.compute().ms > 0.0);
    for c in computed.iter_mut() {
        let compute = c[1] + c[2] + c[3];
        match profile {
            Some(p) => {
                let [f, b, o] = p.split(compute);
                c[1..4].copy_from_slice(&[f.ms, b.ms, o.ms]);
            }
            None => {
                c[1..4].fill(0.0);
                c[4] += compute;
            }
        }
    }
    if profile.is_some() {
        Split::Profiled
    } else {
        Split::Unsplit
    }
}

/// The recent profiled steps of the newest one's path, averaged: each
/// figure's uncertainty is the mean of theirs (a bound, as each is). The
/// profile table shows it, and the timeline splits by it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileSummary {
    pub path: ProfilePath,
    pub steps: Vec<u64>,
    pub forward: Measured,
    pub backward: Measured,
    pub optimizer: Measured,
    pub resolution_ms: f64,
}

pub fn profile_summary(profiles: &[PhaseProfile]) -> Option<ProfileSummary> {
    let path = profiles.last()?.path;
    let same: Vec<&PhaseProfile> = profiles.iter().filter(|p| p.path == path).collect();
    let n = same.len() as f64;
    let mean = |f: fn(&PhaseProfile) -> Measured| Measured {
        ms: same.iter().map(|p| f(p).ms).sum::<f64>() / n,
        uncertainty_ms: same.iter().map(|p| f(p).uncertainty_ms).sum::<f64>() / n,
        reps: same.iter().map(|p| f(p).reps).min().unwrap_or(1),
    };
    Some(ProfileSummary {
        path,
        steps: same.iter().map(|p| p.step).collect(),
        forward: mean(|p| p.forward),
        backward: mean(|p| p.backward),
        optimizer: mean(|p| p.optimizer),
        resolution_ms: same.iter().map(|p| p.resolution_ms).fold(0.0, f64::max),
    })
}

impl ProfileSummary {
    /// As one profile (of the newest step), to split by.
    pub fn profile(&self) -> PhaseProfile {
        PhaseProfile {
            step: self.steps.last().copied().unwrap_or(0),
            path: self.path,
            forward: self.forward,
            backward: self.backward,
            optimizer: self.optimizer,
            resolution_ms: self.resolution_ms,
        }
    }

    /// Whether it profiled the CPU engine (the profile the CPU's steps
    /// are split by).
    pub fn on_cpu(&self) -> bool {
        matches!(self.path, ProfilePath::CpuBurst | ProfilePath::CpuClock)
    }
}

/// Splits `wall_ms` into the parts from measured times (in PHASES order,
/// without `other`).
pub fn assign(wall_ms: f64, measured: [f64; 12]) -> [f64; 13] {
    let mut parts = [0.0; 13];
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
pub fn means(entries: &[StepTiming]) -> (f64, [f64; 13]) {
    if entries.is_empty() {
        return (0.0, [0.0; 13]);
    }
    let n = entries.len() as f64;
    let mut parts = [0.0; 13];
    for e in entries {
        for (sum, v) in parts.iter_mut().zip(e.parts) {
            *sum += v / n;
        }
    }
    (entries.iter().map(|e| e.wall_ms).sum::<f64>() / n, parts)
}

/// The recent steps' means (`means`), where their forward, backward and
/// optimizer were split by profiles (none read as it was): those three
/// split as `summary` splits them, with their bounds. The legend then
/// shows the profile table's own split of the steps' mean compute, exactly,
/// whichever profile split each step when it was recorded.
pub fn shown_means(
    entries: &[StepTiming],
    summary: Option<&ProfileSummary>,
) -> (f64, [f64; 13], Option<[Measured; 3]>) {
    let (wall, mut parts) = means(entries);
    let profiled =
        entries.iter().any(|e| e.split == Split::Profiled) && entries.iter().all(|e| e.split != Split::Readings);
    let Some(summary) = summary.filter(|s| profiled && s.on_cpu()) else { return (wall, parts, None) };
    let split = summary.profile().split(parts[1] + parts[2] + parts[3]);
    for (part, m) in parts[1..4].iter_mut().zip(&split) {
        *part = m.ms;
    }
    (wall, parts, Some(split))
}

pub use stepscope_core::engine::profile::step_flops;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_always_sum_to_the_wall_time() {
        let m = [1.0, 2.0, 4.0, 1.0, 0.0, 0.5, 0.5, 0.2, 0.3, 0.2, 0.1, 0.0];
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

    fn profile(f: f64, b: f64, o: f64) -> PhaseProfile {
        let m = |ms: f64| Measured { ms, uncertainty_ms: 0.0001, reps: 200 };
        PhaseProfile {
            step: 40,
            path: ProfilePath::CpuBurst,
            forward: m(f),
            backward: m(b),
            optimizer: m(o),
            resolution_ms: 0.005,
        }
    }

    #[test]
    fn unresolved_steps_are_split_as_the_profile_splits_them() {
        // The page's default network on a 5 µs clock: forward 16 µs,
        // backward 5 µs, optimizer 3 µs a step in the profile; ordinary
        // steps read 0, 5, 10 or 20 µs per phase, one of them with a
        // descheduled backward of 1 ms.
        let p = profile(0.016, 0.005, 0.003);
        let mut frame =
            vec![[0.001, 0.015, 0.0, 0.005, 0.0], [0.0, 0.02, 1.0, 0.0, 0.0], [0.0, 0.01, 0.005, 0.005, 0.0]];
        let before: Vec<f64> = frame.iter().map(|c| c.iter().sum()).collect();
        assert_eq!(split_cpu_frame(&mut frame, Some(&p), 0.005), Split::Profiled);
        for (c, sum) in frame.iter().zip(before) {
            // Each step's compute as the clock read it; its phases in the
            // profile's proportions.
            assert!((c.iter().sum::<f64>() - sum).abs() < 1e-12, "{c:?}");
            assert!((c[2] / c[1] - 0.005 / 0.016).abs() < 1e-9 && (c[3] / c[1] - 0.003 / 0.016).abs() < 1e-9);
        }
        // The readings' own backward : forward (1.005 : 0.045) is gone.
        let (f, b): (f64, f64) = (frame.iter().map(|c| c[1]).sum(), frame.iter().map(|c| c[2]).sum());
        assert!((b / f - 0.3125).abs() < 1e-9, "{b} / {f}");
        // Nothing profiled yet: the compute is unsplit, not guessed.
        let mut early = vec![[0.0, 0.02, 0.005, 0.0, 0.0]];
        assert_eq!(split_cpu_frame(&mut early, None, 0.005), Split::Unsplit);
        assert_eq!(early[0], [0.0, 0.0, 0.0, 0.0, 0.025]);
        // Phases the clock resolves stay as read.
        let mut long = vec![[0.1, 30.0, 55.0, 2.0, 0.0]];
        assert_eq!(split_cpu_frame(&mut long, Some(&p), 0.005), Split::Readings);
        assert_eq!(long[0], [0.1, 30.0, 55.0, 2.0, 0.0]);
        // One unresolved phase is enough: the optimizer at 0.1 ms.
        let mut mixed = vec![[0.0, 30.0, 55.0, 0.1, 0.0]];
        assert_eq!(split_cpu_frame(&mut mixed, Some(&p), 0.005), Split::Profiled);
    }

    #[test]
    fn the_legend_splits_the_mean_compute_as_the_profile_table_does() {
        let timing = |forward: f64, backward: f64, split: Split| {
            let mut parts = [0.0; 13];
            parts[1..4].copy_from_slice(&[forward, backward, 0.002]);
            parts[OTHER] = 0.1;
            StepTiming { step: 0, wall_ms: forward + backward + 0.102, parts, split }
        };
        // Two steps split by an older profile, one by a newer.
        let recent = [timing(0.020, 0.004, Split::Profiled), timing(0.018, 0.006, Split::Profiled)];
        let summary = profile_summary(&[profile(0.016, 0.005, 0.003)]).unwrap();
        let (wall, parts, split) = shown_means(&recent, Some(&summary));
        let split = split.unwrap();
        assert!((parts[2] / parts[1] - 0.005 / 0.016).abs() < 1e-9, "{parts:?}");
        assert!((parts.iter().sum::<f64>() - wall).abs() < 1e-12);
        assert_eq!(parts[1], split[0].ms);
        // Readings stay readings.
        let read = [timing(0.020, 0.004, Split::Readings)];
        let (_, parts, split) = shown_means(&read, Some(&summary));
        assert!(split.is_none() && parts[1] == 0.020);
    }

    #[test]
    fn the_summary_is_the_mean_of_the_newest_path_s_profiles() {
        let mut later = profile(0.018, 0.007, 0.003);
        later.step = 140;
        let gpu = PhaseProfile { path: ProfilePath::GpuTimestamps, ..profile(1.0, 1.0, 1.0) };
        let s = profile_summary(&[gpu, profile(0.016, 0.005, 0.003), later]).unwrap();
        assert_eq!((s.path, s.steps.clone()), (ProfilePath::CpuBurst, vec![40, 140]));
        assert!((s.forward.ms - 0.017).abs() < 1e-12 && (s.backward.ms - 0.006).abs() < 1e-12);
        assert!(s.on_cpu() && s.profile().step == 140);
        assert!(profile_summary(&[]).is_none());
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
