//! Reading the GPU engine's state and statistics back: the run for a
//! checkpoint, the tensors for the page's views, per-layer statistics.

use super::engine::GpuEngine;
use super::params::TENSOR_STATS_STRIDE;
use super::read_buffer;
use crate::engine::TrainState;
use crate::error::{Error, Result};
use crate::optim::OptimizerState;
use crate::stats::{from_gpu, TensorStats};

impl GpuEngine {
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
