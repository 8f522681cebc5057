//! The GPU trainer: the same run as `CpuEngine`, on wgpu.
//!
//! A submit records K optimizer steps (K = 1 for `step`) with no readback
//! in between: per step, per micro-batch, a data pass (gather rows), a
//! forward pass and a backward pass, then an optimizer pass. The CPU only
//! computes the row indices and per-step scalars (learning rate, bias
//! corrections) up front. After the submit, the per-step statistics, the
//! non-finite flag and the timestamps are copied into a staging buffer of a
//! small ring and mapped asynchronously: nothing blocks on the GPU in the
//! step path, so the same code runs on the web.

use std::future::Future;
use std::sync::Arc;

use web_time::Instant;

use super::buffers::{Buffers, MAX_STEPS_PER_SUBMIT};
use super::fused::FusedStep;
use super::params::*;
use super::passes::{non_finite, pollster_free_pop, record_pass, PassKind};
use super::plan::{Dispatch, Plan};
use super::readback::{map_read, take_mapped, MapFuture};
use super::{read_buffer, GpuContext};
use crate::data::{Batcher, Dataset};
use crate::engine::{MemoryBytes, PhaseTimes, StepMetrics, Timing, TrainState};
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::model::{Layout, TensorInfo};
use crate::optim::{learning_rate, StepScalars};

/// A submitted batch of steps whose results are not read yet.
struct InFlight {
    staging: wgpu::Buffer,
    map: MapFuture,
    first_step: u64,
    lrs: Vec<f64>,
    /// (step in submit, pass) of each timestamp pair, in query order.
    passes: Vec<(usize, PassKind)>,
    cpu_data_ms: f64,
    started: Instant,
}

pub struct GpuEngine {
    pub(super) ctx: Arc<GpuContext>,
    pub(super) experiment: Experiment,
    pub(super) layout: Layout,
    pub(super) tensors: Vec<TensorInfo>,
    data: Dataset,
    pub(super) batcher: Batcher,
    /// Optimizer steps whose results are applied (read back).
    pub(super) step: u64,
    /// Optimizer steps submitted (≥ `step` while a submit is in flight).
    submitted_step: u64,
    pub(super) buffers: Buffers,
    pub(super) plan: Plan,
    pub(super) max_steps_per_submit: usize,
    timestamps: Option<(wgpu::QuerySet, wgpu::Buffer)>,
    in_flight: Vec<InFlight>,
    spare_staging: Vec<wgpu::Buffer>,
    /// When false, gradients are not zeroed between steps (a lesson).
    pub zero_grad: bool,
    /// True: each phase is its own compute pass with a timestamp pair, so
    /// the timeline can show it. False: a step is one pass (fewer pass
    /// boundaries), timed as a whole: for throughput.
    pub phase_timing: bool,
    /// A step begun phase by phase (`step_phase`) and not yet finished.
    pub(super) partial: Option<super::phases::GpuPartial>,
    /// The fused step, when the experiment allows it (`fused_unsupported`).
    pub(super) fused: Option<FusedStep>,
    /// Whether submits run the fused step (when available and activation
    /// checkpointing is off) rather than the phased dispatch lists. Both
    /// give the same run within the twin tolerances; `calibrate` picks the
    /// faster on this adapter.
    pub use_fused: bool,
    /// What a submit costs on the calibrated path (`calibrate`), for
    /// choosing steps per submit.
    pub submit_cost: Option<super::calibrate::SubmitCost>,
}

/// Timestamp queries available per submit (wgpu's query set limit).
const MAX_QUERIES: usize = 4096;
/// Staging buffers in flight at once; a further submit waits for one.
const RING: usize = 3;
/// Row indices uploaded per submit at most (16 MiB).
const MAX_ROWS_PER_SUBMIT: usize = 1 << 22;

impl GpuEngine {
    /// Continues `state` on the GPU of `ctx`. All buffers, pipelines and
    /// bind groups are made here, once.
    pub fn from_state(ctx: Arc<GpuContext>, state: TrainState, data: Dataset) -> Result<GpuEngine> {
        state.check(&data)?;
        let experiment = state.experiment.clone();
        let layout = Layout::new(&experiment);
        ctx.check()?;
        let tensors = layout.tensors();
        let rows_per_step = experiment.batch_size * experiment.grad_accumulation;
        let max_steps_per_submit = (MAX_ROWS_PER_SUBMIT / rows_per_step).clamp(1, MAX_STEPS_PER_SUBMIT);
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buffers =
            Buffers::new(&ctx.device, &state, &layout, &tensors, &data.train, max_steps_per_submit * rows_per_step);
        let plan = Plan::new(&ctx, &buffers, &experiment, &layout, &tensors, data.train.target_width);
        let fused = FusedStep::new(&ctx, &buffers, &experiment, &layout, data.train.target_width);
        let timestamps = ctx.timestamps.then(|| {
            let query_set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("phase timestamps"),
                ty: wgpu::QueryType::Timestamp,
                count: MAX_QUERIES as u32,
            });
            let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("timestamp resolve"),
                size: 8 * MAX_QUERIES as u64,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            (query_set, resolve)
        });
        if let Some(err) = pollster_free_pop(scope) {
            return Err(err);
        }
        let batcher = Batcher::new(data.train.rows(), experiment.data.shuffle, state.data_position.clone());
        Ok(GpuEngine {
            step: state.step(),
            submitted_step: state.step(),
            ctx,
            experiment,
            layout,
            tensors,
            data,
            batcher,
            buffers,
            plan,
            max_steps_per_submit,
            timestamps,
            in_flight: Vec::new(),
            spare_staging: Vec::new(),
            zero_grad: true,
            phase_timing: true,
            partial: None,
            fused,
            use_fused: false,
            submit_cost: None,
        })
    }

    pub fn experiment(&self) -> &Experiment {
        &self.experiment
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn data(&self) -> &Dataset {
        &self.data
    }
    pub fn context(&self) -> &Arc<GpuContext> {
        &self.ctx
    }
    pub fn step_count(&self) -> u64 {
        self.step
    }
    pub fn memory(&self) -> MemoryBytes {
        self.buffers.bytes
    }
    /// Most steps one submit runs: fewer on the fused path where the
    /// adapter caps loop iterations (`fused::max_fused_steps`).
    pub fn max_steps_per_submit(&self) -> usize {
        match self.fused.as_ref().filter(|_| self.runs_fused()) {
            Some(fused) => self.max_steps_per_submit.min(fused.max_steps()),
            None => self.max_steps_per_submit,
        }
    }
    /// Whether this experiment can run the fused step.
    pub fn fused_available(&self) -> bool {
        self.fused.is_some()
    }
    /// Whether the next submit runs the fused step.
    pub fn runs_fused(&self) -> bool {
        self.use_fused && self.fused.is_some() && !self.buffers.checkpointing
    }
    /// Whether per-phase times come from GPU timestamp queries.
    pub fn has_timestamps(&self) -> bool {
        self.timestamps.is_some()
    }

    /// Records and submits `steps` optimizer steps in one submit and starts
    /// reading their statistics back. Returns at once; `try_collect` (web)
    /// or `collect` (native) gives the metrics.
    pub fn submit(&mut self, steps: usize) -> Result<()> {
        self.ctx.check()?;
        if self.partial.is_some() {
            return Err(Error::Gpu("a step taken phase by phase is unfinished: finish_step first".into()));
        }
        let steps = steps.clamp(1, self.max_steps_per_submit());
        if self.in_flight.len() >= RING {
            return Err(Error::Gpu(format!("{RING} submits are already in flight; collect their results first")));
        }
        let started = Instant::now();
        let e = &self.experiment;
        let (batch, k) = (e.batch_size, e.grad_accumulation);

        // Data (CPU side): the rows of every micro-batch, and the scalars.
        let mut rows = Vec::with_capacity(steps * k * batch);
        let mut scalars = Vec::with_capacity(steps);
        let mut lrs = Vec::with_capacity(steps);
        for s in 0..steps {
            let t = self.submitted_step + s as u64;
            let lr = learning_rate(&e.schedule, e.optimizer.lr(), t);
            lrs.push(lr);
            scalars.push(StepScalars::new(&e.optimizer, lr, t + 1));
            for _ in 0..k * batch {
                rows.push(self.batcher.next_row() as u32);
            }
        }
        let queue = &self.ctx.queue;
        queue.write_buffer(&self.buffers.rows, 0, bytemuck::cast_slice(&rows));
        queue.write_buffer(&self.buffers.scalars, 0, bytemuck::cast_slice(&scalars));
        queue.write_buffer(&self.buffers.flags, 0, bytemuck::cast_slice(&FLAGS_INIT));
        let cpu_data_ms = started.elapsed().as_secs_f64() * 1e3;

        let fused = self.fused.as_ref().filter(|_| self.runs_fused());
        let passes_per_step = if self.phase_timing { 3 * k + 1 } else { 1 };
        let use_timestamps =
            self.timestamps.is_some() && (fused.is_some() || 2 * steps * passes_per_step <= MAX_QUERIES);
        let mut passes = Vec::new();
        let device = &self.ctx.device;
        let timestamps = if use_timestamps { self.timestamps.as_ref() } else { None };
        let mut encoder =
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("training steps") });
        if let Some(fused) = fused {
            let timestamp_writes = timestamps.map(|(query_set, _)| {
                passes.push((0, PassKind::Fused));
                wgpu::ComputePassTimestampWrites {
                    query_set,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }
            });
            fused.record(&self.ctx, &mut encoder, &self.buffers, steps, self.zero_grad, timestamp_writes);
        } else {
            encoder.clear_buffer(&self.buffers.stats, 0, None);
        }
        for s in (0..steps).filter(|_| fused.is_none()) {
            if self.zero_grad {
                encoder.clear_buffer(&self.buffers.grads, 0, None);
            }
            // The step's dispatches in order, grouped by phase.
            let mut groups: Vec<(PassKind, Vec<&Dispatch>)> = Vec::with_capacity(3 * k + 1);
            for m in 0..k {
                let mut backward: Vec<&Dispatch> = self.plan.backward.iter().collect();
                if m == k - 1 {
                    backward.extend(self.plan.regularize.iter());
                }
                groups.push((PassKind::Data, self.plan.data.iter().collect()));
                groups.push((PassKind::Forward, self.plan.forward.iter().collect()));
                groups.push((PassKind::Backward, backward));
            }
            groups.push((PassKind::Optimizer, self.plan.optimizer.iter().collect()));
            if self.phase_timing {
                for (kind, dispatches) in groups {
                    record_pass(&mut encoder, &self.ctx, timestamps, &mut passes, s, kind, &dispatches);
                }
            } else {
                let all: Vec<&Dispatch> = groups.into_iter().flat_map(|(_, d)| d).collect();
                record_pass(&mut encoder, &self.ctx, timestamps, &mut passes, s, PassKind::Step, &all);
            }
        }

        // Readback: stats (4 f32 per step), flags (4 u32), timestamps (u64s).
        let stats_bytes = (16 * steps) as u64;
        let ts_bytes = if use_timestamps { 16 * passes.len() as u64 } else { 0 };
        let size = stats_bytes + 16 + ts_bytes;
        let staging = self.staging_buffer(size);
        encoder.copy_buffer_to_buffer(&self.buffers.stats, 0, &staging, 0, stats_bytes);
        encoder.copy_buffer_to_buffer(&self.buffers.flags, 0, &staging, stats_bytes, 16);
        if let (true, Some((query_set, resolve))) = (use_timestamps, &self.timestamps) {
            let queries = 2 * passes.len() as u32;
            encoder.resolve_query_set(query_set, 0..queries, resolve, 0);
            encoder.copy_buffer_to_buffer(resolve, 0, &staging, stats_bytes + 16, ts_bytes);
        }
        self.ctx.queue.submit([encoder.finish()]);
        let map = map_read(&staging);
        self.in_flight.push(InFlight {
            staging,
            map,
            first_step: self.submitted_step,
            lrs,
            passes: if use_timestamps { passes } else { Vec::new() },
            cpu_data_ms,
            started,
        });
        self.submitted_step += steps as u64;
        Ok(())
    }

    fn staging_buffer(&mut self, size: u64) -> wgpu::Buffer {
        if let Some(i) = self.spare_staging.iter().position(|b| b.size() >= size) {
            return self.spare_staging.swap_remove(i);
        }
        self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("step readback"),
            size: size.next_multiple_of(256),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

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

    /// Parameters, gradients and last updates (each (P)), read back for
    /// the page's views.
    pub async fn read_tensors(&self) -> Result<[Vec<f32>; 3]> {
        let p = self.layout.parameter_count;
        let mut out: [Vec<f32>; 3] = Default::default();
        for (slot, buffer) in out.iter_mut().zip([&self.buffers.params, &self.buffers.grads, &self.buffers.updates]) {
            let bytes = read_buffer(&self.ctx, buffer).await?;
            *slot = bytemuck::cast_slice::<u8, f32>(&bytes)[..p].to_vec();
        }
        self.ctx.check()?;
        Ok(out)
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
            for (i, &(s, kind)) in done.passes.iter().enumerate() {
                let ms = ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period_ms;
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
            } else if self.phase_timing {
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
                lr: done.lrs[s],
                clipped: floats[4 * s + 2] > 0.5,
                phases: per_step[s],
                timing,
                gpu_ms: gpu_ms[s],
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
            return Err(non_finite(code, self.layout.layers.len()));
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

    /// After a step outside `submit`: nothing is in flight past `step`.
    pub(super) fn sync_submitted_step(&mut self) {
        self.submitted_step = self.step;
    }

    /// Whether submitted steps still await their readback.
    pub fn has_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Names the tensors of the flat buffers.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
}
