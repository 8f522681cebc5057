//! Activation checkpointing on the GPU: forward writes every layer's
//! pre-activation z into one shared scratch instead of a buffer per layer,
//! and backward recomputes z[l] with forward's own kernel just before
//! layer l's activation gradient. Same kernel, same inputs, same bits:
//! the run is unchanged, the z buffers shrink from 4·B·Σ O_l bytes to
//! 4·B·max O, and backward gains one dense forward per layer (2·B·I·O
//! FLOPs each) per micro-batch. A transformer's blocks share one block's
//! buffers but their outputs, and backward runs each block's forward again
//! from its kept input before the block's backward (`gpu::gpt`), as the
//! CPU's `Gpt::backward` does.

use super::engine::GpuEngine;
use super::passes::pollster_free_pop;
use super::plan::Plan;
use crate::error::{Error, Result};

impl GpuEngine {
    /// Switches activation checkpointing. Replaces the z buffers and
    /// rebuilds the dispatch lists; parameters, gradients and optimizer
    /// state stay where they are on the GPU, so nothing is read back and
    /// the run goes on exactly. Refused while steps are in flight or a
    /// step taken phase by phase is unfinished (its backward would need
    /// the z's its forward kept).
    pub fn set_activation_checkpointing(&mut self, on: bool) -> Result<()> {
        if on == self.buffers.checkpointing {
            return Ok(());
        }
        if self.has_in_flight() || self.mid_step() {
            return Err(Error::Gpu(
                "collect the steps in flight and finish a phased step before switching activation checkpointing".into(),
            ));
        }
        self.ctx.check()?;
        let scope = self.ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let batch = self.experiment.batch_size;
        self.buffers.set_checkpointing(&self.ctx.device, &self.layout, batch, on);
        let target_width = self.data().train.target_width;
        self.plan = Plan::new(
            &self.ctx,
            &self.buffers,
            &self.experiment,
            &self.layout,
            self.tensors(),
            target_width,
            &self.matmuls,
        );
        match pollster_free_pop(scope) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Whether backward recomputes the pre-activations (see
    /// `set_activation_checkpointing`).
    pub fn activation_checkpointing(&self) -> bool {
        self.buffers.checkpointing
    }
}
