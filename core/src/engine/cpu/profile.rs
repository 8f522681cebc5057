//! A profiled CPU step (`engine::profile`): the real step, with each phase
//! also repeated in a burst the clock can resolve.

use super::{CpuEngine, Partial};
use crate::engine::forward_layer;
use crate::engine::profile::{Burst, BurstSum, PhaseProfile, ProfilePath};
use crate::engine::{StepMetrics, StepPhase};
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::model::{loss_backward, loss_forward, regularization_backward};
use crate::optim::OptimizerState;

impl CpuEngine {
    /// Takes one optimizer step, as `step` does (the same bits), and times
    /// its phases apart: each micro-batch's forward is repeated in a burst
    /// after the real one (forward is pure); backward and the update are
    /// repeated before the real ones on restored copies of the gradients
    /// (and parameters and optimizer state), the restores timed alone and
    /// taken off. Where the first forward alone lasts `resolved_ms`, the
    /// step is long enough for the clock and is taken plainly (`CpuClock`). A step
    /// begun phase by phase is finished plainly.
    pub fn profile_step(&mut self, burst: &Burst) -> Result<(StepMetrics, PhaseProfile)> {
        let r = burst.resolution_ms;
        let k = self.experiment.grad_accumulation;
        if self.partial.is_some() || self.ranks.is_some() {
            // Begun by phase, or sharded (its ranks run the step at once):
            // the step as one reading.
            let m = self.step()?;
            return Ok((m.clone(), PhaseProfile::single(m.step, ProfilePath::CpuClock, &m.phases, r, k)));
        }
        let e = self.experiment.clone();
        let (mut forward, mut backward, mut update) = (BurstSum::default(), BurstSum::default(), BurstSum::default());
        let mut partial = Partial::default();
        for micro in 0..k {
            debug_assert_eq!(partial.next, StepPhase::Forward { micro });
            self.advance_or_abandon(&mut partial)?;
            if micro == 0 && partial.phases.forward_ms >= burst.resolved_ms {
                // Resolved by one reading: the rest of the step as usual.
                self.partial = Some(partial);
                let m = self.step()?;
                return Ok((m.clone(), PhaseProfile::single(m.step, ProfilePath::CpuClock, &m.phases, r, k)));
            }
            let (total, reps) = burst.run(|| self.forward_again(&e))?;
            forward.add(total, None, reps, r);

            let saved = self.grads.clone();
            let (total, reps) = burst.run(|| {
                self.grads.copy_from_slice(&saved);
                self.backward_again(&e, micro)
            })?;
            let restores = Burst::fixed(reps, || self.grads.copy_from_slice(std::hint::black_box(&saved)));
            backward.add(total, Some(restores), reps, r);
            self.grads.copy_from_slice(&saved);
            self.advance_or_abandon(&mut partial)?;
        }
        let (params, grads, optimizer) = (self.params.clone(), self.grads.clone(), self.optimizer.clone());
        let restore = |s: &mut CpuEngine| {
            s.params.copy_from_slice(&params);
            s.grads.copy_from_slice(&grads);
            restore_optimizer(&mut s.optimizer, &optimizer);
        };
        let (total, reps) = burst.run(|| {
            restore(self);
            std::hint::black_box(self.update(&e));
            Ok::<(), Error>(())
        })?;
        let restores = Burst::fixed(reps, || restore(std::hint::black_box(&mut *self)));
        update.add(total, Some(restores), reps, r);
        restore(self);
        let metrics = match self.advance(&mut partial, false)? {
            Some(m) => m,
            None => return Err(Error::Experiment("a profiled step did not end with its update".into())),
        };
        let profile = PhaseProfile {
            step: metrics.step,
            path: ProfilePath::CpuBurst,
            forward: forward.measured(),
            backward: backward.measured(),
            optimizer: update.measured(),
            resolution_ms: r,
        };
        Ok((metrics, profile))
    }

    /// One phase of the profiled step, which is never left part-way: an
    /// error abandons it, as `step` would.
    fn advance_or_abandon(&mut self, partial: &mut Partial) -> Result<()> {
        match self.advance(partial, false)? {
            None => Ok(()),
            Some(_) => Err(Error::Experiment("a profiled step ended before its update".into())),
        }
    }

    /// Forward of the current micro-batch again, loss included: the same
    /// activations as the real forward (the real one checked them).
    fn forward_again(&mut self, e: &Experiment) -> Result<()> {
        if let Some(gpt) = &mut self.gpt {
            gpt.forward_again(&self.params);
            return Ok(());
        }
        for l in 0..self.layout.layers.len() {
            forward_layer(&mut self.acts, &self.params, &self.inputs, &self.layout, e, l);
        }
        let loss = loss_forward(self.acts.output(), &self.targets, e.loss, e.batch_size, e.outputs());
        std::hint::black_box(loss);
        Ok(())
    }

    /// Backward of the current micro-batch again, as `advance` runs it.
    fn backward_again(&mut self, e: &Experiment, micro: usize) -> Result<()> {
        let scale = 1.0 / e.grad_accumulation as f32;
        if let Some(gpt) = &mut self.gpt {
            // A transformer has no MLP layers: its own stages, as `advance`
            // runs them.
            gpt.backward_again(&mut self.grads, &self.params, e.z_loss as f32, scale);
        } else {
            let layers = self.layout.layers.len();
            let (out, targets) = (self.acts.output(), &self.targets);
            loss_backward(&mut self.grad[layers - 1], out, targets, e.loss, e.batch_size, e.outputs(), scale);
            for l in (0..layers).rev() {
                self.backward_layer(l)?;
            }
        }
        if micro + 1 == e.grad_accumulation {
            if let Some(reg) = &e.regularization {
                regularization_backward(&mut self.grads, &self.params, &self.tensors, reg);
            }
        }
        Ok(())
    }
}

/// Copies `from` into `to` without allocating (their buffers have the
/// same lengths).
fn restore_optimizer(to: &mut OptimizerState, from: &OptimizerState) {
    to.step = from.step;
    to.exp_avg.copy_from_slice(&from.exp_avg);
    to.exp_avg_sq.copy_from_slice(&from.exp_avg_sq);
    to.momentum_buffer.copy_from_slice(&from.momentum_buffer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Dataset;
    use crate::engine::profile::clock_resolution_ms;
    use crate::trainer::conformance::{experiment, training_matrix};

    #[test]
    fn a_profiled_step_is_the_same_step_and_resolves_each_phase() {
        // Bursts whatever the first forward took (a loaded machine may
        // stretch one reading past the target).
        let burst =
            Burst { target_ms: 0.2, max_reps: 1000, resolution_ms: clock_resolution_ms(), resolved_ms: f64::INFINITY };
        for (i, (name, e)) in training_matrix().into_iter().enumerate() {
            let engine = || {
                let mut engine = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
                engine.set_activation_checkpointing(i % 2 == 1).unwrap();
                engine
            };
            let (mut plain, mut profiled) = (engine(), engine());
            for step in 0..4 {
                let a = plain.step().unwrap();
                if step % 2 == 0 {
                    profiled.step().unwrap();
                    continue;
                }
                let (b, profile) = profiled.profile_step(&burst).unwrap();
                assert_eq!(
                    (a.step, a.loss, a.grad_norm, a.clipped),
                    (b.step, b.loss, b.grad_norm, b.clipped),
                    "{name}"
                );
                assert_eq!((profile.step, profile.path), (step, ProfilePath::CpuBurst), "{name}");
                for m in [profile.forward, profile.backward, profile.optimizer] {
                    assert!(m.ms > 0.0 && m.reps >= 1 && m.uncertainty_ms > 0.0, "{name}: {profile:?}");
                }
            }
            assert_eq!(plain.state(), profiled.state(), "{name}: the same bits");
            assert_eq!(plain.updates(), profiled.updates(), "{name}");
        }
    }

    #[test]
    fn a_transformer_s_profiled_step_bursts_its_own_stages() {
        // A transformer small enough for bursts (the page bursts any step
        // under `LONG_STEP_MS`): the bursts run its stages, not the MLP's
        // layers it does not have.
        let burst =
            Burst { target_ms: 0.2, max_reps: 1000, resolution_ms: clock_resolution_ms(), resolved_ms: f64::INFINITY };
        for (name, e) in crate::trainer::conformance::gpt_training_matrix().into_iter().take(2) {
            let engine = || CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
            let (mut plain, mut profiled) = (engine(), engine());
            for step in 0..3 {
                let a = plain.step().unwrap();
                let (b, profile) = profiled.profile_step(&burst).unwrap();
                assert_eq!((a.step, a.loss, a.grad_norm, a.z_loss), (b.step, b.loss, b.grad_norm, b.z_loss), "{name}");
                assert_eq!((profile.step, profile.path), (step, ProfilePath::CpuBurst), "{name}");
                // Forward and backward of a transformer cost far more than
                // the restores: each burst timed real work.
                for m in [profile.forward, profile.backward, profile.optimizer] {
                    assert!(m.ms > 0.0 && m.reps >= 1, "{name}: {profile:?}");
                }
                assert!(profile.backward.ms > profile.optimizer.ms, "{name}: {profile:?}");
                // The step's op times are its real phases' alone, inside
                // their readings: none of the bursts' repetitions.
                let (at, forward, backward) = profiled.op_times().unwrap();
                assert_eq!(*at, step);
                assert!(forward.total() <= b.phases.forward_ms + 1e-9, "{name}: {forward:?} {:?}", b.phases);
                assert!(backward.total() <= b.phases.backward_ms + 1e-9, "{name}: {backward:?} {:?}", b.phases);
            }
            assert_eq!(plain.state(), profiled.state(), "{name}: the same bits");
        }
    }

    #[test]
    fn a_long_step_is_profiled_by_one_reading() {
        let e = experiment(serde_json::json!({}));
        let mut e = CpuEngine::new(&e, Dataset::load(&e, None).unwrap()).unwrap();
        let burst = Burst { target_ms: 0.0, max_reps: 1, resolution_ms: 0.001, resolved_ms: 0.0 };
        let (m, profile) = e.profile_step(&burst).unwrap();
        assert_eq!(profile.path, ProfilePath::CpuClock);
        assert_eq!(profile.forward.ms, m.phases.forward_ms);
        assert_eq!(profile.forward.reps, 1);
    }
}
