//! The transformer's forward on the GPU engine for sampling (`stepscope
//! sample --backend gpu`): the training plan's own forward dispatches
//! (`gpu::gpt::dispatches` without a loss) over one window, and the logits
//! of its last position read back for the CPU's `Sampler` to draw from.
//!
//! A window shorter than T is padded to T: attention is causal and every
//! other op works row by row, so the logits at position t − 1 depend on
//! tokens 0..t only and are those of the CPU's forward over t tokens
//! (within the twin tolerances). One set of buffers and one dispatch list
//! serve every length.

use std::sync::Arc;

use wgpu::util::DeviceExt;

use super::dispatch::Dispatch;
use super::gpt::{dispatches, GptBuffers, Shared};
use super::params::FLAGS_INIT;
use super::passes::pollster_free_pop;
use super::readback::read_buffer;
use super::GpuContext;
use crate::error::{Error, Result};
use crate::model::gpt::GptShape;

/// The error the GPU's logits are held to against the CPU's, relative to
/// 1 + the largest |logit| of the row (`core/tests/gpu_gpt_training.rs`
/// measures it; the worst seen on lavapipe is 7e-7 absolute): a draw whose
/// random point falls closer than this allows to the edge of its token's
/// share could pick another token on the CPU (`logit_bound`).
pub const LOGIT_TOLERANCE: f32 = 1e-5;

/// How far (a share of the whole) logits within `LOGIT_TOLERANCE` of
/// another engine's can move the edges of a draw at `temperature`: about
/// 2δ/temperature, δ the row's tolerance.
pub fn logit_bound(logits: &[f32], temperature: f32) -> f64 {
    let largest = logits.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    2.0 * f64::from(LOGIT_TOLERANCE) * (1.0 + f64::from(largest)) / f64::from(temperature)
}

pub struct GpuSampler {
    ctx: Arc<GpuContext>,
    shape: GptShape,
    tokens: wgpu::Buffer,
    g: GptBuffers,
    forward: Vec<Dispatch>,
    /// One position's logits, copied out of `g.logits` for the readback.
    row: wgpu::Buffer,
    // Bound by the forward's kernels; nothing reads them here.
    _params: wgpu::Buffer,
    _unused: [wgpu::Buffer; 5],
}

impl GpuSampler {
    /// The forward of `shape` with these parameters on the GPU of `ctx`;
    /// refused by name where the GPU engine cannot run the shape
    /// (`gpt::unsupported_shape`).
    pub fn new(ctx: Arc<GpuContext>, shape: GptShape, params: &[f32]) -> Result<GpuSampler> {
        if let Some(why) = super::gpt::unsupported_shape(&shape) {
            return Err(Error::Experiment(format!("the GPU engine cannot run this transformer: {why}")));
        }
        ctx.check()?;
        super::gpt::check_limits(&ctx.device.limits(), &shape, 1)?;
        let device = &ctx.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let init = |label: &str, contents: &[u8]| {
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage })
        };
        let params_buffer = init("sampling params", bytemuck::cast_slice(params));
        let flags = || init("sampling flags", bytemuck::cast_slice(&FLAGS_INIT));
        let small = |label: &str| init(label, &[0; 16]);
        let tokens = init("sampling tokens", bytemuck::cast_slice(&vec![0.0f32; shape.context]));
        let unused = [small("no grads"), flags(), flags(), small("no stats"), small("no targets")];
        let g = GptBuffers::new(device, &shape, 1, false);
        let shared = Shared {
            params: &params_buffer,
            grads: &unused[0],
            flags: &unused[1],
            recompute_flags: &unused[2],
            stats: &unused[3],
            tokens: &tokens,
            targets: &unused[4],
        };
        let (forward, _) = dispatches(&ctx, &shared, &g, None, &[]);
        let row = init("sampling logits", &vec![0; 4 * shape.vocab_size]);
        if let Some(err) = pollster_free_pop(scope) {
            return Err(err);
        }
        Ok(GpuSampler { ctx, shape, tokens, g, forward, row, _params: params_buffer, _unused: unused })
    }

    /// The logits after `window` (1..=T token ids): those at its last
    /// position.
    pub async fn logits(&mut self, window: &[u32]) -> Result<Vec<f32>> {
        let (t_max, v) = (self.shape.context, self.shape.vocab_size);
        if window.is_empty() || window.len() > t_max || window.iter().any(|&id| id as usize >= v) {
            return Err(Error::Experiment(format!(
                "a sampling window is 1 to {t_max} token ids below {v}, got {} ids",
                window.len()
            )));
        }
        let mut ids = vec![0.0f32; t_max];
        for (slot, &id) in ids.iter_mut().zip(window) {
            *slot = id as f32;
        }
        self.ctx.check()?;
        self.ctx.queue.write_buffer(&self.tokens, 0, bytemuck::cast_slice(&ids));
        let device = &self.ctx.device;
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("sampling") });
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("forward"), timestamp_writes: None });
            for d in &self.forward {
                pass.set_pipeline(self.ctx.pipelines.get(d.kernel));
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
            }
        }
        let last = (window.len() - 1) * v;
        encoder.copy_buffer_to_buffer(&self.g.logits, 4 * last as u64, &self.row, 0, 4 * v as u64);
        self.ctx.queue.submit([encoder.finish()]);
        let bytes = read_buffer(&self.ctx, &self.row).await?;
        Ok(bytemuck::cast_slice::<u8, f32>(&bytes).to_vec())
    }
}
