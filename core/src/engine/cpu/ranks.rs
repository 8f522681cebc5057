//! Data-parallel ranks on the CPU engine (ARCHITECTURE.md, "Ranks: the
//! same bits on any number of cores").
//!
//! With `shards` S > 1, each micro-batch of B rows is S shards of B/S rows.
//! A shard's forward and backward run on their own, its gradient summed
//! from zero into a buffer of its own (the loss scaled by 1/(k·S), so the
//! shards' gradients add up to the micro-batch's). The all-reduce then
//! adds the S buffers into the step's gradients in shard order, element by
//! element: ((g + g₀) + g₁) + … The bits depend on S alone; which rank
//! computed a shard, and how many ranks there were, change nothing. The
//! losses combine the same way (Σₛ lossₛ / S, in order).
//!
//! Natively the ranks are threads of this process (`CpuEngine::set_threads`),
//! rank r taking the shards r·S/R … (r+1)·S/R − 1 and, in the all-reduce,
//! the r-th slice of the parameters. In WebAssembly an engine is one rank;
//! the page's workers each hold one (the same shards and the same sums).
//!
//! The seam is here (`RemoteRanks`, `ShardResult`, `RankTimes`), a shard's
//! forward and backward in `shard` (the engine's ranks and a remote rank's
//! `ShardServer` alike), the threaded step and the all-reduce in `step`.

use super::gpt::GptNet;
use super::{CpuEngine, Work};
use crate::engine::Activations;
use crate::error::{zeros, Result};
use crate::model::Layout;

mod shard;
mod step;

pub use shard::ShardServer;
use step::reduce;

/// A rank's own buffers, for ranks past the first (the first uses the
/// engine's): activations and backward's buffers for one shard's rows.
pub(super) struct RankBuffers {
    acts: Activations,
    grad: Vec<Vec<f32>>,
    gpt: Option<Box<GptNet>>,
}

impl RankBuffers {
    fn new(layout: &Layout, rows: usize, checkpointing: bool) -> Result<RankBuffers> {
        let acts = if checkpointing {
            Activations::try_checkpointed(layout, rows)?
        } else {
            Activations::try_new(layout, rows)?
        };
        Ok(RankBuffers {
            acts,
            grad: layout
                .layers
                .iter()
                .map(|l| zeros(rows * l.units, "a rank's backward buffers"))
                .collect::<Result<_>>()?,
            gpt: match layout.gpt {
                Some(shape) => Some(Box::new(GptNet::new(shape, rows, checkpointing)?)),
                None => None,
            },
        })
    }

    fn work(&mut self) -> Work<'_> {
        Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt }
    }

    fn bytes(&self) -> u64 {
        let grad: usize = self.grad.iter().map(Vec::len).sum();
        let gpt = self.gpt.as_ref().map_or(0, |g| {
            let (a, att, scratch) = g.memory();
            a + att + scratch
        });
        (self.acts.bytes() + 4 * grad) as u64 + gpt
    }
}

/// One rank's part of the last step: its shards, the time it computed
/// (forward and backward of its shards) and the time it then waited for
/// the slowest rank before the all-reduce.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RankTimes {
    pub shards: usize,
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub wait_ms: f64,
}

impl RankTimes {
    pub fn compute_ms(&self) -> f64 {
        self.forward_ms + self.backward_ms
    }
}

/// The engine's ranks, when its experiment has shards.
pub(super) struct Ranks {
    /// Ranks asked for (`set_threads`); a step uses at most S.
    pub threads: usize,
    /// Buffers of ranks 1.. (allocated when first used).
    buffers: Vec<RankBuffers>,
    /// S shard gradients of P floats each.
    shard_grads: Vec<f32>,
    /// Each rank's part of the last step.
    pub last: Vec<RankTimes>,
    /// Ranks outside this process (`RemoteRanks`).
    remote: Option<Box<dyn RemoteRanks>>,
    /// Why a remote rank was dropped, until the page takes it.
    notice: Option<String>,
}

impl Ranks {
    pub fn new(shards: usize, parameters: usize) -> Result<Ranks> {
        Ok(Ranks {
            threads: 1,
            buffers: Vec::new(),
            shard_grads: zeros(shards.saturating_mul(parameters), "the shards' gradients")?,
            last: Vec::new(),
            remote: None,
            notice: None,
        })
    }

    /// Ranks of this process a step uses (threads; 1 with remote ranks).
    fn local(&self, shards: usize) -> usize {
        if self.remote.as_ref().is_some_and(|r| r.count() > 0) {
            1
        } else {
            self.threads.min(shards)
        }
    }

    /// Remote ranks a step uses (at most the shards but one).
    fn remote_count(&self, shards: usize) -> usize {
        self.remote.as_ref().map_or(0, |r| r.count().min(shards - 1))
    }

    /// Bytes held beyond the engine's own buffers: the shard gradients and
    /// the other ranks' buffers.
    pub fn bytes(&self) -> u64 {
        4 * self.shard_grads.len() as u64 + self.buffers.iter().map(RankBuffers::bytes).sum::<u64>()
    }

    /// Shard `s`'s gradient (P floats).
    pub fn shard_grads(&self, s: usize, p: usize) -> &[f32] {
        &self.shard_grads[s * p..(s + 1) * p]
    }

    /// Shard `s`'s gradient buffer (P floats).
    pub fn shard_grads_mut(&mut self, s: usize, p: usize) -> &mut [f32] {
        &mut self.shard_grads[s * p..(s + 1) * p]
    }

    /// The all-reduce of a micro-batch stepped by phase: `grads` += each
    /// shard's gradient in shard order (one rank, the same sums).
    pub fn reduce_into(&self, grads: &mut [f32]) {
        reduce(grads, &self.shard_grads, 1);
    }

    /// Drops the other ranks' buffers (they are made again, as the engine's
    /// are, when next needed: after activation checkpointing changes).
    pub fn drop_buffers(&mut self) {
        self.buffers.clear();
    }
}

/// Ranks outside this engine that compute shards for it: the page's rank
/// workers, each running a `ShardServer` on its own replica of the model
/// (the module doc). The engine is rank 0 and takes the first shards; the
/// remote ranks take the rest in order, each the range it is given.
pub trait RemoteRanks {
    /// Remote ranks in use.
    fn count(&self) -> usize;
    /// Starts each remote rank on its shards (`assignment[i]`: remote rank
    /// i's first shard and one past its last) of one micro-batch: the
    /// step's parameters (`new_params` on a step's first micro-batch) and
    /// the micro-batch's rows. Returns at once.
    fn start(
        &mut self,
        params: &[f32],
        new_params: bool,
        inputs: &[f32],
        targets: &[f32],
        step: u64,
        assignment: &[(usize, usize)],
    );
    /// Waits for every remote rank started, copying its shards' gradients
    /// into `grads` (the shards from the first remote one on, P floats
    /// each) and their results into `results` (the same shards). Per remote
    /// rank: the ms from `start` to its finish, or why it failed or stalled
    /// (its shards are then computed by the engine).
    fn finish(
        &mut self,
        grads: &mut [f32],
        results: &mut [ShardResult],
        assignment: &[(usize, usize)],
    ) -> Vec<std::result::Result<f64, String>>;
    /// Stops using remote ranks `dropped` (indices among them).
    fn drop_ranks(&mut self, dropped: &[usize]);
    /// The straggler lesson: remote rank `rank` (an index among them)
    /// computes each of its shards `1 + extra` times (real work, the same
    /// results), so that every other rank waits for it; 0 ends it.
    fn set_extra_work(&mut self, _rank: usize, _extra: u32) {}
}

/// One shard's results as a remote rank reports them; `ok` false where it
/// met a NaN or Inf (the engine runs the shard again for the error).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ShardResult {
    pub ok: bool,
    pub loss: f32,
    pub z: f32,
    pub forward_ms: f64,
    pub backward_ms: f64,
}

impl ShardResult {
    /// Floats a result takes in a buffer shared with another rank.
    pub const FLOATS: usize = 5;

    /// As floats, for a buffer shared with another rank (`from_floats`
    /// reads them back; the times to f32's precision).
    pub fn to_floats(&self) -> [f32; Self::FLOATS] {
        [f32::from(u8::from(self.ok)), self.loss, self.z, self.forward_ms as f32, self.backward_ms as f32]
    }

    pub fn from_floats(f: &[f32]) -> ShardResult {
        ShardResult { ok: f[0] == 1.0, loss: f[1], z: f[2], forward_ms: f64::from(f[3]), backward_ms: f64::from(f[4]) }
    }
}

impl CpuEngine {
    /// Ranks (threads) for a sharded run's steps: at most its shards are
    /// used. The bits do not depend on it. 1 in WebAssembly.
    pub fn set_threads(&mut self, threads: usize) {
        if let Some(ranks) = &mut self.ranks {
            ranks.threads = if cfg!(target_arch = "wasm32") { 1 } else { threads.max(1) };
        }
    }

    /// Ranks outside this engine (the page's rank workers) that take
    /// their share of a sharded run's shards from the next step on; None
    /// drops them. Without shards they are kept and not used.
    pub fn set_remote_ranks(&mut self, remote: Option<Box<dyn RemoteRanks>>) {
        if let Some(ranks) = &mut self.ranks {
            ranks.remote = remote;
        }
    }

    /// The remote ranks, taken back (to give to a rebuilt engine).
    pub fn take_remote_ranks(&mut self) -> Option<Box<dyn RemoteRanks>> {
        self.ranks.as_mut().and_then(|r| r.remote.take())
    }

    /// Ranks a step uses: this process's threads and the remote ranks, at
    /// most the shards; 1 without shards.
    pub fn ranks_used(&self) -> usize {
        self.ranks.as_ref().map_or(1, |r| r.local(self.experiment.shards) + r.remote_count(self.experiment.shards))
    }

    /// The straggler lesson (`RemoteRanks::set_extra_work`) on the last
    /// remote rank; false where there is none.
    pub fn set_straggler(&mut self, extra: u32) -> bool {
        match self.ranks.as_mut().and_then(|r| r.remote.as_mut()).filter(|r| r.count() > 0) {
            Some(remote) => {
                let last = remote.count() - 1;
                remote.set_extra_work(last, extra);
                true
            }
            None => false,
        }
    }

    /// Each rank's part of the last step (empty without shards).
    pub fn rank_times(&self) -> &[RankTimes] {
        self.ranks.as_ref().map_or(&[], |r| &r.last)
    }

    /// Why the last step ran on fewer ranks than it was given (a remote
    /// rank that failed or stalled, by name), taken once.
    pub fn take_rank_notice(&mut self) -> Option<String> {
        self.ranks.as_mut().and_then(|r| r.notice.take())
    }
}

#[cfg(test)]
mod tests {
    use super::ShardResult;

    /// What a rank worker writes to the shared buffer reads back as it was
    /// (the times to f32's precision), a failed shard as failed.
    #[test]
    fn a_shard_result_crosses_the_shared_buffer() {
        let r = ShardResult { ok: true, loss: 1.25, z: -3.5, forward_ms: 0.5, backward_ms: 2.0 };
        assert_eq!(ShardResult::from_floats(&r.to_floats()), r);
        let failed = ShardResult::default();
        assert!(!ShardResult::from_floats(&failed.to_floats()).ok);
    }
}
