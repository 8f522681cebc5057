//! Training: whole steps submitted and collected, a CPU step in parts, and
//! step-by-phase mode.

use super::{Inner, Trainer};
use crate::engine::profile::{clock_resolution_ms, Burst, PhaseProfile};
use crate::engine::{PhaseReport, StepMetrics};
use crate::error::{Error, Result};

impl Trainer {
    /// Starts `k` more optimizer steps (clamped to 1…`max_steps_per_submit`).
    pub fn submit(&mut self, k: usize) -> Result<()> {
        let k = k.clamp(1, self.max_steps_per_submit());
        match &mut self.inner {
            Inner::Cpu(_) => self.queued += k,
            Inner::Gpu(e) => e.submit(k)?,
        }
        Ok(())
    }

    /// The metrics of every step submitted and not yet collected. A
    /// non-finite value stops the run at the last good step: the error
    /// names the layer and phase, and later submitted steps are dropped.
    pub async fn collect(&mut self) -> Result<Vec<StepMetrics>> {
        match &mut self.inner {
            Inner::Cpu(e) => {
                let k = std::mem::take(&mut self.queued);
                let mut out = Vec::with_capacity(k);
                for _ in 0..k {
                    out.push(e.step()?);
                }
                Ok(out)
            }
            Inner::Gpu(e) => {
                let mut out = Vec::new();
                while e.has_in_flight() {
                    out.extend(e.collect_any().await?);
                }
                Ok(out)
            }
        }
    }

    /// `steps` steps in submits of at most `per_submit`, each collected.
    pub async fn run(&mut self, steps: usize, per_submit: usize) -> Result<Vec<StepMetrics>> {
        let mut out = Vec::with_capacity(steps);
        let mut left = steps;
        while left > 0 {
            let k = left.min(per_submit.max(1)).min(self.max_steps_per_submit());
            self.submit(k)?;
            out.extend(self.collect().await?);
            left -= k;
        }
        Ok(out)
    }

    /// Whether a step begun phase by phase is unfinished.
    pub fn mid_step(&self) -> bool {
        match &self.inner {
            Inner::Cpu(e) => e.mid_step(),
            Inner::Gpu(e) => e.mid_step(),
        }
    }

    /// CPU: the next phase of the current step, without its statistics
    /// (`CpuEngine::step_part`); the metrics when it finished the step.
    /// The GPU takes whole steps (`submit`).
    /// The CPU's phase times of the step under way so far (zero between
    /// steps, and on the GPU, whose steps are whole).
    pub fn phases_so_far(&self) -> crate::engine::PhaseTimes {
        match &self.inner {
            Inner::Cpu(e) => e.phases_so_far(),
            Inner::Gpu(_) => Default::default(),
        }
    }

    /// The GPU's timed passes of the last submit collected (empty on the
    /// CPU, and without timestamp queries).
    pub fn gpu_passes(&self) -> &[crate::gpu::GpuPass] {
        match &self.inner {
            Inner::Cpu(_) => &[],
            Inner::Gpu(e) => e.last_passes(),
        }
    }

    /// A transformer's last whole step on the CPU engine, by op kind and
    /// block: (step, forward, backward) milliseconds (`OpTimes`); None on
    /// the GPU engine and for the MLP.
    pub fn op_times(&self) -> Option<(u64, crate::model::gpt::OpTimes, crate::model::gpt::OpTimes)> {
        match &self.inner {
            Inner::Cpu(e) => e.op_times().cloned(),
            Inner::Gpu(_) => None,
        }
    }

    /// An MLP's or conv net's last whole step on the CPU engine, layer by
    /// layer (`LayerTimes`); None on the GPU engine, for a transformer, and
    /// where ranks took the step at once.
    pub fn layer_times(&self) -> Option<(u64, crate::engine::LayerTimes)> {
        match &self.inner {
            Inner::Cpu(e) => e.layer_times().cloned(),
            Inner::Gpu(_) => None,
        }
    }

    /// The GPU's timed passes of every step collected since the last call
    /// (empty on the CPU, and without timestamp queries).
    pub fn take_gpu_passes(&mut self) -> Vec<crate::gpu::StepPass> {
        match &mut self.inner {
            Inner::Cpu(_) => Vec::new(),
            Inner::Gpu(e) => e.take_passes(),
        }
    }

    pub fn step_part(&mut self) -> Result<Option<StepMetrics>> {
        if self.queued > 0 {
            return Err(Error::Experiment("collect the submitted steps before stepping in parts".into()));
        }
        match &mut self.inner {
            Inner::Cpu(e) => e.step_part(),
            Inner::Gpu(_) => Err(Error::Gpu("the GPU engine takes whole steps (submit)".into())),
        }
    }

    /// CPU: drops a step begun in parts (`CpuEngine::abandon_step`); the
    /// GPU's steps are whole.
    pub fn abandon_partial_step(&mut self) {
        if let Inner::Cpu(e) = &mut self.inner {
            e.abandon_step();
        }
    }

    /// The next phase of the current step (step-by-phase mode).
    pub async fn step_phase(&mut self) -> Result<PhaseReport> {
        match &mut self.inner {
            Inner::Cpu(e) => e.step_phase(),
            Inner::Gpu(e) => e.step_phase().await,
        }
    }

    /// Finishes a step begun phase by phase, so that state reads and whole
    /// steps start at a step boundary.
    pub async fn finish_partial_step(&mut self) -> Result<Option<StepMetrics>> {
        match &mut self.inner {
            Inner::Cpu(e) if e.mid_step() => e.step().map(Some),
            Inner::Cpu(_) => Ok(None),
            Inner::Gpu(e) => e.finish_step().await,
        }
    }
}

impl Trainer {
    /// CPU: one step with its phases timed apart in bursts
    /// (`CpuEngine::profile_step`). The GPU's profiled step is submitted
    /// (`submit_profiled`) and collected.
    pub fn profile_step(&mut self, burst: &Burst) -> Result<(StepMetrics, PhaseProfile)> {
        if self.queued > 0 {
            return Err(Error::Experiment("collect the submitted steps before profiling one".into()));
        }
        match &mut self.inner {
            Inner::Cpu(e) => e.profile_step(burst),
            Inner::Gpu(_) => Err(Error::Gpu("the GPU engine's profiled step is submitted (submit_profiled)".into())),
        }
    }

    /// Submits one profiled step: the GPU's phased kernels with per-phase
    /// timestamps (`GpuEngine::submit_profiled`); on the CPU, a step.
    pub fn submit_profiled(&mut self) -> Result<()> {
        match &mut self.inner {
            Inner::Cpu(_) => self.submit(1),
            Inner::Gpu(e) => e.submit_profiled(),
        }
    }

    /// What times this engine's phases, and how finely (ms): the clock on
    /// the CPU; the GPU's timestamps (as the browser rounds them) when it
    /// has them, else the clock.
    pub fn phase_clock(&self) -> (PhaseClock, f64) {
        match &self.inner {
            Inner::Cpu(_) => (PhaseClock::Clock, clock_resolution_ms()),
            Inner::Gpu(e) if e.has_timestamps() => {
                (PhaseClock::GpuTimestamps, e.timestamp_resolution_ms().unwrap_or(clock_resolution_ms()))
            }
            Inner::Gpu(_) => (PhaseClock::None, clock_resolution_ms()),
        }
    }
}

/// What times an engine's phases (`Trainer::phase_clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseClock {
    /// The CPU's clock (`performance.now()` on the web).
    Clock,
    /// GPU timestamp queries.
    GpuTimestamps,
    /// Nothing can time the GPU's phases apart (no timestamp queries).
    None,
}
