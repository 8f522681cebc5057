//! Reading the GPU engine's state and statistics back: the run for a
//! checkpoint, the tensors for the page's views, per-layer statistics.

use super::engine::GpuEngine;
use super::params::TENSOR_STATS_STRIDE;
use super::read_buffer;
use super::readback::{map_read, take_mapped, MapFuture};
use crate::data::DataPosition;
use crate::engine::TrainState;
use crate::error::{Error, Result};
use crate::experiment::Experiment;
use crate::optim::OptimizerState;
use crate::stats::{from_gpu, TensorStats};

impl GpuEngine {
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

    /// The parameters (P) alone, read back (evaluations).
    pub async fn read_params(&self) -> Result<Vec<f32>> {
        let bytes = read_buffer(&self.ctx, &self.buffers.params).await?;
        self.ctx.check()?;
        Ok(bytemuck::cast_slice::<u8, f32>(&bytes)[..self.layout.parameter_count].to_vec())
    }

    /// A snapshot of the run read back from the GPU, for checkpoints.
    /// Waits for submits in flight first.
    pub async fn read_state(&mut self) -> Result<TrainState> {
        if self.has_in_flight() {
            return Err(Error::Gpu("collect the steps in flight before reading the state".into()));
        }
        let read = |b: &wgpu::Buffer, n: usize| {
            let ctx = self.ctx.clone();
            let b = b.clone();
            async move {
                let bytes = read_buffer(&ctx, &b).await?;
                Ok::<Vec<f32>, Error>(bytemuck::cast_slice::<u8, f32>(&bytes)[..n].to_vec())
            }
        };
        let p = self.layout.parameter_count;
        let mut optimizer = OptimizerState::new(&self.experiment.optimizer, p);
        optimizer.step = self.step;
        let params = read(&self.buffers.params, p).await?;
        if !optimizer.exp_avg.is_empty() {
            optimizer.exp_avg = read(&self.buffers.exp_avg, p).await?;
            optimizer.exp_avg_sq = read(&self.buffers.exp_avg_sq, p).await?;
        }
        if !optimizer.momentum_buffer.is_empty() {
            optimizer.momentum_buffer = read(&self.buffers.momentum_buffer, p).await?;
        }
        self.ctx.check()?;
        Ok(TrainState {
            experiment: self.experiment.clone(),
            params,
            optimizer,
            data_position: self.batcher.position().clone(),
            vocabulary: self.data().vocabulary.clone(),
        })
    }

    /// Starts reading the run back without waiting: the copies are queued
    /// now (after every step submitted so far), and `PendingState::finish`
    /// awaits them later while training goes on. Background checkpoints
    /// use this; the copies cost the GPU a few memcpys, the training loop
    /// nothing.
    pub fn begin_read_state(&mut self) -> Result<PendingState> {
        if self.has_in_flight() || self.mid_step() {
            return Err(Error::Gpu("collect the steps in flight before reading the state".into()));
        }
        self.ctx.check()?;
        let p = self.layout.parameter_count;
        let mut optimizer = OptimizerState::new(&self.experiment.optimizer, p);
        optimizer.step = self.step;
        let mut sources: Vec<(&'static str, &wgpu::Buffer)> = vec![("params", &self.buffers.params)];
        if !optimizer.exp_avg.is_empty() {
            sources.push(("exp_avg", &self.buffers.exp_avg));
            sources.push(("exp_avg_sq", &self.buffers.exp_avg_sq));
        }
        if !optimizer.momentum_buffer.is_empty() {
            sources.push(("momentum_buffer", &self.buffers.momentum_buffer));
        }
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("state copy") });
        let staging: Vec<(&'static str, wgpu::Buffer)> = sources
            .iter()
            .map(|(name, source)| {
                let staging = self.ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("state readback"),
                    size: source.size(),
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                encoder.copy_buffer_to_buffer(source, 0, &staging, 0, source.size());
                (*name, staging)
            })
            .collect();
        self.ctx.queue.submit([encoder.finish()]);
        let maps = staging.into_iter().map(|(name, buffer)| (name, map_read(&buffer), buffer)).collect();
        Ok(PendingState {
            ctx: self.ctx.clone(),
            experiment: self.experiment.clone(),
            optimizer,
            data_position: self.batcher.position().clone(),
            vocabulary: self.data().vocabulary.clone(),
            maps,
            parameter_count: p,
        })
    }

    /// Blocking `read_state` (native).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn state(&mut self) -> Result<TrainState> {
        pollster::block_on(self.read_state())
    }

    /// Per layer: statistics of [activations, gradients, weights, updates]
    /// of the last step, computed on the GPU.
    pub async fn read_layer_stats(&mut self) -> Result<Vec<[TensorStats; 4]>> {
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("layer stats") });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("layer stats"),
                timestamp_writes: None,
            });
            for d in &self.plan.layer_stats {
                pass.set_pipeline(self.ctx.pipelines.get(d.kernel));
                pass.set_bind_group(0, &d.bind_group, &[]);
                pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
            }
        }
        self.ctx.queue.submit([encoder.finish()]);
        let bytes = read_buffer(&self.ctx, &self.buffers.layer_stats).await?;
        let floats: &[f32] = bytemuck::cast_slice(&bytes);
        Ok((0..self.layout.layers.len())
            .map(|l| {
                std::array::from_fn(|kind| {
                    let at = (4 * l + kind) * TENSOR_STATS_STRIDE;
                    from_gpu(&floats[at..at + TENSOR_STATS_STRIDE])
                })
            })
            .collect())
    }
}

/// A state read begun by `GpuEngine::begin_read_state`.
pub struct PendingState {
    ctx: std::sync::Arc<super::GpuContext>,
    experiment: Experiment,
    optimizer: OptimizerState,
    data_position: DataPosition,
    /// A text run's vocabulary (the checkpoint carries it).
    vocabulary: Option<crate::data::Vocabulary>,
    maps: Vec<(&'static str, MapFuture, wgpu::Buffer)>,
    parameter_count: usize,
}

impl PendingState {
    /// The optimizer step the state is at.
    pub fn step(&self) -> u64 {
        self.optimizer.step
    }

    /// Awaits the copies and assembles the state (natively this drives
    /// the device until they are done).
    pub async fn finish(self) -> Result<TrainState> {
        let PendingState { ctx, experiment, mut optimizer, data_position, vocabulary, maps, parameter_count: p } = self;
        ctx.wait_idle()?;
        let mut params = Vec::new();
        for (name, map, buffer) in maps {
            map.await.map_err(|e| Error::Gpu(format!("reading the state back: {e}")))?;
            let bytes = take_mapped(&buffer)?;
            let values = bytemuck::cast_slice::<u8, f32>(&bytes)[..p].to_vec();
            match name {
                "params" => params = values,
                other => {
                    if let Some(slot) = optimizer.buffer_mut(other) {
                        *slot = values;
                    }
                }
            }
        }
        ctx.check()?;
        Ok(TrainState { experiment, params, optimizer, data_position, vocabulary })
    }
}
