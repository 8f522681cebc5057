//! One trainer interface over both engines, chosen by a backend value.

use std::sync::Arc;

#[cfg(not(target_arch = "wasm32"))]
use super::Evaluation;
use super::{CpuEngine, MemoryBytes, StepMetrics, TrainState};
use crate::data::Dataset;
#[cfg(not(target_arch = "wasm32"))]
use crate::data::Table;
use crate::error::Result;
use crate::experiment::Experiment;
use crate::gpu::{GpuContext, GpuEngine};
use crate::model::Layout;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Gpu,
}

pub enum Engine {
    Cpu(Box<CpuEngine>),
    Gpu(Box<GpuEngine>),
}

impl Engine {
    /// Continues `state` on the CPU, or on the GPU of `gpu`.
    pub fn from_state(state: TrainState, data: Dataset, gpu: Option<Arc<GpuContext>>) -> Result<Engine> {
        Ok(match gpu {
            None => Engine::Cpu(Box::new(CpuEngine::from_state(state, data)?)),
            Some(ctx) => Engine::Gpu(Box::new(GpuEngine::from_state(ctx, state, data)?)),
        })
    }

    pub fn backend(&self) -> Backend {
        match self {
            Engine::Cpu(_) => Backend::Cpu,
            Engine::Gpu(_) => Backend::Gpu,
        }
    }

    pub fn experiment(&self) -> &Experiment {
        match self {
            Engine::Cpu(e) => e.experiment(),
            Engine::Gpu(e) => e.experiment(),
        }
    }

    pub fn layout(&self) -> &Layout {
        match self {
            Engine::Cpu(e) => e.layout(),
            Engine::Gpu(e) => e.layout(),
        }
    }

    pub fn data(&self) -> &Dataset {
        match self {
            Engine::Cpu(e) => e.data(),
            Engine::Gpu(e) => e.data(),
        }
    }

    pub fn step_count(&self) -> u64 {
        match self {
            Engine::Cpu(e) => e.step_count(),
            Engine::Gpu(e) => e.step_count(),
        }
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        match self {
            Engine::Cpu(e) => e.memory(),
            Engine::Gpu(e) => e.memory(),
        }
    }

    /// Recompute activations in backward instead of storing them
    /// (`CpuEngine::set_activation_checkpointing`).
    pub fn set_activation_checkpointing(&mut self, on: bool) -> Result<()> {
        match self {
            Engine::Cpu(e) => e.set_activation_checkpointing(on),
            Engine::Gpu(e) => e.set_activation_checkpointing(on),
        }
    }

    pub fn activation_checkpointing(&self) -> bool {
        match self {
            Engine::Cpu(e) => e.activation_checkpointing(),
            Engine::Gpu(e) => e.activation_checkpointing(),
        }
    }

    pub fn step(&mut self) -> Result<StepMetrics> {
        match self {
            Engine::Cpu(e) => e.step(),
            Engine::Gpu(e) => e.step(),
        }
    }

    /// The run's state (read back from the GPU when on it).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn state(&mut self) -> Result<TrainState> {
        match self {
            Engine::Cpu(e) => Ok(e.state()),
            Engine::Gpu(e) => e.state(),
        }
    }

    /// Loss and accuracy over `table` with the current parameters,
    /// computed by the CPU reference forward pass.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn evaluate(&mut self, table: &Table) -> Result<Option<Evaluation>> {
        match self {
            Engine::Cpu(e) => Ok(e.evaluate(table)),
            Engine::Gpu(e) => {
                let state = e.state()?;
                Ok(super::evaluate(&state.params, e.layout(), &state.experiment, table))
            }
        }
    }
}
