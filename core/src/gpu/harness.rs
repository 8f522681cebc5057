//! Runs one kernel on given data: the seam that twin tests and benchmarks
//! call (as wgpu's `execute_gpu_inner`). Arguments are bound in order to
//! bindings 0, 1, 2, … of group 0.

use wgpu::util::DeviceExt;

use super::{read_buffer, GpuContext, Kernel};
use crate::error::{Error, Result};

pub enum Arg<'a> {
    /// A read_write storage buffer with initial contents; read back.
    Out(&'a [u8]),
    /// A read-only storage buffer.
    In(&'a [u8]),
    /// A uniform buffer (the kernel's `Params`).
    Uniform(&'a [u8]),
}

/// Dispatches `kernel` once over `workgroups` and returns the contents of
/// every `Out` argument after it ran, in order.
pub async fn run_kernel(
    ctx: &GpuContext,
    kernel: Kernel,
    args: &[Arg<'_>],
    workgroups: [u32; 3],
) -> Result<Vec<Vec<u8>>> {
    let device = &ctx.device;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let buffers: Vec<wgpu::Buffer> = args
        .iter()
        .enumerate()
        .map(|(i, arg)| {
            let (contents, usage) = match arg {
                Arg::Out(d) => (*d, wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC),
                Arg::In(d) => (*d, wgpu::BufferUsages::STORAGE),
                Arg::Uniform(d) => (*d, wgpu::BufferUsages::UNIFORM),
            };
            // Zero-sized bindings are invalid: pad empty inputs to 4 bytes.
            let padded;
            let contents = if contents.is_empty() {
                padded = [0u8; 16];
                &padded[..]
            } else {
                contents
            };
            device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(&format!("{} binding {i}", kernel.name())),
                contents,
                usage,
            })
        })
        .collect();
    let pipeline = ctx.pipelines.get(kernel);
    let entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
        .collect();
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(kernel.name()),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &entries,
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(kernel.name()) });
    {
        let mut pass = encoder
            .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(kernel.name()), timestamp_writes: None });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(workgroups[0], workgroups[1], workgroups[2]);
    }
    ctx.queue.submit([encoder.finish()]);
    if let Some(err) = scope.pop().await {
        return Err(Error::Gpu(format!("{}: {err}", kernel.name())));
    }
    let mut outputs = Vec::new();
    for (arg, buffer) in args.iter().zip(&buffers) {
        if let Arg::Out(d) = arg {
            let mut bytes = read_buffer(ctx, buffer).await?;
            bytes.truncate(d.len());
            outputs.push(bytes);
        }
    }
    Ok(outputs)
}

pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

pub fn to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}

pub fn to_u32(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).collect()
}
