//! The gradient-accumulation lesson: the next step taken twice from the
//! current state, as one big batch and as accumulated micro-batches.

use stepscope_core::engine::MemoryBytes;
use stepscope_core::{Error, StepMetrics, TrainState, Trainer};

use super::{AccumulationReport, Runner};

impl Runner {
    /// Takes the next step twice from the current state, in separate
    /// engines of the same backend: as one batch of k·b rows, and as k
    /// micro-batches of b rows with accumulation. The rows are the same
    /// (the batcher hands them out in order either way), so the updates
    /// agree up to float32 summation order; the activations stored differ
    /// k-fold. The run itself is not touched.
    pub(super) async fn check_accumulation(&mut self, k: usize) -> Result<AccumulationReport, Error> {
        if !(2..=64).contains(&k) {
            return Err(Error::Experiment(format!("micro-batches: {k} is outside 2…64")));
        }
        let state = self.state().await?;
        let b = state.experiment.batch_size;
        let mut one = state.clone();
        one.experiment.batch_size = k * b;
        one.experiment.grad_accumulation = 1;
        let mut accumulated = state.clone();
        accumulated.experiment.grad_accumulation = k;
        let fail = |err: Error| err.context("The accumulation check did not run");
        let (one_state, one_metrics, one_memory) = self.one_step(one).await.map_err(fail)?;
        let (acc_state, acc_metrics, acc_memory) = self.one_step(accumulated).await.map_err(fail)?;
        let max_diff = one_state.params.iter().zip(&acc_state.params).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        let max_param = one_state.params.iter().map(|p| p.abs()).fold(0.0, f32::max);
        Ok(AccumulationReport {
            step: state.step(),
            k,
            micro_batch: b,
            loss: (one_metrics.loss, acc_metrics.loss),
            max_diff,
            max_param,
            activation_bytes: (one_memory.activations, acc_memory.activations),
        })
    }

    /// One step of `state` in a fresh engine of the current backend.
    async fn one_step(&self, state: TrainState) -> Result<(TrainState, StepMetrics, MemoryBytes), Error> {
        let mut trainer = Trainer::new(state, self.data().clone(), self.trainer.gpu_context().cloned())?;
        trainer.submit(1)?;
        let metrics = trainer.collect().await?.pop().ok_or_else(|| Error::Gpu("a step produced no metrics".into()))?;
        Ok((trainer.read_state().await?, metrics, trainer.memory()))
    }
}
