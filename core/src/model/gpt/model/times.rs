//! Where a transformer's forward or backward spends its time: by op kind
//! in each block, plus the embedding and the head, from the clock around
//! each op (`web_time`: the monotonic clock natively, `performance.now()`
//! in the browser). The page's timeline splits the forward and backward
//! phases with it; what the ops do not account for (the phase's own
//! bookkeeping) stays the phase's, so the parts still add up to it.

use serde::{Deserialize, Serialize};
use web_time::Instant;

/// The kinds of op in a block, in `OpTimes::blocks` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// ln_1 and ln_2.
    LayerNorm = 0,
    /// q, k, v projection (with the q/k LayerNorms), attention, output
    /// projection.
    Attention = 1,
    /// c_fc, GELU, c_proj.
    Mlp = 2,
    /// The two residual adds (their copies in backward).
    Residual = 3,
    /// Activation checkpointing: the block's forward run again in backward.
    Recompute = 4,
}

impl OpKind {
    pub const ALL: [OpKind; 5] =
        [OpKind::LayerNorm, OpKind::Attention, OpKind::Mlp, OpKind::Residual, OpKind::Recompute];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::LayerNorm => "layernorm",
            OpKind::Attention => "attention",
            OpKind::Mlp => "mlp",
            OpKind::Residual => "residual",
            OpKind::Recompute => "recompute",
        }
    }
}

/// Milliseconds of one forward or backward, by part.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OpTimes {
    /// The token and position embeddings.
    pub embedding: f64,
    /// Per block, by `OpKind`.
    pub blocks: Vec<[f64; 5]>,
    /// ln_f, the head's matmul and the cross-entropy.
    pub head: f64,
}

impl OpTimes {
    pub(super) fn reset(&mut self, blocks: usize) {
        self.embedding = 0.0;
        self.head = 0.0;
        self.blocks.clear();
        self.blocks.resize(blocks, [0.0; 5]);
    }

    /// Adds `other` (another micro-batch's) into these.
    pub fn add(&mut self, other: &OpTimes) {
        self.embedding += other.embedding;
        self.head += other.head;
        if self.blocks.len() < other.blocks.len() {
            self.blocks.resize(other.blocks.len(), [0.0; 5]);
        }
        for (a, b) in self.blocks.iter_mut().zip(&other.blocks) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }

    /// Every part's milliseconds.
    pub fn total(&self) -> f64 {
        self.embedding + self.head + self.blocks.iter().flatten().sum::<f64>()
    }

    /// The milliseconds of one kind of op over all blocks.
    pub fn of_kind(&self, kind: OpKind) -> f64 {
        self.blocks.iter().map(|b| b[kind as usize]).sum()
    }
}

/// A stopwatch read between ops.
pub(super) struct Lap(Instant);

impl Lap {
    pub(super) fn start() -> Lap {
        Lap(Instant::now())
    }

    /// Milliseconds since the last split (or the start).
    pub(super) fn split(&mut self) -> f64 {
        let now = Instant::now();
        let ms = now.duration_since(self.0).as_secs_f64() * 1e3;
        self.0 = now;
        ms
    }
}
