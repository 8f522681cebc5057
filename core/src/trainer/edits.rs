//! Changing the run: live edits of the experiment, a restored or rolled-back
//! state, and moving between engines.

use std::sync::Arc;

use super::{build, Inner, Trainer};
use crate::data::Dataset;
use crate::engine::TrainState;
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::gpu::GpuContext;

/// How `Trainer::apply` took an edit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// In place: nothing read back, no buffer rebuilt.
    InPlace,
    /// The run was read back and rebuilt from its state (a change of shape
    /// or of optimizer).
    Rebuilt,
}

impl Trainer {
    /// Takes an edit of the experiment at a step boundary. What can change
    /// in place does (`Experiment::retunable_to`: learning rate, schedule,
    /// optimizer hyperparameters, clipping, regularization), with no
    /// readback and no buffer rebuilt; anything else rebuilds the run from
    /// its state on the same engine, the optimizer state carried over where
    /// it still fits (`OptimizerState::carried_to`). The data stays: a new
    /// dataset is a new run (its augmentation and loader may change). On error the run is as it was.
    pub async fn apply(&mut self, to: &Experiment) -> Result<Applied> {
        crate::validate::experiment(to)?;
        self.at_boundary("editing the run")?;
        // Augmentation and the loader change how rows are served, not which.
        if !to.data.same_rows(&self.experiment().data) || to.seed != self.experiment().seed {
            return Err(Error::Experiment("a change of data or seed starts a new run".into()));
        }
        if self.experiment().retunable_to(to) {
            match &mut self.inner {
                Inner::Cpu(e) => e.retune(to)?,
                Inner::Gpu(e) => e.retune(to)?,
            }
            return Ok(Applied::InPlace);
        }
        let mut state = self.read_state().await?;
        let optimizer = std::mem::take(&mut state.optimizer);
        state.optimizer = optimizer.carried_to(&state.experiment.optimizer, &to.optimizer, state.params.len());
        state.experiment = to.clone();
        let data = self.data().clone();
        self.replace(state, data)?;
        Ok(Applied::Rebuilt)
    }

    /// Replaces the run with `state` on `data` (a restore, a rollback), on
    /// the same engine, keeping the lesson switches. Everything is built
    /// before the current run is dropped: on error it stays.
    pub fn replace(&mut self, state: TrainState, data: Dataset) -> Result<()> {
        let gpu = self.gpu_context().cloned();
        self.rebuild(state, data, gpu)
    }

    /// Continues the run on the GPU of `gpu`, or on the CPU (None): the
    /// state moves across, so the run goes on exactly where it was.
    pub async fn move_to(&mut self, gpu: Option<Arc<GpuContext>>) -> Result<()> {
        self.finish_partial_step().await?;
        let state = self.read_state().await?;
        let data = self.data().clone();
        self.rebuild(state, data, gpu)
    }

    /// Replaces the run with `state` on the given engine (after a GPU
    /// error, when the GPU's own state cannot be trusted).
    pub fn rebuild(&mut self, state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<()> {
        let same_work = same_shard_work(self.experiment(), &state.experiment);
        let mut inner = build(state, data, gpu)?;
        let remote = match &mut self.inner {
            Inner::Cpu(e) if same_work => e.take_remote_ranks(),
            _ => None,
        };
        if let (Inner::Cpu(e), Some(remote)) = (&mut inner, remote) {
            e.set_remote_ranks(Some(remote));
        }
        match &mut inner {
            Inner::Cpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(self.activation_checkpointing)?;
            }
            Inner::Gpu(e) => {
                e.zero_grad = self.zero_grad;
                e.set_activation_checkpointing(self.activation_checkpointing)?;
            }
        }
        self.inner = inner;
        self.queued = 0;
        Ok(())
    }
}

/// Whether a shard's forward and backward are the same under `a` and `b`
/// (what a remote rank's `ShardServer` was built for).
pub fn same_shard_work(a: &Experiment, b: &Experiment) -> bool {
    a.model == b.model
        && a.loss == b.loss
        && a.batch_size == b.batch_size
        && a.shards == b.shards
        && a.grad_accumulation == b.grad_accumulation
        && a.z_loss == b.z_loss
}
