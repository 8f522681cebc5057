//! What a sharded run's ranks did, summed over the run: each rank's
//! compute and wait per step, and which rank was the slowest how often
//! (the straggler every other rank waited for).

use stepscope_core::StepMetrics;

#[derive(Default)]
pub(crate) struct RankSummary {
    steps: u64,
    /// Per rank: compute ms, wait ms, steps it was the slowest.
    ranks: Vec<(f64, f64, u64)>,
    communication_ms: f64,
}

impl RankSummary {
    pub(crate) fn add(&mut self, m: &StepMetrics) {
        if m.ranks.is_empty() {
            return;
        }
        if self.ranks.len() != m.ranks.len() {
            self.ranks = vec![(0.0, 0.0, 0); m.ranks.len()];
        }
        let slowest = (0..m.ranks.len()).max_by(|&a, &b| m.ranks[a].compute_ms().total_cmp(&m.ranks[b].compute_ms()));
        for (i, (r, sum)) in m.ranks.iter().zip(&mut self.ranks).enumerate() {
            sum.0 += r.compute_ms();
            sum.1 += r.wait_ms;
            sum.2 += u64::from(Some(i) == slowest);
        }
        self.communication_ms += m.phases.communication_ms;
        self.steps += 1;
    }

    /// One line for the end of the run, or None for an unsharded run.
    pub(crate) fn line(&self) -> Option<String> {
        if self.steps == 0 {
            return None;
        }
        let n = self.steps as f64;
        let each: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .map(|(i, (compute, wait, _))| format!("rank {i} {:.2} + wait {:.2}", compute / n, wait / n))
            .collect();
        let (slowest, (_, _, times)) =
            self.ranks.iter().enumerate().max_by_key(|(_, r)| r.2).expect("a sharded run has ranks");
        Some(format!(
            "ranks, ms a step: {}; all-reduce and wait {:.2}; slowest: rank {slowest} ({times} of {} steps)",
            each.join(", "),
            self.communication_ms / n,
            self.steps
        ))
    }
}
