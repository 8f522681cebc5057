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

/// A remote rank's side: the model's buffers for one shard's rows and the
/// same forward and backward as the engine's (`Shared::pass`).
pub struct ShardServer {
    experiment: Experiment,
    layout: Layout,
    tensors: Vec<TensorInfo>,
    buffers: RankBuffers,
}

impl ShardServer {
    pub fn new(experiment: &Experiment) -> Result<ShardServer> {
        let layout = Layout::new(experiment);
        let rows = experiment.batch_size / experiment.shards;
        Ok(ShardServer {
            tensors: layout.tensors(),
            buffers: RankBuffers::new(&layout, rows, false)?,
            layout,
            experiment: experiment.clone(),
        })
    }

    pub fn parameter_count(&self) -> usize {
        self.layout.parameter_count
    }

    /// Shards `first..end` of a micro-batch (`inputs` and `targets`: the
    /// whole micro-batch's rows), each gradient into its P floats of
    /// `grads`, from zero.
    #[allow(clippy::too_many_arguments)]
    pub fn compute(
        &mut self,
        params: &[f32],
        inputs: &[f32],
        targets: &[f32],
        first: usize,
        end: usize,
        step: u64,
        grads: &mut [f32],
    ) -> Vec<ShardResult> {
        let e = &self.experiment;
        let shared = Shared {
            e,
            layout: &self.layout,
            tensors: &self.tensors,
            params,
            inputs,
            targets,
            rows: e.batch_size / e.shards,
            scale: 1.0 / (e.grad_accumulation * e.shards) as f32,
            step,
        };
        let p = self.layout.parameter_count;
        (first..end)
            .zip(grads.chunks_exact_mut(p))
            .map(|(s, g)| match shared.pass(self.buffers.work(), g, s) {
                Ok(o) => {
                    ShardResult { ok: true, loss: o.loss, z: o.z, forward_ms: o.forward_ms, backward_ms: o.backward_ms }
                }
                Err(_) => ShardResult::default(),
            })
            .collect()
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

    /// One optimizer step of a sharded run (module doc). On an error the
    /// parameters and optimizer state are those before the step.
    pub(super) fn sharded_step(&mut self) -> Result<crate::engine::StepMetrics> {
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
                                    Ok(ShardOut {
                                        loss: res.loss,
                                        z: res.z,
                                        forward_ms: res.forward_ms,
                                        backward_ms: res.backward_ms,
                                    })
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
