//! A transformer's step by block and op (the anatomy's "By block and op"):
//! one step's op times and that same step's phases, both from the CPU
//! engine's clock, in rows that add up to the step.
//!
//! - The rows: the embedding, each block's ops, the head, the rest of each
//!   phase (its bookkeeping between ops), the data and the optimizer. The
//!   ops run inside their phase's reading, so the rest is never negative,
//!   and the rows sum to the step's data + forward + backward + optimizer:
//!   each percentage is of that sum, and they add up to 100 %.
//! - Stalls: a clock around an op also counts time the worker was off the
//!   core (a loaded machine, the browser's other threads; in the first
//!   steps, memory touched for the first time), and nothing in the step
//!   can tell that time apart from the op's own. On a 2-core machine
//!   running 7 jobs, the default transformer's layernorm read 0.4 ms in
//!   one block and 4.7 ms in the next, within one step. The blocks can:
//!   every block has the same shape, so an op costs about the same in each.
//!   An op that took more than `STALL_FACTOR` times the same op's fastest
//!   reading in the other blocks, by more than `STALL_TICKS` ticks of the
//!   clock, is flagged as stalled, and the time beyond that fastest reading
//!   is shown as a stall, not as the op's cost (as `Burst::run` keeps the
//!   fastest round). With one block, forward and backward check each
//!   other: a matmul's backward is twice its forward's FLOPs. The stalled
//!   time stays in its row, so the rows still add up to the step.

use serde::{Deserialize, Serialize};
use stepscope_core::engine::PhaseTimes;
use stepscope_core::model::gpt::{OpKind, OpTimes};

/// An op flagged as stalled took more than this many times the same op's
/// fastest reading elsewhere in the step…
pub const STALL_FACTOR: f64 = 4.0;
/// … and more than this many ticks of the clock beyond it.
pub const STALL_TICKS: f64 = 20.0;

/// One step of a transformer on the CPU engine: its op times and its
/// phases, the same step on the same clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpStep {
    /// The step (0-based).
    pub step: u64,
    pub forward: OpTimes,
    pub backward: OpTimes,
    /// The step's phases (`StepMetrics::phases` of this step).
    pub phases: PhaseTimes,
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct OpRow {
    pub name: String,
    /// "embedding", an `OpKind` name, "head", "rest", "data" or "optimizer".
    pub kind: &'static str,
    pub forward_ms: f64,
    pub backward_ms: f64,
    /// forward + backward, or the data's or optimizer's time.
    pub ms: f64,
    /// Its share of the step, %.
    pub percent: f64,
    /// Time beyond what the same op took elsewhere in the step, where it
    /// is flagged as stalled (0: not flagged).
    pub stalled_ms: f64,
}

/// The step by block and op.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTable {
    pub step: u64,
    pub phases: PhaseTimes,
    /// The rows' sum: data + forward + backward + optimizer.
    pub step_ms: f64,
    pub rows: Vec<OpRow>,
}

impl OpTable {
    /// Every row's flagged stall time.
    pub fn stalled_ms(&self) -> f64 {
        self.rows.iter().map(|r| r.stalled_ms).sum()
    }

    /// The share of the step (%) that ops of `kind` cost, their stalls
    /// left out.
    pub fn percent_of(&self, kind: OpKind) -> f64 {
        let ms: f64 = self.rows.iter().filter(|r| r.kind == kind.name()).map(|r| r.ms - r.stalled_ms).sum();
        100.0 * ms / self.step_ms.max(f64::MIN_POSITIVE)
    }
}

/// Builds the table of step `s`, read with a clock of resolution `r` ms.
pub fn op_table(s: &OpStep, r: f64) -> OpTable {
    let (f, b) = (&s.forward, &s.backward);
    // Each phase is at least its ops (they ran inside its reading).
    let mut phases = s.phases;
    phases.forward_ms = phases.forward_ms.max(f.total());
    phases.backward_ms = phases.backward_ms.max(b.total());
    let mut rows = Vec::new();
    let mut row = |name: String, kind: &'static str, forward_ms: f64, backward_ms: f64, stalled_ms: f64| {
        let ms = forward_ms + backward_ms;
        rows.push(OpRow { name, kind, forward_ms, backward_ms, ms, percent: 0.0, stalled_ms });
    };
    row("embedding".into(), "embedding", f.embedding, b.embedding, 0.0);
    let blocks = f.blocks.len().min(b.blocks.len());
    for l in 0..blocks {
        for kind in OpKind::ALL {
            let k = kind as usize;
            let (fv, bv) = (f.blocks[l][k], b.blocks[l][k]);
            if kind == OpKind::Recompute && bv == 0.0 {
                continue;
            }
            let stalled = stall(&f.blocks, l, k, fv, b.blocks[l][k] / 2.0, kind, r)
                + stall(&b.blocks, l, k, bv, 2.0 * f.blocks[l][k], kind, r);
            row(format!("block {} · {}", l + 1, kind.name()), kind.name(), fv, bv, stalled);
        }
    }
    // The head is a matmul and the cross-entropy: its backward is about
    // twice its forward's FLOPs.
    let head_stall = beyond(f.head, b.head / 2.0, r) + beyond(b.head, 2.0 * f.head, r);
    row("head (ln_f, logits, cross-entropy)".into(), "head", f.head, b.head, head_stall);
    let rest = (phases.forward_ms - f.total(), phases.backward_ms - b.total());
    row("rest of the phase".into(), "rest", rest.0.max(0.0), rest.1.max(0.0), 0.0);
    row("data".into(), "data", 0.0, 0.0, 0.0);
    row("optimizer".into(), "optimizer", 0.0, 0.0, 0.0);
    let n = rows.len();
    rows[n - 2].ms = phases.data_ms.max(0.0);
    rows[n - 1].ms = phases.optimizer_ms.max(0.0);
    let step_ms: f64 = rows.iter().map(|r| r.ms).sum();
    for row in &mut rows {
        row.percent = 100.0 * row.ms / step_ms.max(f64::MIN_POSITIVE);
    }
    OpTable { step: s.step, phases, step_ms, rows }
}

/// The stall in `value`, the reading of op kind `k` in block `l` of one
/// direction (`blocks`): beyond the fastest reading of the same op in the
/// other blocks, or with one block beyond `other_direction` (the other
/// direction's reading scaled by the FLOP ratio, for the matmul ops).
fn stall(blocks: &[[f64; 5]], l: usize, k: usize, value: f64, other_direction: f64, kind: OpKind, r: f64) -> f64 {
    let fastest = blocks.iter().enumerate().filter(|&(i, _)| i != l).map(|(_, b)| b[k]).fold(f64::INFINITY, f64::min);
    if fastest.is_finite() {
        return beyond(value, fastest, r);
    }
    match kind {
        OpKind::Attention | OpKind::Mlp => beyond(value, other_direction, r),
        _ => 0.0,
    }
}

/// `value − expected` where `value` is more than `STALL_FACTOR` times
/// `expected` and more than `STALL_TICKS` ticks of the clock above it;
/// else 0.
fn beyond(value: f64, expected: f64, r: f64) -> f64 {
    let excess = value - expected;
    if value > STALL_FACTOR * expected && excess > STALL_TICKS * r {
        excess
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of the page's default transformer (3 blocks) as a 2-core
    /// machine reads it: attention 4 ms forward and 8 backward per block,
    /// the MLP 6 and 12, layernorm 0.5 and 1, residual 0.1 and 0.1.
    fn step() -> OpStep {
        let block = |_| [[0.5, 4.0, 6.0, 0.1, 0.0], [1.0, 8.0, 12.0, 0.1, 0.0]];
        let blocks: Vec<[[f64; 5]; 2]> = (0..3).map(block).collect();
        let forward = OpTimes { embedding: 0.2, blocks: blocks.iter().map(|b| b[0]).collect(), head: 3.0 };
        let backward = OpTimes { embedding: 0.3, blocks: blocks.iter().map(|b| b[1]).collect(), head: 6.0 };
        let phases = PhaseTimes {
            data_ms: 0.1,
            forward_ms: forward.total() + 0.4,
            backward_ms: backward.total() + 0.6,
            optimizer_ms: 2.0,
            ..PhaseTimes::default()
        };
        OpStep { step: 173, forward, backward, phases }
    }

    fn sums(t: &OpTable) -> (f64, f64) {
        (t.rows.iter().map(|r| r.ms).sum(), t.rows.iter().map(|r| r.percent).sum())
    }

    #[test]
    fn the_rows_add_up_to_the_step_they_name() {
        let s = step();
        let t = op_table(&s, 0.005);
        let p = &s.phases;
        let compute = p.data_ms + p.forward_ms + p.backward_ms + p.optimizer_ms;
        let (ms, percent) = sums(&t);
        assert!((ms - compute).abs() < 1e-9 && (t.step_ms - compute).abs() < 1e-9, "{ms} of {compute}");
        assert!((percent - 100.0).abs() < 1e-9, "{percent}");
        assert_eq!(t.stalled_ms(), 0.0, "a calm step has no stalls: {t:?}");
        let rest = t.rows.iter().find(|r| r.kind == "rest").unwrap();
        assert!((rest.forward_ms - 0.4).abs() < 1e-9 && (rest.backward_ms - 0.6).abs() < 1e-9);
        // Attention: 3 · 12 ms of the step's 107.7.
        assert!((t.percent_of(OpKind::Attention) - 100.0 * 36.0 / compute).abs() < 1e-9);
    }

    #[test]
    fn a_descheduled_op_is_flagged_and_the_rows_still_add_up() {
        // Block 3's MLP backward read 170 ms: the worker was off the core
        // for about 158 ms of it. The phase's reading holds the same stall.
        let mut s = step();
        s.backward.blocks[2][OpKind::Mlp as usize] = 170.0;
        s.phases.backward_ms += 158.0;
        let t = op_table(&s, 0.005);
        let (ms, percent) = sums(&t);
        assert!((ms - t.step_ms).abs() < 1e-9 && (percent - 100.0).abs() < 1e-9);
        let flagged: Vec<&OpRow> = t.rows.iter().filter(|r| r.stalled_ms > 0.0).collect();
        assert_eq!(flagged.len(), 1, "{flagged:?}");
        assert_eq!(flagged[0].name, "block 3 · mlp");
        assert!((flagged[0].stalled_ms - 158.0).abs() < 1e-9, "beyond the other blocks' 12 ms");
        // The MLPs' share is their cost without the stall: 3 · 18 ms.
        assert!((t.percent_of(OpKind::Mlp) - 100.0 * 54.0 / t.step_ms).abs() < 1e-9);
        let shares = t.percent_of(OpKind::Attention) + t.percent_of(OpKind::Mlp) + 100.0 * t.stalled_ms() / t.step_ms;
        assert!(shares <= 100.0 + 1e-9, "{shares}");
    }

    #[test]
    fn a_step_whose_phases_came_from_elsewhere_cannot_undercount_its_ops() {
        // Phases read shorter than the ops inside them (another step's, or
        // a phase cut at a frame): each phase is taken as at least its ops.
        let mut s = step();
        s.phases.forward_ms = 10.0;
        s.phases.backward_ms = 20.0;
        let t = op_table(&s, 0.005);
        let (ms, percent) = sums(&t);
        assert!((percent - 100.0).abs() < 1e-9);
        assert!((t.phases.forward_ms - s.forward.total()).abs() < 1e-12);
        assert!((ms - (0.1 + s.forward.total() + s.backward.total() + 2.0)).abs() < 1e-9);
        assert!(t.rows.iter().all(|r| r.ms >= 0.0 && r.percent <= 100.0));
    }

    #[test]
    fn one_block_checks_forward_against_backward() {
        let mut s = step();
        for t in [&mut s.forward, &mut s.backward] {
            t.blocks.truncate(1);
        }
        s.forward.blocks[0][OpKind::Attention as usize] = 60.0;
        let t = op_table(&s, 0.005);
        let row = t.rows.iter().find(|r| r.name == "block 1 · attention").unwrap();
        // Backward 8 ms: forward's FLOPs say 4.
        assert!((row.stalled_ms - 56.0).abs() < 1e-9, "{row:?}");
        // A jitter of a few ticks is not a stall, whatever the ratio.
        let mut small = step();
        small.backward.blocks[0][OpKind::Residual as usize] = 0.09;
        small.backward.blocks[1][OpKind::Residual as usize] = 0.01;
        assert_eq!(op_table(&small, 0.005).stalled_ms(), 0.0);
    }
}
