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

use std::sync::Arc;

use web_time::Instant;

use super::buffers::{Buffers, MAX_STEPS_PER_SUBMIT};
use super::choose::{self, MatmulTiming};
use super::dispatch::Dispatch;
use super::fused::{FusedStep, FusedWidth};
use super::matmul::LayerMatmuls;
use super::params::*;
use super::passes::{pollster_free_pop, record_pass, PassKind};
use super::plan::Plan;
use super::readback::{map_read, MapFuture};
use super::GpuContext;
use crate::data::{Batcher, Dataset};
use crate::engine::{MemoryBytes, StepPhase, TrainState};
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::model::{Layout, TensorInfo};
use crate::optim::{learning_rate, StepScalars};

/// A submitted batch of steps whose results are not read yet.
pub(super) struct InFlight {
    pub(super) staging: wgpu::Buffer,
    pub(super) map: MapFuture,
    pub(super) first_step: u64,
    pub(super) lrs: Vec<f64>,
    /// (step in submit, pass) of each timestamp pair, in query order.
    pub(super) passes: Vec<(usize, PassKind)>,
    pub(super) cpu_data_ms: f64,
    pub(super) started: Instant,
    /// Each phase its own pass (`phase_timing`, not fused).
    pub(super) phased: bool,
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
    pub(super) submitted_step: u64,
    pub(super) buffers: Buffers,
    pub(super) plan: Plan,
    /// The variant of each layer's matmuls in `plan` (`gpu::matmul`):
    /// those measured faster on this adapter, once measured.
    pub(super) matmuls: Vec<LayerMatmuls>,
    pub(super) max_steps_per_submit: usize,
    pub(super) timestamps: Option<(wgpu::QuerySet, wgpu::Buffer)>,
    pub(super) in_flight: Vec<InFlight>,
    pub(super) spare_staging: Vec<wgpu::Buffer>,
    /// When false, gradients are not zeroed between steps (a lesson).
    pub zero_grad: bool,
    /// True: each phase is its own compute pass with a timestamp pair, so
    /// the timeline can show it. False: a step is one pass (fewer pass
    /// boundaries), timed as a whole: for throughput.
    pub phase_timing: bool,
    /// A step begun phase by phase (`step_phase`) and not yet finished.
    pub(super) partial: Option<GpuPartial>,
    /// The fused step, when the experiment allows it (`fused_unsupported`).
    pub(super) fused: Option<FusedStep>,
    /// Whether submits run the fused step (when available and activation
    /// checkpointing is off) rather than the phased dispatch lists. Both
    /// give the same run within the twin tolerances; `calibrate` picks the
    /// faster on this adapter.
    pub use_fused: bool,
    /// What a submit costs on the calibrated path (`calibrate`), for
    /// choosing steps per submit.
    pub submit_cost: Option<super::cost::SubmitCost>,
    /// The step of the timestamps read last (ms): the browser may round
    /// them (`profile::timestamp_quantum_ms`).
    pub(super) timestamp_quantum_ms: Option<f64>,
    /// The timed passes of the last submit collected (empty without
    /// timestamp queries): what a trace draws on the GPU's track.
    pub(super) last_passes: Vec<super::passes::GpuPass>,
    /// Every collected step's timed passes since they were last taken
    /// (at most `MAX_KEPT_PASSES`, the newest).
    pub(super) kept_passes: std::collections::VecDeque<super::passes::StepPass>,
}

/// Timestamp queries available per submit (wgpu's query set limit).
const MAX_QUERIES: usize = 4096;
/// Staging buffers in flight at once; a further submit waits for one.
const RING: usize = 3;
/// Row indices uploaded per submit at most (16 MiB).
const MAX_ROWS_PER_SUBMIT: usize = 1 << 22;

/// Where a step taken phase by phase stands (`phases.rs`).
pub(super) struct GpuPartial {
    pub(super) next: StepPhase,
    pub(super) lr: f64,
    /// The step's loss sum read after the previous forward phase.
    pub(super) loss_so_far: f32,
}

impl GpuEngine {
    /// Continues `state` on the GPU of `ctx`. All buffers, pipelines and
    /// bind groups are made here, once.
    pub fn from_state(ctx: Arc<GpuContext>, state: TrainState, data: Dataset) -> Result<GpuEngine> {
        state.check(&data)?;
        if let Some(why) = super::gpt::unsupported(&state.experiment) {
            return Err(crate::Error::Experiment(format!("the GPU engine cannot train this transformer: {why}")));
        }
        if let Some(why) = super::unsupported(&state.experiment) {
            return Err(crate::Error::Experiment(format!("the GPU engine cannot train this run: {why}")));
        }
        let experiment = state.experiment.clone();
        let layout = Layout::new(&experiment);
        ctx.check()?;
        if let Some(shape) = &layout.gpt {
            super::gpt::check_limits(&ctx.device.limits(), shape, experiment.batch_size)?;
        }
        let tensors = layout.tensors();
        let rows_per_step = experiment.batch_size * experiment.grad_accumulation;
        let max_steps_per_submit = (MAX_ROWS_PER_SUBMIT / rows_per_step).clamp(1, MAX_STEPS_PER_SUBMIT);
        let scope = ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let buffers =
            Buffers::new(&ctx.device, &state, &layout, &tensors, &data.train, max_steps_per_submit * rows_per_step);
        let (rows, shapes) = matmul_layers(&experiment, &layout);
        let matmuls = choose::cached_choice(&ctx, rows, &shapes);
        let plan = Plan::new(&ctx, &buffers, &experiment, &layout, &tensors, data.train.target_width, &matmuls);
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
            matmuls,
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
            timestamp_quantum_ms: None,
            last_passes: Vec::new(),
            kept_passes: Default::default(),
        })
    }

    pub fn experiment(&self) -> &Experiment {
        &self.experiment
    }
    /// The timed passes of the last submit collected (`GpuPass`).
    pub fn last_passes(&self) -> &[super::passes::GpuPass] {
        &self.last_passes
    }

    /// The timed passes of the steps collected since the last call.
    pub fn take_passes(&mut self) -> Vec<super::passes::StepPass> {
        self.kept_passes.drain(..).collect()
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
    /// The widths of the fused kernel this adapter can run this
    /// experiment at (none without a fused step).
    pub fn fused_widths(&self) -> Vec<FusedWidth> {
        self.fused.as_ref().map_or_else(Vec::new, |f| f.widths().collect())
    }
    /// The fused kernel's width submits run (None without a fused step).
    pub fn fused_width(&self) -> Option<FusedWidth> {
        self.fused.as_ref().map(|f| f.width)
    }
    /// Runs fused submits at `width`; false (and nothing changes) where
    /// there is no fused step or the adapter cannot run it at that width.
    pub fn set_fused_width(&mut self, width: FusedWidth) -> bool {
        match self.fused.as_mut() {
            Some(f) if f.widths().any(|w| w == width) => {
                f.width = width;
                true
            }
            _ => false,
        }
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
        let phased = self.phase_timing && fused.is_none();
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
            phased,
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

    /// After a step outside `submit`: nothing is in flight past `step`.
    pub(super) fn sync_submitted_step(&mut self) {
        self.submitted_step = self.step;
    }

    /// Whether submitted steps still await their readback.
    /// The variant of each layer's matmuls the phased path runs.
    pub fn matmuls(&self) -> &[LayerMatmuls] {
        &self.matmuls
    }

    /// Runs the phased path with these matmul variants (one per layer).
    /// Every variant gives the same run within the twin tolerances.
    pub fn set_matmuls(&mut self, matmuls: Vec<LayerMatmuls>) -> Result<()> {
        let layers = matmul_layers(&self.experiment, &self.layout).1.len();
        if matmuls.len() != layers {
            return Err(Error::Gpu(format!("{} matmul choices for {layers} layers", matmuls.len())));
        }
        if matmuls == self.matmuls {
            return Ok(());
        }
        self.matmuls = matmuls;
        self.rebuild_plan()
    }

    /// Builds the dispatch lists again from the buffers and choices held
    /// (after a change of matmul or attention variant).
    pub(super) fn rebuild_plan(&mut self) -> Result<()> {
        self.ctx.check()?;
        let scope = self.ctx.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let target_width = self.data.train.target_width;
        let (e, layout, tensors) = (&self.experiment, &self.layout, &self.tensors);
        self.plan = Plan::new(&self.ctx, &self.buffers, e, layout, tensors, target_width, &self.matmuls);
        match pollster_free_pop(scope) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Times both variants of each layer's matmuls on this adapter (or
    /// takes the figures measured before for these shapes) and runs the
    /// faster of each.
    pub async fn choose_matmuls(&mut self) -> Result<Vec<MatmulTiming>> {
        let (rows, shapes) = matmul_layers(&self.experiment, &self.layout);
        let (choice, timings) = choose::choose(&self.ctx, rows, &shapes).await?;
        self.set_matmuls(choice)?;
        Ok(timings)
    }

    pub fn has_in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// Names the tensors of the flat buffers.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
}

/// The linear layers the dense kernels run, and their rows: the MLP's
/// layers over the batch, or a transformer's (`gpt::matmul_shapes`) over
/// the batch's B·T positions.
pub(super) fn matmul_layers(e: &Experiment, layout: &Layout) -> (usize, Vec<crate::model::LayerShape>) {
    match &layout.gpt {
        Some(shape) => {
            let gpt = crate::model::gpt::Gpt::new(*shape);
            (e.batch_size * shape.context, super::gpt::matmul_shapes(&gpt))
        }
        None => (e.batch_size, layout.layers.clone()),
    }
}
