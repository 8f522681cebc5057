//! Live edits of a GPU run taken in place, no readback and no buffer
//! rebuilt: its hyperparameters, and which attention kernels a
//! transformer's plan records.

use super::engine::GpuEngine;
use super::gpt_attention::{time_attention, AttentionVariant, ATTENTION_TIMES};
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

impl GpuEngine {
    /// The attention kernels the plan records (a transformer's).
    pub fn attention(&self) -> Option<AttentionVariant> {
        self.buffers.gpt.as_ref().map(|g| g.attention)
    }

    /// Records `variant`'s attention kernels from the next step on: the
    /// same values either way (twin-tested), only the speed differs.
    pub fn set_attention(&mut self, variant: AttentionVariant) -> Result<()> {
        match self.buffers.gpt.as_mut() {
            Some(g) if g.attention != variant => g.attention = variant,
            _ => return Ok(()),
        }
        self.rebuild_plan()
    }

    /// Times both attention variants at this run's shape on this adapter
    /// (or takes the figures measured before) and records the faster:
    /// [workgroup, rows] seconds of a forward and a query-row backward, or
    /// None for an MLP.
    pub async fn choose_attention(&mut self) -> Result<Option<[f64; 2]>> {
        let Some(shape) = self.layout.gpt else { return Ok(None) };
        let dims = (self.experiment.batch_size, shape.context, shape.embed, shape.heads);
        let key = format!("{}|{dims:?}", self.ctx.describe());
        let cached =
            ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).map(|c| c.1);
        let seconds = match cached {
            Some(s) => s,
            None => {
                let mut s = [0.0; 2];
                for (i, v) in AttentionVariant::ALL.into_iter().enumerate() {
                    s[i] = time_attention(&self.ctx, v, dims, 2e-3).await?;
                }
                ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).push((key, s));
                s
            }
        };
        // Ties (within 5 %) keep a workgroup per row, the one that scales to long windows.
        let variant = if seconds[1] < 0.95 * seconds[0] { AttentionVariant::Rows } else { AttentionVariant::Workgroup };
        self.set_attention(variant)?;
        Ok(Some(seconds))
    }
}
