//! Collecting submitted steps: each submit's readback (statistics, the
//! non-finite flag, timestamps) decoded into per-step metrics, without
//! blocking on the web and by waiting for the device natively.

use std::future::Future;

use web_time::Instant;

use super::engine::{GpuEngine, InFlight};
use super::params::PHASE_OPTIMIZER;
use super::passes::{non_finite, PassKind};
use super::readback::take_mapped;
use crate::engine::{PhaseTimes, StepMetrics, Timing};
use crate::error::{Error, Result};

impl GpuEngine {
    /// Metrics of every submit whose readback has completed, without
    /// blocking (the web's path; natively call `ctx.poll()` first).
    pub fn try_collect(&mut self) -> Result<Vec<StepMetrics>> {
        self.ctx.poll();
        let mut out = Vec::new();
        while let Some(first) = self.in_flight.first_mut() {
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            match std::pin::Pin::new(&mut first.map).poll(&mut cx) {
                std::task::Poll::Pending => break,
                std::task::Poll::Ready(result) => {
                    let done = self.in_flight.remove(0);
                    result.map_err(|e| Error::Gpu(format!("reading step statistics: {e}")))?;
                    out.extend(self.finish(done)?);
                }
            }
        }
        self.ctx.check()?;
        Ok(out)
    }

    /// Awaits the oldest submit in flight and returns its metrics (with
    /// any others already done). The web's path: the browser resolves the
    /// mapping while the page stays responsive.
    pub async fn collect_async(&mut self) -> Result<Vec<StepMetrics>> {
        if let Some(first) = self.in_flight.first_mut() {
            self.ctx.poll();
            (&mut first.map).await.map_err(|e| Error::Gpu(format!("reading step statistics: {e}")))?;
            let done = self.in_flight.remove(0);
            let mut out = self.finish(done)?;
            out.extend(self.try_collect()?);
            return Ok(out);
        }
        Ok(Vec::new())
    }

    /// Native: waits for every submit in flight and returns their metrics.
    pub fn collect(&mut self) -> Result<Vec<StepMetrics>> {
        self.ctx.wait_idle()?;
        let mut out = self.try_collect()?;
        // With the device shared between threads, another thread's poll
        // may be the one running our map callbacks, a moment after our
        // wait returned: poll until they have run (bounded).
        let started = Instant::now();
        while !self.in_flight.is_empty() {
            if started.elapsed().as_secs_f64() > 10.0 {
                return Err(Error::Gpu("a readback did not complete after waiting for the GPU".into()));
            }
            std::thread::yield_now();
            out.extend(self.try_collect()?);
        }
        Ok(out)
    }

    /// Decodes one submit's readback into per-step metrics.
    fn finish(&mut self, done: InFlight) -> Result<Vec<StepMetrics>> {
        let bytes = take_mapped(&done.staging)?;
        self.spare_staging.push(done.staging);
        let steps = done.lrs.len();
        let wall_ms = done.started.elapsed().as_secs_f64() * 1e3;
        let floats: &[f32] = bytemuck::cast_slice(&bytes[..16 * steps]);
        let flags: &[u32] = bytemuck::cast_slice(&bytes[16 * steps..16 * steps + 16]);
        let k = self.experiment.grad_accumulation as f32;
        let mut per_step = vec![PhaseTimes::default(); steps];
        let mut gpu_ms = vec![None; steps];
        self.last_passes.clear();
        let timing = if done.passes.is_empty() {
            // No timestamps: only the submit's wall time is known. It is
            // reported whole in forward_ms, labelled Timing::GpuCoarse.
            for phases in per_step.iter_mut() {
                phases.data_ms = done.cpu_data_ms / steps as f64;
                phases.forward_ms = (wall_ms - done.cpu_data_ms) / steps as f64;
            }
            Timing::GpuCoarse
        } else {
            let ticks: &[u64] = bytemuck::cast_slice(&bytes[16 * steps + 16..16 * steps + 16 + 16 * done.passes.len()]);
            let period_ms = self.ctx.queue.get_timestamp_period() as f64 * 1e-6;
            self.timestamp_quantum_ms = Some(super::profile::timestamp_quantum_ms(ticks, period_ms));
            for (i, &(s, kind)) in done.passes.iter().enumerate() {
                let ms = ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period_ms;
                let at = |tick: u64| tick.saturating_sub(ticks[0]) as f64 * period_ms;
                let (start_ms, end_ms) = (at(ticks[2 * i]), at(ticks[2 * i + 1]));
                self.last_passes.push(super::passes::GpuPass { step: s, kind, start_ms, end_ms });
                if self.kept_passes.len() == super::passes::MAX_KEPT_PASSES {
                    self.kept_passes.pop_front();
                }
                let step = done.first_step + s as u64;
                self.kept_passes.push_back(super::passes::StepPass { step, kind, start_ms, end_ms });
                if kind == PassKind::Fused {
                    gpu_ms.iter_mut().for_each(|g| *g = Some(ms / steps as f64));
                    continue;
                }
                *gpu_ms[s].get_or_insert(0.0) += ms;
                let p = &mut per_step[s];
                match kind {
                    PassKind::Data => p.data_ms += ms,
                    PassKind::Forward => p.forward_ms += ms,
                    PassKind::Backward => p.backward_ms += ms,
                    PassKind::Optimizer => p.optimizer_ms += ms,
                    PassKind::Step | PassKind::Fused => {}
                }
            }
            for p in per_step.iter_mut() {
                p.data_ms += done.cpu_data_ms / steps as f64;
            }
            if done.passes[0].1 == PassKind::Fused {
                Timing::GpuFused
            } else if done.phased {
                Timing::GpuTimestamps
            } else {
                Timing::GpuTotal
            }
        };
        let code = flags[0];
        let good_steps = if code == u32::MAX { steps } else { (code >> 16) as usize };
        let metrics: Vec<StepMetrics> = (0..good_steps)
            .map(|s| StepMetrics {
                step: done.first_step + s as u64,
                loss: floats[4 * s] / k,
                grad_norm: floats[4 * s + 1],
                z_loss: self.layout.gpt.as_ref().map(|_| floats[4 * s + 3] / k),
                lr: done.lrs[s],
                clipped: floats[4 * s + 2] > 0.5,
                phases: per_step[s],
                timing,
                gpu_ms: gpu_ms[s],
                ranks: Vec::new(),
            })
            .collect();
        // A non-finite value in forward or backward stops its step before
        // the update (the optimizer kernels skip once the flag is set); one
        // in the optimizer phase comes after the update was applied.
        let applied = good_steps + usize::from(code != u32::MAX && (code >> 8) & 0xff == PHASE_OPTIMIZER);
        self.step = done.first_step + applied as u64;
        if code != u32::MAX {
            // Later submits ran on top of a failed one: drop them too.
            self.in_flight.clear();
            self.submitted_step = self.step;
            return Err(non_finite(code, &self.layout, done.first_step));
        }
        Ok(metrics)
    }

    /// One optimizer step, submitted and read back (native).
    pub fn step(&mut self) -> Result<StepMetrics> {
        self.submit(1)?;
        let mut metrics = self.collect()?;
        metrics.pop().ok_or_else(|| Error::Gpu("a step produced no metrics".into()))
    }

    /// `steps` optimizer steps in submits of up to `per_submit` steps, one
    /// readback each (native).
    pub fn run(&mut self, steps: usize, per_submit: usize) -> Result<Vec<StepMetrics>> {
        let mut out = Vec::with_capacity(steps);
        let mut left = steps;
        while left > 0 {
            let n = left.min(per_submit).min(self.max_steps_per_submit());
            self.submit(n)?;
            out.extend(self.collect()?);
            left -= n;
        }
        Ok(out)
    }
}
