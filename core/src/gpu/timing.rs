//! Timing one kernel: seeded data of the right sizes, and seconds per
//! dispatch of a kernel repeated in one pass until a measurement lasts long
//! enough. The probes (`gpu::probe`), the matmul and attention variants'
//! calibration (`gpu::matmul`, `gpu::gpt_attention`) all time this way.
//!
//! Time comes from timestamp queries where the adapter has them, else from
//! the wall clock around the submit and a readback that waits for it (so
//! it includes one submit's overhead, shared by all the repeats).

use web_time::Instant;
use wgpu::util::DeviceExt;

use super::{read_buffer, GpuContext, Kernel};
use crate::error::Result;

/// Most repeats of one dispatch in a measurement.
const MAX_REPEAT: u32 = 1 << 14;

/// Storage buffers of seeded values in [−1, 1): data of the right sizes
/// for timing a kernel (`time_full`, `time_attention`), the same values for
/// the same seed.
pub struct Seeded<'a> {
    device: &'a wgpu::Device,
    rng: crate::rng::Rng,
}

impl<'a> Seeded<'a> {
    pub fn new(device: &'a wgpu::Device, seed: u64, stream: u64) -> Seeded<'a> {
        Seeded { device, rng: crate::rng::Rng::new(seed, stream) }
    }

    /// The next `floats` values, in a storage buffer.
    pub fn buffer(&mut self, label: &str, floats: usize) -> wgpu::Buffer {
        let values: Vec<f32> = (0..floats).map(|_| self.rng.uniform(-1.0, 1.0) as f32).collect();
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(&values),
            usage: wgpu::BufferUsages::STORAGE,
        })
    }
}

/// Doubles the repetitions until a measurement takes `target_s`; returns
/// seconds per dispatch.
pub(super) async fn seconds_per_dispatch(
    ctx: &GpuContext,
    kernel: Kernel,
    group: &wgpu::BindGroup,
    grid: [u32; 3],
    target_s: f64,
) -> Result<f64> {
    // The first dispatch of a pipeline may include its compilation (lavapipe
    // compiles on first use): not a measurement.
    time_dispatches(ctx, kernel, group, grid, 1).await?;
    let mut repeat = 1;
    loop {
        let t = time_dispatches(ctx, kernel, group, grid, repeat).await?;
        if t >= target_s || repeat >= MAX_REPEAT {
            return Ok(t / repeat as f64);
        }
        repeat *= 2;
    }
}

/// Seconds of `repeat` dispatches of one kernel in one pass.
async fn time_dispatches(
    ctx: &GpuContext,
    kernel: Kernel,
    group: &wgpu::BindGroup,
    grid: [u32; 3],
    repeat: u32,
) -> Result<f64> {
    let device = &ctx.device;
    let query = ctx.timestamps.then(|| {
        device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("probe"),
            ty: wgpu::QueryType::Timestamp,
            count: 2,
        })
    });
    // The timestamps resolve here; without them it is only read back, to
    // wait for the dispatches.
    let done = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("probe done"),
        size: 16,
        usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("probe") });
    {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("probe"),
            timestamp_writes: query.as_ref().map(|set| wgpu::ComputePassTimestampWrites {
                query_set: set,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            }),
        });
        pass.set_pipeline(ctx.pipelines.get(kernel));
        pass.set_bind_group(0, group, &[]);
        for _ in 0..repeat {
            pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        }
    }
    if let Some(set) = &query {
        encoder.resolve_query_set(set, 0..2, &done, 0);
    }
    let start = Instant::now();
    ctx.queue.submit([encoder.finish()]);
    let bytes = read_buffer(ctx, &done).await?;
    let wall = start.elapsed().as_secs_f64();
    ctx.check()?;
    Ok(match query {
        Some(_) => {
            let ticks: &[u64] = bytemuck::cast_slice(&bytes);
            ticks[1].saturating_sub(ticks[0]) as f64 * ctx.queue.get_timestamp_period() as f64 * 1e-9
        }
        None => wall,
    })
}

pub(super) fn buffer(ctx: &GpuContext, label: &str, contents: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
    ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents, usage })
}
