//! Ctrl-C: one flag that reading, training and evaluating look at between
//! their parts, below every command that reads it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by Ctrl-C (SIGINT): reading, training and evaluating look at it
/// between their parts (rows read, micro-batches, evaluation chunks).
pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

pub(crate) fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
