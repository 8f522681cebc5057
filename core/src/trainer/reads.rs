//! Reading the run: its state (for checkpoints), the views' tensors,
//! per-layer statistics and evaluations, whichever engine runs.

use super::{Inner, Trainer};
use crate::data::{Dataset, Table};
use crate::engine::{evaluate, Evaluation, TrainState};
use crate::error::{Error, Result};
use crate::gpu::PendingState;
use crate::stats::{tensor_stats, TensorStats};

/// A state read begun by `Trainer::begin_read_state`: ready (CPU) or the
/// GPU's copies in flight.
pub enum StateRead {
    Ready(Box<TrainState>),
    Gpu(Box<PendingState>),
}

impl StateRead {
    pub fn step(&self) -> u64 {
        match self {
            StateRead::Ready(s) => s.step(),
            StateRead::Gpu(p) => p.step(),
        }
    }

    pub async fn finish(self) -> Result<TrainState> {
        match self {
            StateRead::Ready(s) => Ok(*s),
            StateRead::Gpu(p) => (*p).finish().await,
        }
    }
}

impl Trainer {
    pub(super) fn at_boundary(&self, what: &str) -> Result<()> {
        let in_flight = self.queued > 0 || matches!(&self.inner, Inner::Gpu(e) if e.has_in_flight());
        if in_flight || self.mid_step() {
            return Err(Error::Experiment(format!("collect the submitted steps and finish the step before {what}")));
        }
        Ok(())
    }

    /// The run's state (what a checkpoint holds), read back from the GPU
    /// when on it. At a step boundary, with nothing in flight.
    pub async fn read_state(&mut self) -> Result<TrainState> {
        self.at_boundary("reading the state")?;
        match &mut self.inner {
            Inner::Cpu(e) => Ok(e.state()),
            Inner::Gpu(e) => e.read_state().await,
        }
    }

    /// Starts reading the state without waiting for it (background
    /// checkpoints): training may go on before `StateRead::finish`.
    pub fn begin_read_state(&mut self) -> Result<StateRead> {
        self.at_boundary("reading the state")?;
        Ok(match &mut self.inner {
            Inner::Cpu(e) => StateRead::Ready(Box::new(e.state())),
            Inner::Gpu(e) => StateRead::Gpu(Box::new(e.begin_read_state()?)),
        })
    }

    /// `f` of the parameters, gradients and last updates, borrowed on the
    /// CPU engine (a large network's views copy only what they keep), read
    /// back from the GPU.
    pub async fn with_tensors<T>(&mut self, f: impl FnOnce([&[f32]; 3]) -> T) -> Result<T> {
        match &mut self.inner {
            Inner::Cpu(e) => Ok(f([e.params(), e.grads(), e.updates()])),
            Inner::Gpu(e) => {
                let [p, g, u] = e.read_tensors().await?;
                Ok(f([&p, &g, &u]))
            }
        }
    }

    /// `with_tensors`, with the run's data beside them: an evaluation of
    /// its own rows borrows them instead of copying the tables.
    pub async fn with_tensors_and_data<T>(&mut self, f: impl FnOnce([&[f32]; 3], &Dataset) -> T) -> Result<T> {
        match &mut self.inner {
            Inner::Cpu(e) => Ok(f([e.params(), e.grads(), e.updates()], e.data())),
            Inner::Gpu(e) => {
                let [p, g, u] = e.read_tensors().await?;
                Ok(f([&p, &g, &u], e.data()))
            }
        }
    }

    /// Per layer: statistics of [activations, gradients, weights, updates]
    /// of the last step (the GPU's `tensor_stats` kernel, or its CPU twin).
    pub async fn layer_stats(&mut self) -> Result<Vec<[TensorStats; 4]>> {
        match &mut self.inner {
            Inner::Gpu(e) => e.read_layer_stats().await,
            Inner::Cpu(e) => Ok(e
                .layout()
                .layers
                .iter()
                .enumerate()
                .map(|(l, shape)| {
                    let range = shape.weight_offset..shape.end();
                    [
                        tensor_stats(&e.activations().a[l]),
                        tensor_stats(&e.grads()[range.clone()]),
                        tensor_stats(&e.params()[range.clone()]),
                        tensor_stats(&e.updates()[range]),
                    ]
                })
                .collect()),
        }
    }

    /// Loss and accuracy over `table` with the current parameters, by the
    /// CPU reference forward pass (in chunks; see `engine::evaluate`).
    pub async fn evaluate(&mut self, table: &Table) -> Result<Option<Evaluation>> {
        match &mut self.inner {
            Inner::Cpu(e) => Ok(e.evaluate(table)),
            Inner::Gpu(e) => {
                let params = e.read_params().await?;
                Ok(evaluate(&params, e.layout(), e.experiment(), table))
            }
        }
    }
}
