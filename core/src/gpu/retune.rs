//! Live edits of a GPU run's hyperparameters, taken in place: no readback,
//! no buffer rebuilt.

use super::engine::GpuEngine;
use crate::error::{Error, Result};
use crate::experiment::Experiment;

impl GpuEngine {
    /// Takes an edit that `Experiment::retunable_to` allows, at a step
    /// boundary with nothing in flight. The learning rate and schedule
    /// need nothing (the per-step scalars are written at every submit);
    /// optimizer hyperparameters, clipping and regularization rebuild only
    /// their dispatches' uniforms and bind groups, and rewrite the fused
    /// step's uniform. Parameters and optimizer state stay on the GPU.
    pub fn retune(&mut self, to: &Experiment) -> Result<()> {
        if !self.experiment.retunable_to(to) {
            return Err(Error::Experiment(
                "this edit changes the run's shape; rebuild the engine from its state".into(),
            ));
        }
        if self.has_in_flight() || self.partial.is_some() {
            return Err(Error::Gpu("collect the steps in flight before editing the run".into()));
        }
        self.ctx.check()?;
        self.plan.retune(&self.ctx, &self.buffers, to, &self.layout, &self.tensors);
        if let Some(fused) = self.fused.as_mut() {
            fused.retune(&self.ctx, to);
        }
        self.experiment = to.clone();
        Ok(())
    }
}
