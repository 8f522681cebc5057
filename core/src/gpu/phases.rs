//! Step-by-phase mode on the GPU: each phase of a step is its own submit,
//! recorded from the same dispatch lists as a full step, and the tensors
//! it produced are read back for the page's summaries.

use super::dispatch::Dispatch;
use super::engine::{GpuEngine, GpuPartial};
use super::params::FLAGS_INIT;
use super::passes::{non_finite, record_pass, PassKind};
use super::read_buffer;
use crate::engine::phases::{summarise, PhaseReport, PhaseTensors, StepPhase};
use crate::engine::{PhaseTimes, StepMetrics, Timing};
use crate::error::{Error, Result};
use crate::optim::{learning_rate, StepScalars};

impl GpuEngine {
    /// Whether a step is part-way through (step-by-phase mode).
    pub fn mid_step(&self) -> bool {
        self.partial.is_some()
    }

    /// The phase `step_phase` runs next.
    pub fn next_phase(&self) -> StepPhase {
        self.partial.as_ref().map_or(StepPhase::Forward { micro: 0 }, |p| p.next)
    }

    /// Runs one phase of the current step on the GPU, reads back what it
    /// produced and summarises it per layer. On a NaN/Inf the step is
    /// abandoned (as in `submit`) and the error names layer and phase.
    pub async fn step_phase(&mut self) -> Result<PhaseReport> {
        if self.has_in_flight() {
            return Err(Error::Gpu("collect the steps in flight before stepping by phase".into()));
        }
        self.ctx.check()?;
        let e = self.experiment.clone();
        let (batch, k) = (e.batch_size, e.grad_accumulation);
        let mut partial = match self.partial.take() {
            Some(p) => p,
            None => {
                // A new step: its rows, scalars and flags, as `submit` writes them.
                let lr = learning_rate(&e.schedule, e.optimizer.lr(), self.step);
                let rows: Vec<u32> = (0..k * batch).map(|_| self.batcher.next_row() as u32).collect();
                let queue = &self.ctx.queue;
                queue.write_buffer(&self.buffers.rows, 0, bytemuck::cast_slice(&rows));
                let scalars = [StepScalars::new(&e.optimizer, lr, self.step + 1)];
                queue.write_buffer(&self.buffers.scalars, 0, bytemuck::cast_slice(&scalars));
                queue.write_buffer(&self.buffers.flags, 0, bytemuck::cast_slice(&FLAGS_INIT));
                GpuPartial { next: StepPhase::Forward { micro: 0 }, lr, loss_so_far: 0.0 }
            }
        };
        let phase = partial.next;
        let mut encoder =
            self.ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("one phase") });
        let mut groups: Vec<(PassKind, Vec<&Dispatch>)> = Vec::new();
        match phase {
            StepPhase::Forward { micro } => {
                if micro == 0 {
                    encoder.clear_buffer(&self.buffers.stats, 0, None);
                    if self.zero_grad {
                        encoder.clear_buffer(&self.buffers.grads, 0, None);
                    }
                }
                groups.push((PassKind::Data, self.plan.data.iter().collect()));
                groups.push((PassKind::Forward, self.plan.forward.iter().collect()));
            }
            StepPhase::Backward { micro } => {
                let mut backward: Vec<&Dispatch> = self.plan.backward.iter().collect();
                if micro + 1 == k {
                    backward.extend(self.plan.regularize.iter());
                }
                groups.push((PassKind::Backward, backward));
            }
            StepPhase::Optimizer => groups.push((PassKind::Optimizer, self.plan.optimizer.iter().collect())),
        }
        let mut passes = Vec::new();
        for (kind, dispatches) in groups {
            record_pass(&mut encoder, &self.ctx, None, &mut passes, 0, kind, &dispatches);
        }
        self.ctx.queue.submit([encoder.finish()]);

        let floats = |bytes: Vec<u8>, n: usize| bytemuck::cast_slice::<u8, f32>(&bytes)[..n].to_vec();
        let flags = read_buffer(&self.ctx, &self.buffers.flags).await?;
        let code = bytemuck::cast_slice::<u8, u32>(&flags)[0];
        if code != FLAGS_INIT[0] {
            let first_step = self.step;
            if phase == StepPhase::Optimizer {
                self.step += 1;
            }
            self.sync_submitted_step();
            return Err(non_finite(code, &self.layout, first_step));
        }
        let stats = floats(read_buffer(&self.ctx, &self.buffers.stats).await?, 4);
        let p = self.layout.parameter_count;
        let step = self.step;
        let mut loss = None;
        let mut metrics = None;
        let layers = match phase {
            StepPhase::Forward { .. } => {
                // With activation checkpointing z is not kept per layer:
                // the report shows the outputs a only, as the CPU's does.
                let keeps_z = !self.buffers.checkpointing;
                let mut z = Vec::new();
                let mut a = Vec::new();
                for (l, shape) in self.layout.layers.iter().enumerate() {
                    if keeps_z {
                        z.push(floats(read_buffer(&self.ctx, &self.buffers.z[l]).await?, batch * shape.units));
                    }
                    a.push(floats(read_buffer(&self.ctx, &self.buffers.a[l]).await?, batch * shape.units));
                }
                loss = Some(stats[0] - partial.loss_so_far);
                partial.loss_so_far = stats[0];
                let z = keeps_z.then_some(z.as_slice());
                summarise(&self.layout, &PhaseTensors::Forward { z, a: &a })
            }
            StepPhase::Backward { .. } => {
                let grads = floats(read_buffer(&self.ctx, &self.buffers.grads).await?, p);
                summarise(&self.layout, &PhaseTensors::Backward { grads: &grads })
            }
            StepPhase::Optimizer => {
                let params = floats(read_buffer(&self.ctx, &self.buffers.params).await?, p);
                let updates = floats(read_buffer(&self.ctx, &self.buffers.updates).await?, p);
                let mut moments = Vec::new();
                let names = match &e.optimizer {
                    o if o.state_copies() == 2 => vec!["exp_avg", "exp_avg_sq"],
                    o if o.state_copies() == 1 => vec!["momentum_buffer"],
                    _ => vec![],
                };
                for name in names {
                    let buffer = match name {
                        "exp_avg" => &self.buffers.exp_avg,
                        "exp_avg_sq" => &self.buffers.exp_avg_sq,
                        _ => &self.buffers.momentum_buffer,
                    };
                    moments.push((name, floats(read_buffer(&self.ctx, buffer).await?, p)));
                }
                let moments = moments.iter().map(|(n, m)| (*n, m.as_slice())).collect();
                metrics = Some(StepMetrics {
                    step,
                    loss: stats[0] / k as f32,
                    grad_norm: stats[1],
                    z_loss: None,
                    lr: partial.lr,
                    clipped: stats[2] > 0.5,
                    phases: PhaseTimes::default(),
                    timing: Timing::GpuCoarse,
                    gpu_ms: None,
                    ranks: Vec::new(),
                });
                self.step += 1;
                self.sync_submitted_step();
                summarise(&self.layout, &PhaseTensors::Optimizer { params: &params, updates: &updates, moments })
            }
        };
        self.ctx.check()?;
        if phase != StepPhase::Optimizer {
            partial.next = phase.next(k);
            self.partial = Some(partial);
        }
        Ok(PhaseReport { phase, step, micro_batches: k, loss, metrics, layers, part: None })
    }

    /// Runs the remaining phases of a step begun phase by phase, if any.
    pub async fn finish_step(&mut self) -> Result<Option<StepMetrics>> {
        while self.mid_step() {
            let report = self.step_phase().await?;
            if report.metrics.is_some() {
                return Ok(report.metrics);
            }
        }
        Ok(None)
    }
}
