//! Milliseconds since an instant: the one reading of the clock that the
//! loop's frame, profiler and report and the engine's host share.

use web_time::Instant;

/// Milliseconds elapsed since `t`.
pub(crate) fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
