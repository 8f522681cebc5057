//! The fused training step (`shaders/train_step_fused.wgsl`): K whole steps
//! in one dispatch of one workgroup, for networks small enough that a
//! phased step's ~20 dispatches cost more than their arithmetic.
//!
//! The kernel keeps gradients, updates, per-step statistics, the flags and
//! every activation in one `work` buffer (eight storage bindings, the
//! WebGPU default limit), so a submit copies the gradients in, dispatches
//! once, and copies gradients, updates, statistics and flags back to the
//! buffers the phased path, the readback and the views use. Parameters and
//! optimizer moments are the engine's own buffers: a run can switch
//! between the paths at any submit, and checkpoints do not care which ran.

use wgpu::util::DeviceExt;

use super::buffers::{Buffers, MAX_STEPS_PER_SUBMIT};
use super::params::{activation_code, loss_code, STEP_STATS_STRIDE};
use super::{GpuContext, Kernel};
use crate::experiment::{Experiment, OptimizerSpec, RegularizationKind};
use crate::model::Layout;

/// Layers the kernel's `Params` has room for (its norms: 2 tensors each).
pub const MAX_FUSED_LAYERS: usize = 16;
/// Widest layer (inputs or units) and largest batch the fused step takes.
pub const MAX_FUSED_WIDTH: usize = 256;
pub const MAX_FUSED_BATCH: usize = 1024;

/// One layer of `Params.layers` in `shaders/train_step_fused.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FusedLayer {
    /// inputs, units, weight offset, bias offset (in params)
    pub shape: [u32; 4],
    /// activation code, z, a, dz (offsets in work)
    pub place: [u32; 4],
}

/// `Params` of `shaders/train_step_fused.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FusedParams {
    pub batch: u32,
    pub inputs: u32,
    pub target_width: u32,
    pub n_layers: u32,
    pub count: u32,
    pub loss: u32,
    pub micro_batches: u32,
    pub loss_scale: f32,
    pub optimizer: u32,
    pub decoupled: u32,
    pub use_momentum: u32,
    pub nesterov: u32,
    pub momentum: f32,
    pub one_minus_dampening: f32,
    pub weight_decay: f32,
    pub one_minus_beta1: f32,
    pub beta2: f32,
    pub one_minus_beta2: f32,
    pub eps: f32,
    pub clip_enabled: u32,
    pub max_norm: f32,
    pub regularization: u32,
    pub regularization_rate: f32,
    pub updates_offset: u32,
    pub stats_offset: u32,
    pub flags_offset: u32,
    pub x_offset: u32,
    pub t_offset: u32,
    pub layers: [FusedLayer; MAX_FUSED_LAYERS],
}

/// `Run` of `shaders/train_step_fused.wgsl`: what changes per submit.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct FusedRun {
    pub steps: u32,
    pub zero_grad: u32,
    pub _pad: [u32; 2],
}

/// Why the fused step does not apply to an experiment, if it does not.
pub fn fused_unsupported(e: &Experiment, layout: &Layout) -> Option<String> {
    if e.gpt().is_some() {
        return Some("a transformer's step runs on the phased path".into());
    }
    if e.model.layers.iter().any(|l| l.kind.is_spatial()) {
        return Some("a conv net's step runs on the phased path".into());
    }
    if matches!(e.optimizer, OptimizerSpec::Lamb { .. }) {
        return Some("LAMB's per-tensor trust ratios run on the phased path".into());
    }
    if layout.layers.len() > MAX_FUSED_LAYERS {
        return Some(format!("more than {MAX_FUSED_LAYERS} layers"));
    }
    // One workgroup does all the arithmetic: past these sizes the phased
    // kernels' parallelism wins on every adapter, and measuring the fused
    // step would take seconds.
    if layout.layers.iter().any(|l| l.inputs > MAX_FUSED_WIDTH || l.units > MAX_FUSED_WIDTH) {
        return Some(format!("a layer wider than {MAX_FUSED_WIDTH}"));
    }
    if e.batch_size > MAX_FUSED_BATCH {
        return Some(format!("a batch larger than {MAX_FUSED_BATCH}"));
    }
    None
}

/// Mesa's llvmpipe (and lavapipe, its Vulkan driver) caps the iterations
/// of a loop nest per invocation at 65 535 (gallivm's
/// `LP_MAX_TGSI_LOOP_ITERATIONS`), counting every loop inside the
/// outermost one together, and silently leaves the loop past that. The
/// fused kernel's outermost loop is the one over steps, so there a submit
/// must stay under the cap (with a margin for this estimate).
const LLVMPIPE_LOOP_LIMIT: usize = 60_000;

/// Whether the adapter is llvmpipe-based (see `LLVMPIPE_LOOP_LIMIT`).
pub fn caps_loop_iterations(adapter: &wgpu::AdapterInfo) -> bool {
    adapter.name.contains("llvmpipe")
}

/// Invocations in the fused kernel's one workgroup (its `WG` override):
/// two variants, timed on the adapter by the calibration. On a real GPU a
/// barrier costs nanoseconds and 64 lanes share the arithmetic; on a
/// software adapter every invocation is a coroutine on one CPU thread,
/// so a barrier resumes each in turn, and 4 (one SIMD group of
/// SwiftShader) ran a small network's step about 1.45× as fast as 64.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedWidth {
    Wide,
    Narrow,
}

impl FusedWidth {
    pub const ALL: [FusedWidth; 2] = [FusedWidth::Wide, FusedWidth::Narrow];

    pub fn invocations(self) -> usize {
        match self {
            FusedWidth::Wide => 64,
            FusedWidth::Narrow => 4,
        }
    }

    pub fn kernel(self) -> Kernel {
        match self {
            FusedWidth::Wide => Kernel::TrainStepFused,
            FusedWidth::Narrow => Kernel::TrainStepFusedNarrow,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An upper bound on the loop iterations one invocation of the fused
/// kernel of `width` runs per step (every loop counted, back-edges of
/// strided loops included), for `caps_loop_iterations` adapters.
pub fn loop_iterations_per_step(e: &Experiment, layout: &Layout, target_width: usize, width: FusedWidth) -> usize {
    let wg = width.invocations();
    let strided = |n: usize| n.div_ceil(wg);
    let (batch, count) = (e.batch_size, layout.parameter_count);
    let last = layout.layers.last().map_or(1, |l| l.units);
    let mut micro = strided(batch * (e.model.inputs + target_width)) + layout.layers.len() + 1;
    for l in &layout.layers {
        micro += strided(batch * l.units) * (l.inputs + 1) + 1;
        micro += strided(l.units * (l.inputs + 1)) * (batch + 1) + strided(batch * l.inputs) * (l.units + 1) + 2;
    }
    micro += strided(batch * last) * (3 * last + 1) + wg + strided(batch) * (4 * last + 1);
    let tensors: usize = layout.layers.iter().map(|l| strided(l.units * l.inputs) + strided(l.units) + 2).sum();
    let step = e.grad_accumulation * (micro + 1)
        + strided(count) * 3
        + 2 * tensors
        + wg * (2 * layout.layers.len() + 1)
        + 4 * layout.layers.len()
        + 4;
    step + 1
}

/// Steps per fused submit of `width` the adapter allows:
/// `MAX_STEPS_PER_SUBMIT`, or fewer on llvmpipe (0: none, the fused step
/// of that width does not apply there).
pub fn max_fused_steps(
    adapter: &wgpu::AdapterInfo,
    e: &Experiment,
    layout: &Layout,
    target_width: usize,
    width: FusedWidth,
) -> usize {
    if !caps_loop_iterations(adapter) {
        return MAX_STEPS_PER_SUBMIT;
    }
    // The count bounds the wide kernel's loops (a step of the 8-layer test
    // network went wrong past 2 048–2 114 iterations a step; the bound says
    // 2 381). With 4 invocations llvmpipe counts more than this model of
    // the loops says: 1.06–1.24× the bound for 2-16-16-1 at batch 32,
    // 1.41–1.88× for the 8-layer network, found by growing the submit
    // until the run left the CPU's. Hence a margin of 3 there.
    let margin = match width {
        FusedWidth::Wide => 1,
        FusedWidth::Narrow => 3,
    };
    (LLVMPIPE_LOOP_LIMIT / (margin * loop_iterations_per_step(e, layout, target_width, width)))
        .min(MAX_STEPS_PER_SUBMIT)
}

/// The fused step of one engine: its work buffer, uniforms and bind group.
/// After each submit the engine's buffers hold what the phased path
/// leaves: gradients, updates, statistics, flags and the last
/// micro-batch's z and a.
pub struct FusedStep {
    work: wgpu::Buffer,
    run: wgpu::Buffer,
    /// `params`, as the kernel reads them.
    uniform: wgpu::Buffer,
    /// One per width: each pipeline has its own layout (`layout: None`).
    bind_groups: [wgpu::BindGroup; 2],
    params: FusedParams,
    /// Bytes of the gradients (and of the updates) in `work`.
    p_bytes: u64,
    /// Most steps per submit of each width (`max_fused_steps`; 0 where
    /// that width does not apply).
    max_steps: [usize; 2],
    /// The width submits run.
    pub width: FusedWidth,
}

impl FusedStep {
    /// Lays out the work buffer and binds the engine's buffers. None when
    /// the experiment needs the phased path (`fused_unsupported`) or the
    /// adapter cannot run one fused step of it at either width
    /// (`max_fused_steps`). It starts on the wide kernel where that runs.
    pub fn new(
        ctx: &GpuContext,
        b: &Buffers,
        e: &Experiment,
        layout: &Layout,
        target_width: usize,
    ) -> Option<FusedStep> {
        let max_steps = FusedWidth::ALL.map(|w| max_fused_steps(&ctx.adapter_info, e, layout, target_width, w));
        if fused_unsupported(e, layout).is_some() || max_steps.iter().all(|&m| m == 0) {
            return None;
        }
        let width = if max_steps[FusedWidth::Wide.index()] > 0 { FusedWidth::Wide } else { FusedWidth::Narrow };
        let u = |x: usize| x as u32;
        let batch = e.batch_size;
        let count = layout.parameter_count;
        // Word offsets in work: grads, updates, stats, flags, x, t, then
        // z, a, dz of each layer.
        let updates_offset = count;
        let stats_offset = 2 * count;
        let flags_offset = stats_offset + STEP_STATS_STRIDE * MAX_STEPS_PER_SUBMIT;
        let x_offset = flags_offset + 4;
        let t_offset = x_offset + batch * e.model.inputs;
        let mut next = t_offset + batch * target_width;
        let mut layers = [FusedLayer::default(); MAX_FUSED_LAYERS];
        for (l, shape) in layout.layers.iter().enumerate() {
            let n = batch * shape.units;
            layers[l] = FusedLayer {
                shape: [u(shape.inputs), u(shape.units), u(shape.weight_offset), u(shape.bias_offset)],
                place: [activation_code(e.model.layers[l].activation), u(next), u(next + n), u(next + 2 * n)],
            };
            next += 3 * n;
        }
        let mut params = FusedParams {
            batch: u(batch),
            inputs: u(e.model.inputs),
            target_width: u(target_width),
            n_layers: u(layout.layers.len()),
            count: u(count),
            loss: loss_code(e.loss),
            micro_batches: u(e.grad_accumulation),
            loss_scale: 1.0 / e.grad_accumulation as f32,
            updates_offset: u(updates_offset),
            stats_offset: u(stats_offset),
            flags_offset: u(flags_offset),
            x_offset: u(x_offset),
            t_offset: u(t_offset),
            layers,
            ..bytemuck::Zeroable::zeroed()
        };
        tune(&mut params, e)?;
        let optimizer = params.optimizer;
        let device = &ctx.device;
        let work = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("fused step work"),
            size: 4 * next as u64,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let uniform = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("fused step params"),
            contents: bytemuck::bytes_of(&params),
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        });
        let run = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("fused step run"),
            size: std::mem::size_of::<FusedRun>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let moment1 = if optimizer == 0 { &b.momentum_buffer } else { &b.exp_avg };
        let buffers = [
            &b.params,
            moment1,
            &b.exp_avg_sq,
            &work,
            &b.table_inputs,
            &b.table_targets,
            &b.rows,
            &b.scalars,
            &uniform,
            &run,
        ];
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, buffer)| wgpu::BindGroupEntry { binding: i as u32, resource: buffer.as_entire_binding() })
            .collect();
        let bind_groups = FusedWidth::ALL.map(|w| {
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("train_step_fused"),
                layout: &ctx.pipelines.get(w.kernel()).get_bind_group_layout(0),
                entries: &entries,
            })
        });
        Some(FusedStep { work, run, uniform, bind_groups, params, p_bytes: 4 * count as u64, max_steps, width })
    }

    /// A live edit of `e`'s optimizer hyperparameters, clipping or
    /// regularization: rewrites the uniform, nothing else. The caller
    /// checks that the optimizer kind and its state's layout are unchanged.
    pub fn retune(&mut self, ctx: &GpuContext, e: &Experiment) {
        if tune(&mut self.params, e).is_some() {
            ctx.queue.write_buffer(&self.uniform, 0, bytemuck::bytes_of(&self.params));
        }
    }

    /// Most steps one fused submit of the current width may run on this
    /// adapter.
    pub fn max_steps(&self) -> usize {
        self.max_steps[self.width.index()]
    }

    /// The widths this adapter can run a fused step of this experiment at.
    pub fn widths(&self) -> impl Iterator<Item = FusedWidth> + '_ {
        FusedWidth::ALL.into_iter().filter(|w| self.max_steps[w.index()] > 0)
    }

    /// Records `steps` fused steps: gradients in, one dispatch, then
    /// gradients, updates, statistics and flags out to `b`. The rows and
    /// scalars of the steps must already be written.
    pub fn record(
        &self,
        ctx: &GpuContext,
        encoder: &mut wgpu::CommandEncoder,
        b: &Buffers,
        steps: usize,
        zero_grad: bool,
        timestamp_writes: Option<wgpu::ComputePassTimestampWrites>,
    ) {
        let run = FusedRun { steps: steps as u32, zero_grad: u32::from(zero_grad), _pad: [0; 2] };
        ctx.queue.write_buffer(&self.run, 0, bytemuck::bytes_of(&run));
        let p = self.p_bytes;
        let word = |offset: u32| 4 * offset as u64;
        encoder.copy_buffer_to_buffer(&b.grads, 0, &self.work, 0, p);
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("fused steps"), timestamp_writes });
            pass.set_pipeline(ctx.pipelines.get(self.width.kernel()));
            pass.set_bind_group(0, &self.bind_groups[self.width.index()], &[]);
            pass.dispatch_workgroups(1, 1, 1);
        }
        encoder.copy_buffer_to_buffer(&self.work, 0, &b.grads, 0, p);
        encoder.copy_buffer_to_buffer(&self.work, word(self.params.updates_offset), &b.updates, 0, p);
        let stats_bytes = (4 * STEP_STATS_STRIDE * steps) as u64;
        encoder.copy_buffer_to_buffer(&self.work, word(self.params.stats_offset), &b.stats, 0, stats_bytes);
        encoder.copy_buffer_to_buffer(&self.work, word(self.params.flags_offset), &b.flags, 0, 16);
        // The last micro-batch's z and a, where the phased path leaves them
        // (the per-layer statistics read a; the fused path runs only
        // without activation checkpointing, so every layer has its z).
        for (l, layer) in self.params.layers[..self.params.n_layers as usize].iter().enumerate() {
            let bytes = 4 * u64::from(self.params.batch) * u64::from(layer.shape[1]);
            encoder.copy_buffer_to_buffer(&self.work, word(layer.place[1]), &b.z[l], 0, bytes);
            encoder.copy_buffer_to_buffer(&self.work, word(layer.place[2]), &b.a[l], 0, bytes);
        }
    }
}

/// Writes `e`'s optimizer, clipping and regularization fields into
/// `params`: what a live edit of the hyperparameters changes. None for an
/// optimizer the fused step does not run (LAMB).
fn tune(params: &mut FusedParams, e: &Experiment) -> Option<()> {
    let (optimizer, decoupled, use_momentum, nesterov, momentum, one_minus_dampening, weight_decay, betas, eps) =
        match e.optimizer {
            OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } => (
                0,
                0,
                u32::from(momentum != 0.0),
                u32::from(nesterov),
                momentum,
                1.0 - dampening,
                weight_decay,
                [0.0; 2],
                0.0,
            ),
            OptimizerSpec::Adam { betas, eps, weight_decay, .. } => (1, 0, 0, 0, 0.0, 0.0, weight_decay, betas, eps),
            OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => (1, 1, 0, 0, 0.0, 0.0, weight_decay, betas, eps),
            OptimizerSpec::Lamb { .. } => return None,
        };
    let (regularization, regularization_rate) = match &e.regularization {
        Some(r) if r.kind == RegularizationKind::L1 => (1, r.rate as f32),
        Some(r) => (2, r.rate as f32),
        None => (0, 0.0),
    };
    *params = FusedParams {
        optimizer,
        decoupled,
        use_momentum,
        nesterov,
        momentum: momentum as f32,
        one_minus_dampening: one_minus_dampening as f32,
        weight_decay: weight_decay as f32,
        one_minus_beta1: (1.0 - betas[0]) as f32,
        beta2: betas[1] as f32,
        one_minus_beta2: (1.0 - betas[1]) as f32,
        eps: eps as f32,
        clip_enabled: u32::from(e.clip_grad_norm.is_some()),
        max_norm: e.clip_grad_norm.unwrap_or(0.0) as f32,
        regularization,
        regularization_rate,
        ..*params
    };
    Some(())
}
