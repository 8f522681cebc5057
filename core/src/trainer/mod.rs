//! One trainer over both engines: the only thing the page, the CLI and the
//! benchmark drive. It sits above the CPU reference engine and the GPU
//! engine (neither imports it, and nothing below it imports `gpu/`), and it
//! is async so that the same code runs natively and on the web: the page
//! awaits it without blocking, native callers block on it (`block_on`).
//!
//! A run goes `submit(K)` then `collect()`: on the GPU one submit of K
//! steps and its readback; on the CPU the K steps run in `collect`. The
//! state, the views' tensors, per-layer statistics and evaluations are read
//! the same way whichever engine runs. `apply` takes a live edit in place
//! where the engine can (`Experiment::retunable_to`) and rebuilds the run
//! from its state otherwise.

pub mod conformance;
mod edits;
pub use edits::same_shard_work;
mod reads;
mod steps;

pub use edits::Applied;
pub use reads::StateRead;
pub use steps::PhaseClock;

use std::sync::Arc;

use crate::data::Dataset;
use crate::engine::{CpuEngine, MemoryBytes, TrainState};
use crate::error::Result;
use crate::experiment::Experiment;
use crate::gpu::{Calibration, GpuContext, GpuEngine, SubmitCost, MAX_STEPS_PER_SUBMIT};
use crate::model::Layout;

/// Which engine a trainer runs on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Cpu,
    Gpu,
}

enum Inner {
    Cpu(Box<CpuEngine>),
    Gpu(Box<GpuEngine>),
}

pub struct Trainer {
    inner: Inner,
    /// CPU: steps submitted and not run yet (they run in `collect`).
    queued: usize,
    /// Lesson switches, kept across rebuilds.
    zero_grad: bool,
    activation_checkpointing: bool,
    /// Whether the GPU may run the fused step (`calibrate` picks it where
    /// it is faster).
    fused_allowed: bool,
}

fn build(state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Inner> {
    Ok(match gpu {
        None => Inner::Cpu(Box::new(CpuEngine::from_state(state, data)?)),
        Some(ctx) => Inner::Gpu(Box::new(GpuEngine::from_state(ctx, state, data)?)),
    })
}

impl Trainer {
    /// Continues `state` on the CPU, or on the GPU of `gpu`.
    pub fn new(state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Trainer> {
        Ok(Trainer {
            inner: build(state, data, gpu)?,
            queued: 0,
            zero_grad: true,
            activation_checkpointing: false,
            fused_allowed: true,
        })
    }

    /// A fresh run of `e` on `data` (`TrainState::fresh`).
    pub fn fresh(e: &Experiment, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Trainer> {
        Trainer::new(TrainState::try_fresh(e)?, data, gpu)
    }

    pub fn backend(&self) -> Backend {
        match &self.inner {
            Inner::Cpu(_) => Backend::Cpu,
            Inner::Gpu(_) => Backend::Gpu,
        }
    }

    pub fn experiment(&self) -> &Experiment {
        match &self.inner {
            Inner::Cpu(e) => e.experiment(),
            Inner::Gpu(e) => e.experiment(),
        }
    }

    pub fn layout(&self) -> &Layout {
        match &self.inner {
            Inner::Cpu(e) => e.layout(),
            Inner::Gpu(e) => e.layout(),
        }
    }

    pub fn data(&self) -> &Dataset {
        match &self.inner {
            Inner::Cpu(e) => e.data(),
            Inner::Gpu(e) => e.data(),
        }
    }

    /// A micro-batch a loader made ahead (`data::loader`): the CPU engine
    /// takes it when it serves those rows (the same bits as making them
    /// itself); the GPU engine gathers its rows on the device and drops it.
    pub fn feed(&mut self, made: crate::data::MadeBatch) {
        if let Inner::Cpu(e) = &mut self.inner {
            e.feed(made);
        }
    }

    /// Where the next micro-batch starts (the batcher's row counter) and
    /// whether a loader's batch for it is here; None on the GPU engine.
    pub fn next_batch_fed(&self) -> Option<(u64, bool)> {
        match &self.inner {
            Inner::Cpu(e) => Some((e.rows_consumed(), e.has_fed_batch())),
            Inner::Gpu(_) => None,
        }
    }

    /// Where the CPU engine's data stands (what a loader starts from);
    /// None on the GPU engine.
    pub fn data_position(&self) -> Option<crate::data::DataPosition> {
        match &self.inner {
            Inner::Cpu(e) => Some(e.data_position().clone()),
            Inner::Gpu(_) => None,
        }
    }

    /// Optimizer steps applied (collected).
    pub fn step_count(&self) -> u64 {
        match &self.inner {
            Inner::Cpu(e) => e.step_count(),
            Inner::Gpu(e) => e.step_count(),
        }
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        match &self.inner {
            Inner::Cpu(e) => e.memory(),
            Inner::Gpu(e) => e.memory(),
        }
    }

    /// The GPU device the run is on; None on the CPU engine.
    pub fn gpu_context(&self) -> Option<&Arc<GpuContext>> {
        match &self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => Some(e.context()),
        }
    }

    /// The GPU engine, for what only it has (test hooks, the benchmark's
    /// dispatch counts); None on the CPU.
    pub fn gpu_engine(&mut self) -> Option<&mut GpuEngine> {
        match &mut self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => Some(e),
        }
    }

    /// Whether the GPU runs the fused step now.
    pub fn runs_fused(&self) -> bool {
        matches!(&self.inner, Inner::Gpu(e) if e.runs_fused())
    }

    /// Most steps one submit takes.
    pub fn max_steps_per_submit(&self) -> usize {
        match &self.inner {
            Inner::Cpu(_) => MAX_STEPS_PER_SUBMIT,
            Inner::Gpu(e) => e.max_steps_per_submit(),
        }
    }

    /// What a GPU submit costs on its calibrated path (`calibrate`).
    pub fn submit_cost(&self) -> Option<SubmitCost> {
        match &self.inner {
            Inner::Cpu(_) => None,
            Inner::Gpu(e) => e.submit_cost,
        }
    }

    /// Lesson: when false, gradients are not zeroed between steps.
    pub fn set_zero_grad(&mut self, on: bool) {
        self.zero_grad = on;
        match &mut self.inner {
            Inner::Cpu(e) => e.zero_grad = on,
            Inner::Gpu(e) => e.zero_grad = on,
        }
    }

    pub fn zero_grad(&self) -> bool {
        self.zero_grad
    }

    /// Ranks (threads) for a sharded run on the CPU engine (`shards` > 1):
    /// speed only, the bits are the experiment's. The GPU engine is one
    /// device and takes each micro-batch whole.
    pub fn set_threads(&mut self, threads: usize) {
        if let Inner::Cpu(e) = &mut self.inner {
            e.set_threads(threads);
        }
    }

    /// Ranks outside this process for a sharded run on the CPU engine (the
    /// page's rank workers, `RemoteRanks`); kept across `rebuild` while the
    /// work of a shard stays the same (`same_shard_work`), else dropped.
    pub fn set_remote_ranks(&mut self, remote: Option<Box<dyn crate::engine::RemoteRanks>>) {
        if let Inner::Cpu(e) = &mut self.inner {
            e.set_remote_ranks(remote);
        }
    }

    /// Takes the remote ranks back (to lend them to another trainer of the
    /// same shard work, as the engine race's probe is).
    pub fn take_remote_ranks(&mut self) -> Option<Box<dyn crate::engine::RemoteRanks>> {
        match &mut self.inner {
            Inner::Cpu(e) => e.take_remote_ranks(),
            Inner::Gpu(_) => None,
        }
    }

    /// The straggler lesson on the last remote rank (`CpuEngine::set_straggler`).
    pub fn set_straggler(&mut self, extra: u32) -> bool {
        match &mut self.inner {
            Inner::Cpu(e) => e.set_straggler(extra),
            Inner::Gpu(_) => false,
        }
    }

    /// Why the last step ran on fewer ranks than given, taken once.
    pub fn take_rank_notice(&mut self) -> Option<String> {
        match &mut self.inner {
            Inner::Cpu(e) => e.take_rank_notice(),
            Inner::Gpu(_) => None,
        }
    }

    /// Each rank's part of the last step (empty without shards).
    pub fn rank_times(&self) -> &[crate::engine::RankTimes] {
        match &self.inner {
            Inner::Cpu(e) => e.rank_times(),
            Inner::Gpu(_) => &[],
        }
    }

    /// Ranks the CPU engine's steps use (1 unsharded, or on the GPU).
    pub fn ranks_used(&self) -> usize {
        match &self.inner {
            Inner::Cpu(e) => e.ranks_used(),
            Inner::Gpu(_) => 1,
        }
    }

    /// Recompute activations in backward instead of storing them.
    pub fn set_activation_checkpointing(&mut self, on: bool) -> Result<()> {
        match &mut self.inner {
            Inner::Cpu(e) => e.set_activation_checkpointing(on)?,
            Inner::Gpu(e) => e.set_activation_checkpointing(on)?,
        }
        self.activation_checkpointing = on;
        Ok(())
    }

    pub fn activation_checkpointing(&self) -> bool {
        self.activation_checkpointing
    }

    /// Whether the GPU may run the fused step; false keeps the phased
    /// kernels (their per-phase timestamps).
    pub fn allow_fused(&mut self, allowed: bool) {
        self.fused_allowed = allowed;
        if let Inner::Gpu(e) = &mut self.inner {
            e.use_fused &= allowed;
        }
    }

    /// GPU: measures (or takes the cached figures for this adapter and
    /// shape) the phased and the fused path and runs the faster; None on
    /// the CPU.
    pub async fn calibrate(&mut self) -> Result<Option<Calibration>> {
        let allowed = self.fused_allowed;
        let Inner::Gpu(e) = &mut self.inner else { return Ok(None) };
        let calibration = e.calibrate().await?;
        if !allowed {
            e.use_fused = false;
            e.submit_cost = Some(calibration.phased);
        }
        Ok(Some(calibration))
    }
}

/// Runs a trainer's future to completion on this thread (native callers:
/// the CLI, the benchmark, the tests). The GPU engine drives the device
/// itself natively, so nothing else needs to poll.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    pollster::block_on(future)
}
