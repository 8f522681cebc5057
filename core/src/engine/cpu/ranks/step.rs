//! A sharded run's step: the ranks' shards (threads of this process, and
//! remote ranks), each rank's part of the step, the all-reduce in shard
//! order, then the one optimizer phase (`CpuEngine::finish_step`).

use web_time::Instant;

use super::super::{CpuEngine, Work};
use super::shard::ShardOut;
use super::shard::Shared;
use super::{RankBuffers, RankTimes, ShardResult};
use crate::engine::PhaseTimes;
use crate::error::Result;
use crate::model::regularization_backward;

/// The shards of rank `r` of `ranks`: first, one past the last.
pub(super) fn shard_range(r: usize, ranks: usize, shards: usize) -> (usize, usize) {
    (r * shards / ranks, (r + 1) * shards / ranks)
}

/// The all-reduce: `grads` += each shard's gradient, in shard order,
/// element by element (over `ranks` slices of the parameters at once).
pub(super) fn reduce(grads: &mut [f32], shard_grads: &[f32], ranks: usize) {
    let p = grads.len();
    // In blocks that stay in the first-level cache while every shard is
    // added (each element still in shard order).
    const BLOCK: usize = 2048;
    let add = |out: &mut [f32], start: usize| {
        for (b, block) in out.chunks_mut(BLOCK).enumerate() {
            let (at, len) = (start + b * BLOCK, block.len());
            for g in shard_grads.chunks_exact(p) {
                for (t, &v) in block.iter_mut().zip(&g[at..at + len]) {
                    *t += v;
                }
            }
        }
    };
    if ranks <= 1 || cfg!(target_arch = "wasm32") || p < 1 << 14 {
        add(grads, 0);
        return;
    }
    let slice = p.div_ceil(ranks);
    std::thread::scope(|scope| {
        for (i, out) in grads.chunks_mut(slice).enumerate() {
            let add = &add;
            scope.spawn(move || add(out, i * slice));
        }
    });
}

pub(super) fn ms(a: Instant, b: Instant) -> f64 {
    (b - a).as_secs_f64() * 1e3
}

impl CpuEngine {
    /// One optimizer step of a sharded run (module doc). On an error the
    /// parameters and optimizer state are those before the step.
    pub(in crate::engine::cpu) fn sharded_step(&mut self) -> Result<crate::engine::StepMetrics> {
        let e = self.experiment.clone();
        let (shards, k, batch) = (e.shards, e.grad_accumulation, e.batch_size);
        let rows = batch / shards;
        let step = self.optimizer.step + 1;
        let checkpointing = self.acts.checkpointing;
        let ranks = self.ranks.as_mut().expect("a sharded run has ranks");
        let mut phases = PhaseTimes::default();
        let mut times = Vec::new();
        if self.zero_grad {
            self.grads.fill(0.0);
        }
        for gpt in std::iter::once(&mut self.gpt).chain(ranks.buffers.iter_mut().map(|b| &mut b.gpt)).flatten() {
            gpt.begin_step();
        }
        let (mut loss_sum, mut z_sum) = (0.0f32, 0.0f32);
        let p = self.layout.parameter_count;
        for micro in 0..k {
            // Per micro-batch: a remote rank dropped in the last one leaves
            // the others more shards (the bits do not depend on who runs
            // which).
            let (local, remote) = (ranks.local(shards), ranks.remote_count(shards));
            let all = local + remote;
            while ranks.buffers.len() + 1 < local {
                ranks.buffers.push(RankBuffers::new(&self.layout, rows, checkpointing)?);
            }
            times.resize(all, RankTimes::default());
            let t0 = Instant::now();
            super::super::batches::serve_batch(
                &mut self.fed,
                &mut self.batcher,
                &self.data.train,
                &mut self.inputs,
                &mut self.targets,
                batch,
            );
            let t1 = Instant::now();
            phases.data_ms += ms(t0, t1);
            let shared = Shared {
                e: &e,
                layout: &self.layout,
                tensors: &self.tensors,
                params: &self.params,
                inputs: &self.inputs,
                targets: &self.targets,
                rows,
                scale: 1.0 / (k * shards) as f32,
                step,
            };
            // The remote ranks start first, on the shards after the local
            // ranks' (each rank's range as `shard_range` gives it).
            let assignment: Vec<(usize, usize)> = (local..all).map(|r| shard_range(r, all, shards)).collect();
            let mut remote_started = false;
            if let Some(remote) = ranks.remote.as_mut().filter(|_| remote > 0) {
                remote.start(&self.params, micro == 0, &self.inputs, &self.targets, step, &assignment);
                remote_started = true;
            }
            let own = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
            let mut works: Vec<Work<'_>> =
                std::iter::once(own).chain(ranks.buffers.iter_mut().map(RankBuffers::work)).collect();
            let mut outs: Vec<Option<Result<ShardOut>>> = (0..shards).map(|_| None).collect();
            let local_end = shard_range(local - 1, all, shards).1;
            let (local_grads, remote_grads) = ranks.shard_grads.split_at_mut(local_end * p);
            let mut rest = local_grads;
            let mut parts = Vec::with_capacity(local);
            for r in 0..local {
                let (first, end) = shard_range(r, all, shards);
                let (mine, after) = rest.split_at_mut((end - first) * p);
                parts.push(mine);
                rest = after;
            }
            let mut finished = vec![0.0f64; all];
            if local == 1 {
                for (i, out) in shared.rank(works.remove(0), parts.remove(0), 0, all).into_iter().enumerate() {
                    outs[i] = Some(out);
                }
                finished[0] = ms(t1, Instant::now());
            } else {
                #[cfg(not(target_arch = "wasm32"))]
                std::thread::scope(|scope| {
                    let shared = &shared;
                    let handles: Vec<_> = works
                        .drain(..)
                        .zip(parts.drain(..))
                        .enumerate()
                        .map(|(r, (work, grads))| {
                            scope.spawn(move || {
                                let out = shared.rank(work, grads, r, all);
                                (out, ms(t1, Instant::now()))
                            })
                        })
                        .collect();
                    for (r, handle) in handles.into_iter().enumerate() {
                        let (out, done) = handle.join().expect("a rank's thread panicked");
                        let first = shard_range(r, all, shards).0;
                        for (i, out) in out.into_iter().enumerate() {
                            outs[first + i] = Some(out);
                        }
                        finished[r] = done;
                    }
                });
            }
            if remote_started {
                let remote_ranks = ranks.remote.as_mut().expect("started above");
                let mut results = vec![ShardResult::default(); shards - local_end];
                let answers = remote_ranks.finish(remote_grads, &mut results, &assignment);
                let mut failed = Vec::new();
                for (i, answer) in answers.into_iter().enumerate() {
                    let r = local + i;
                    let (first, end) = assignment[i];
                    match answer {
                        Ok(done) => {
                            finished[r] = done;
                            for s in first..end {
                                let res = results[s - local_end];
                                outs[s] = Some(if res.ok {
                                    Ok(ShardOut::from(res))
                                } else {
                                    // The rank met an error: the engine runs
                                    // the shard again, for the same error.
                                    let grads = &mut remote_grads[(s - local_end) * p..][..p];
                                    let work = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
                                    shared.pass(work, grads, s)
                                });
                            }
                        }
                        Err(why) => failed.push((i, first, end, why)),
                    }
                }
                // A rank that failed or stalled: its shards are computed
                // here (the same bits), and it is dropped from the next
                // step on.
                for &(i, first, end, ref why) in &failed {
                    for s in first..end {
                        let grads = &mut remote_grads[(s - local_end) * p..][..p];
                        let work = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
                        outs[s] = Some(shared.pass(work, grads, s));
                    }
                    finished[local + i] = ms(t1, Instant::now());
                    ranks.notice = Some(format!(
                        "rank {} stopped ({why}); its shards ran on the other ranks, with the same bits",
                        local + i
                    ));
                }
                if !failed.is_empty() {
                    let dropped: Vec<usize> = failed.iter().map(|f| f.0).collect();
                    ranks.remote.as_mut().expect("started above").drop_ranks(&dropped);
                }
            }
            // Shard order: the first error any shard met, as one rank
            // would have met it.
            let outs = outs.into_iter().map(|o| o.expect("every shard ran")).collect::<Result<Vec<_>>>()?;
            let slowest = finished.iter().copied().fold(0.0, f64::max);
            for (r, t) in times.iter_mut().enumerate() {
                let (first, end) = shard_range(r, all, shards);
                t.shards = end - first;
                for o in &outs[first..end] {
                    t.forward_ms += o.forward_ms;
                    t.backward_ms += o.backward_ms;
                }
                t.wait_ms += slowest - finished[r];
            }
            let t2 = Instant::now();
            reduce(&mut self.grads, &ranks.shard_grads, local);
            let t3 = Instant::now();
            // Phases as rank 0 lived them (as a DDP rank's trace shows its
            // own step): its shards' forward and backward, whose ops the
            // op table reads; its wait for the slowest rank and the
            // all-reduce are communication.
            let mut own = RankTimes::default();
            let (first, end) = shard_range(0, all, shards);
            for o in &outs[first..end] {
                own.forward_ms += o.forward_ms;
                own.backward_ms += o.backward_ms;
            }
            phases.forward_ms += own.forward_ms;
            phases.backward_ms += own.backward_ms;
            phases.communication_ms += ms(t2, t3) + (ms(t1, t2) - own.compute_ms()).max(0.0);
            let (mut loss, mut z) = (0.0f32, 0.0f32);
            for o in &outs {
                loss += o.loss;
                z += o.z;
            }
            loss_sum += loss / shards as f32;
            z_sum += z / shards as f32;
        }
        if let Some(reg) = &e.regularization {
            let t = Instant::now();
            regularization_backward(&mut self.grads, &self.params, &self.tensors, reg);
            phases.backward_ms += ms(t, Instant::now());
        }
        self.ranks.as_mut().expect("a sharded run has ranks").last = times.clone();
        if let Some(gpt) = &mut self.gpt {
            gpt.z_sum = z_sum;
        }
        let mut m = self.finish_step(&e, loss_sum, phases)?;
        m.ranks = times;
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::shard_range;

    #[test]
    fn every_shard_has_one_rank() {
        for shards in 1..=12 {
            for ranks in 1..=shards {
                let mut next = 0;
                for r in 0..ranks {
                    let (first, end) = shard_range(r, ranks, shards);
                    assert_eq!(first, next);
                    assert!(end > first, "rank {r} of {ranks} has no shard of {shards}");
                    next = end;
                }
                assert_eq!(next, shards);
            }
        }
    }
}
