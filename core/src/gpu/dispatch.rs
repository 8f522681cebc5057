//! A kernel bound to its buffers, ready to record: what the training plan,
//! the transformer's plan, the sampler and the probes hold. The bottom of
//! the GPU engine's import graph (`gpu::launch` builds these; `gpu::plan`
//! lists them).

use wgpu::util::DeviceExt;

use super::{GpuContext, Kernel};

pub struct Dispatch {
    pub kernel: Kernel,
    pub bind_group: wgpu::BindGroup,
    pub grid: [u32; 3],
}

fn uniform<T: bytemuck::Pod>(device: &wgpu::Device, label: &str, value: &T) -> wgpu::Buffer {
    device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
        label: Some(label),
        contents: bytemuck::bytes_of(value),
        usage: wgpu::BufferUsages::UNIFORM,
    })
}

/// Binds `buffers` to bindings 0, 1, 2, … of `kernel`'s group 0, then its
/// `Params` uniform last.
pub(super) fn dispatch<T: bytemuck::Pod>(
    ctx: &GpuContext,
    kernel: Kernel,
    label: &str,
    buffers: &[&wgpu::Buffer],
    params: &T,
    grid: [u32; 3],
) -> Dispatch {
    let device = &ctx.device;
    let uniform = uniform(device, label, params);
    let mut entries: Vec<wgpu::BindGroupEntry> = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
        .collect();
    entries.push(wgpu::BindGroupEntry { binding: buffers.len() as u32, resource: uniform.as_entire_binding() });
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(label),
        layout: &ctx.pipelines.get(kernel).get_bind_group_layout(0),
        entries: &entries,
    });
    Dispatch { kernel, bind_group, grid }
}
