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

use web_time::Instant;

use super::gpt::GptNet;
use super::step::{backward_layer, first_non_finite_tensor, non_finite, non_finite_tensor};
use super::{CpuEngine, Work};
use crate::engine::{forward_layer, Activations, Phase, PhaseTimes};
use crate::error::{zeros, Result};
use crate::experiment::Experiment;
use crate::model::{loss_backward, loss_forward, regularization_backward, Layout, TensorInfo};

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
}

impl Ranks {
    pub fn new(shards: usize, parameters: usize) -> Result<Ranks> {
        Ok(Ranks {
            threads: 1,
            buffers: Vec::new(),
            shard_grads: zeros(shards.saturating_mul(parameters), "the shards' gradients")?,
            last: Vec::new(),
        })
    }

    /// Bytes held beyond the engine's own buffers: the shard gradients and
    /// the other ranks' buffers.
    pub fn bytes(&self) -> u64 {
        4 * self.shard_grads.len() as u64 + self.buffers.iter().map(RankBuffers::bytes).sum::<u64>()
    }

    /// Drops the other ranks' buffers (they are made again, as the engine's
    /// are, when next needed: after activation checkpointing changes).
    pub fn drop_buffers(&mut self) {
        self.buffers.clear();
    }
}

/// What one shard's forward and backward gave.
struct ShardOut {
    loss: f32,
    z: f32,
    forward_ms: f64,
    backward_ms: f64,
}

/// What every shard of a step reads.
struct Shared<'a> {
    e: &'a Experiment,
    layout: &'a Layout,
    tensors: &'a [TensorInfo],
    params: &'a [f32],
    inputs: &'a [f32],
    targets: &'a [f32],
    rows: usize,
    scale: f32,
    step: u64,
}

impl Shared<'_> {
    /// Forward and backward of shard `s` into `grads` (zeroed here).
    fn pass(&self, work: Work<'_>, grads: &mut [f32], s: usize) -> Result<ShardOut> {
        let (e, rows, step) = (self.e, self.rows, self.step);
        let width = self.inputs.len() / (rows * e.shards);
        let target_width = self.targets.len() / (rows * e.shards);
        let inputs = &self.inputs[s * rows * width..][..rows * width];
        let targets = &self.targets[s * rows * target_width..][..rows * target_width];
        grads.fill(0.0);
        let t0 = Instant::now();
        if let Some(gpt) = work.gpt.as_mut() {
            let mut ce = None;
            for i in 0..gpt.stages() {
                ce = ce.or(gpt.forward_stage(self.params, inputs, targets, i));
            }
            let loss = ce.unwrap_or(f32::NAN);
            if !loss.is_finite() {
                return Err(non_finite_tensor(Phase::Loss, "the logits", step));
            }
            let t1 = Instant::now();
            for i in 0..gpt.stages() {
                gpt.backward_stage(grads, self.params, e.z_loss as f32, self.scale, i);
            }
            if let Some(t) = first_non_finite_tensor(grads, self.tensors) {
                return Err(non_finite_tensor(Phase::Backward, t, step));
            }
            let out = ShardOut { loss, z: gpt.last_z, forward_ms: ms(t0, t1), backward_ms: ms(t1, Instant::now()) };
            return Ok(out);
        }
        let layers = self.layout.layers.len();
        for l in 0..layers {
            if !forward_layer(work.acts, self.params, inputs, self.layout, e, l) {
                return Err(non_finite(Phase::Forward, l, step));
            }
        }
        let loss = loss_forward(work.acts.output(), targets, e.loss, rows, e.outputs());
        if !loss.is_finite() {
            return Err(non_finite(Phase::Loss, layers - 1, step));
        }
        let t1 = Instant::now();
        let last = &mut work.grad[layers - 1];
        loss_backward(last, work.acts.output(), targets, e.loss, rows, e.outputs(), self.scale);
        for l in (0..layers).rev() {
            let work = Work { acts: &mut *work.acts, grad: &mut *work.grad, gpt: &mut *work.gpt };
            backward_layer(work, grads, self.params, inputs, self.layout, e, rows, l, step)?;
        }
        Ok(ShardOut { loss, z: 0.0, forward_ms: ms(t0, t1), backward_ms: ms(t1, Instant::now()) })
    }

    /// Rank `r` of `ranks`: its shards in order, each into its own slice
    /// of `grads` (`shard_grads` from the rank's first shard on).
    fn rank(&self, work: Work<'_>, grads: &mut [f32], r: usize, ranks: usize) -> Vec<Result<ShardOut>> {
        let p = self.layout.parameter_count;
        let (first, end) = shard_range(r, ranks, self.e.shards);
        (first..end)
            .zip(grads.chunks_exact_mut(p))
            .map(|(s, g)| self.pass(Work { acts: &mut *work.acts, grad: &mut *work.grad, gpt: &mut *work.gpt }, g, s))
            .collect()
    }
}

/// The shards of rank `r` of `ranks`: first, one past the last.
fn shard_range(r: usize, ranks: usize, shards: usize) -> (usize, usize) {
    (r * shards / ranks, (r + 1) * shards / ranks)
}

/// The all-reduce: `grads` += each shard's gradient, in shard order,
/// element by element (over `ranks` slices of the parameters at once).
fn reduce(grads: &mut [f32], shard_grads: &[f32], ranks: usize) {
    let p = grads.len();
    let add = |out: &mut [f32], start: usize| {
        for g in shard_grads.chunks_exact(p) {
            for (t, &v) in out.iter_mut().zip(&g[start..]) {
                *t += v;
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

fn ms(a: Instant, b: Instant) -> f64 {
    (b - a).as_secs_f64() * 1e3
}

impl CpuEngine {
    /// Ranks (threads) for a sharded run's steps: at most its shards are
    /// used. The bits do not depend on it. 1 in WebAssembly.
    pub fn set_threads(&mut self, threads: usize) {
        if let Some(ranks) = &mut self.ranks {
            ranks.threads = if cfg!(target_arch = "wasm32") { 1 } else { threads.max(1) };
        }
    }

    /// Ranks a step uses: min(threads, shards), 1 without shards.
    pub fn ranks_used(&self) -> usize {
        self.ranks.as_ref().map_or(1, |r| r.threads.min(self.experiment.shards))
    }

    /// Each rank's part of the last step (empty without shards).
    pub fn rank_times(&self) -> &[RankTimes] {
        self.ranks.as_ref().map_or(&[], |r| &r.last)
    }

    /// One optimizer step of a sharded run (module doc). On an error the
    /// parameters and optimizer state are those before the step.
    pub(super) fn sharded_step(&mut self) -> Result<crate::engine::StepMetrics> {
        let e = self.experiment.clone();
        let (shards, k, batch) = (e.shards, e.grad_accumulation, e.batch_size);
        let rows = batch / shards;
        let ranks_used = self.ranks_used();
        let step = self.optimizer.step + 1;
        let checkpointing = self.acts.checkpointing;
        let ranks = self.ranks.as_mut().expect("a sharded run has ranks");
        while ranks.buffers.len() + 1 < ranks_used {
            ranks.buffers.push(RankBuffers::new(&self.layout, rows, checkpointing)?);
        }
        let mut phases = PhaseTimes::default();
        let mut times = vec![RankTimes::default(); ranks_used];
        if self.zero_grad {
            self.grads.fill(0.0);
        }
        for gpt in std::iter::once(&mut self.gpt).chain(ranks.buffers.iter_mut().map(|b| &mut b.gpt)).flatten() {
            gpt.begin_step();
        }
        let (mut loss_sum, mut z_sum) = (0.0f32, 0.0f32);
        let p = self.layout.parameter_count;
        for _ in 0..k {
            let t0 = Instant::now();
            self.batcher.next_batch(&mut self.inputs, &mut self.targets, &self.data.train, batch);
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
            let own = Work { acts: &mut self.acts, grad: &mut self.grad, gpt: &mut self.gpt };
            let mut works: Vec<Work<'_>> =
                std::iter::once(own).chain(ranks.buffers.iter_mut().map(RankBuffers::work)).collect();
            let mut outs: Vec<Result<ShardOut>> = Vec::with_capacity(shards);
            let mut rest = ranks.shard_grads.as_mut_slice();
            let mut parts = Vec::with_capacity(ranks_used);
            for r in 0..ranks_used {
                let (first, end) = shard_range(r, ranks_used, shards);
                let (mine, after) = rest.split_at_mut((end - first) * p);
                parts.push(mine);
                rest = after;
            }
            let mut finished = vec![0.0f64; ranks_used];
            if ranks_used == 1 {
                outs.extend(shared.rank(works.remove(0), parts.remove(0), 0, 1));
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
                                let out = shared.rank(work, grads, r, ranks_used);
                                (out, ms(t1, Instant::now()))
                            })
                        })
                        .collect();
                    for (r, handle) in handles.into_iter().enumerate() {
                        let (out, done) = handle.join().expect("a rank's thread panicked");
                        outs.extend(out);
                        finished[r] = done;
                    }
                });
            }
            // Shard order: the first error any shard met, as one rank
            // would have met it.
            let outs = outs.into_iter().collect::<Result<Vec<_>>>()?;
            let slowest = finished.iter().copied().fold(0.0, f64::max);
            for (r, t) in times.iter_mut().enumerate() {
                let (first, end) = shard_range(r, ranks_used, shards);
                t.shards = end - first;
                for o in &outs[first..end] {
                    t.forward_ms += o.forward_ms;
                    t.backward_ms += o.backward_ms;
                }
                t.wait_ms += slowest - finished[r];
            }
            let t2 = Instant::now();
            reduce(&mut self.grads, &ranks.shard_grads, ranks_used);
            let t3 = Instant::now();
            // Phases as the slowest rank lived them: its forward and
            // backward; the wait for it and the all-reduce are
            // communication.
            let critical = (0..ranks_used).max_by(|&a, &b| finished[a].total_cmp(&finished[b])).unwrap_or(0);
            let mut crit = RankTimes::default();
            let (first, end) = shard_range(critical, ranks_used, shards);
            for o in &outs[first..end] {
                crit.forward_ms += o.forward_ms;
                crit.backward_ms += o.backward_ms;
            }
            phases.forward_ms += crit.forward_ms;
            phases.backward_ms += crit.backward_ms;
            phases.communication_ms += ms(t2, t3) + (ms(t1, t2) - crit.compute_ms()).max(0.0);
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
