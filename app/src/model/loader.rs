//! The "slow data loader" lesson: a loader worker that needs `delay_ms`
//! of wall time per batch and may hold up to `prefetch` finished batches
//! ahead of the training loop (as a PyTorch DataLoader worker with
//! `prefetch_factor`). Which rows a batch holds is still the engine's
//! batcher's business; the loader adds only the time, really waited, so
//! the timeline's data part shows the GPU idling.
//!
//! The worker is simulated in wall-clock time: it starts a batch as soon
//! as it is free and the queue has room, and each takes `delay_ms`.
//! Without prefetch (0) a batch is only started when a step asks for it,
//! so every step waits the whole delay.

use std::collections::VecDeque;

/// The loader's schedule, in milliseconds on one clock.
#[derive(Clone, Debug)]
pub struct Loader {
    pub delay_ms: f64,
    pub prefetch: usize,
    /// Completion times of batches loading or loaded, oldest first.
    queue: VecDeque<f64>,
    /// When the worker finishes its current batch.
    free_at: f64,
}

impl Loader {
    pub fn new(delay_ms: f64, prefetch: usize, now: f64) -> Loader {
        let mut loader = Loader { delay_ms, prefetch, queue: VecDeque::new(), free_at: now };
        loader.refill(now);
        loader
    }

    pub fn active(&self) -> bool {
        self.delay_ms > 0.0
    }

    /// Starts batches while the queue has room (the worker runs one at a
    /// time, each from when it was free and there was room).
    fn refill(&mut self, room_since: f64) {
        while self.queue.len() < self.prefetch {
            let start = self.free_at.max(room_since);
            self.free_at = start + self.delay_ms;
            self.queue.push_back(self.free_at);
        }
    }

    /// Batches finished by `now` (at most `prefetch`).
    pub fn ready(&self, now: f64) -> usize {
        self.queue.iter().take_while(|&&t| t <= now).count()
    }

    /// Takes `n` batches for steps asked for at `now`; returns when the
    /// last one is ready (≥ now). Slots freed by taking start new loads.
    pub fn take(&mut self, n: usize, now: f64) -> f64 {
        let mut ready_at = now;
        for _ in 0..n {
            let done = match self.queue.pop_front() {
                Some(t) => t,
                None => {
                    // Nothing in the queue: load on demand.
                    let start = self.free_at.max(ready_at);
                    self.free_at = start + self.delay_ms;
                    self.free_at
                }
            };
            ready_at = ready_at.max(done);
            // Taking it freed a slot from the moment it was taken.
            self.refill(ready_at);
        }
        ready_at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_prefetch_every_batch_waits_the_whole_delay() {
        let mut l = Loader::new(10.0, 0, 0.0);
        assert_eq!(l.ready(100.0), 0);
        assert_eq!(l.take(1, 0.0), 10.0);
        // Computing for 30 ms does not help: nothing loads ahead.
        assert_eq!(l.take(1, 40.0), 50.0);
        assert_eq!(l.take(2, 50.0), 70.0);
    }

    #[test]
    fn prefetch_hides_the_delay_behind_compute() {
        let mut l = Loader::new(10.0, 2, 0.0);
        // Two batches load back to back: ready at 10 and 20.
        assert_eq!(l.ready(15.0), 1);
        assert_eq!(l.take(1, 20.0), 20.0, "already loaded");
        // Taking the first at 20 freed a slot: the worker (free since 20)
        // loads a third by 30. A step that computes 15 ms then finds it.
        assert_eq!(l.take(1, 35.0), 35.0);
        assert_eq!(l.take(1, 50.0), 50.0);
    }

    #[test]
    fn a_loader_slower_than_the_step_still_starves_it() {
        // 20 ms per batch, 5 ms steps: throughput is the loader's.
        let mut l = Loader::new(20.0, 4, 0.0);
        let mut now = 100.0; // the queue is full by now
        let mut waited = 0.0;
        for _ in 0..40 {
            let ready = l.take(1, now);
            waited += ready - now;
            now = ready + 5.0;
        }
        // In steady state each step waits 20 − 5 = 15 ms.
        assert!((waited / 40.0 - 15.0).abs() < 2.5, "mean wait {}", waited / 40.0);
    }
}
