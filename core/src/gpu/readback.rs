//! Asynchronous readback: copy into a MAP_READ buffer, `map_async`, await.
//! The future resolves when the map callback fires; natively something
//! must drive the device (`GpuContext::poll` or `wait_idle`), on the web
//! the browser does.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::error::{Error, Result};

type Slot = Arc<Mutex<(Option<std::result::Result<(), wgpu::BufferAsyncError>>, Option<Waker>)>>;

/// Resolves when `buffer` (MAP_READ) is mapped.
pub struct MapFuture {
    slot: Slot,
}

impl Future for MapFuture {
    type Output = std::result::Result<(), wgpu::BufferAsyncError>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match slot.0.take() {
            Some(result) => Poll::Ready(result),
            None => {
                slot.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Starts mapping `buffer` for reading.
pub fn map_read(buffer: &wgpu::Buffer) -> MapFuture {
    let slot: Slot = Arc::new(Mutex::new((None, None)));
    let callback_slot = slot.clone();
    buffer.map_async(wgpu::MapMode::Read, .., move |result| {
        let mut s = callback_slot.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = Some(result);
        if let Some(waker) = s.1.take() {
            waker.wake();
        }
    });
    MapFuture { slot }
}

/// Copies a mapped buffer's bytes out and unmaps it.
pub fn take_mapped(buffer: &wgpu::Buffer) -> Result<Vec<u8>> {
    let bytes = {
        let view = buffer.get_mapped_range(..).map_err(|e| Error::Gpu(format!("reading back {:?}: {e}", buffer)))?;
        view.to_vec()
    };
    buffer.unmap();
    Ok(bytes)
}

/// Reads a whole STORAGE|COPY_SRC buffer back (test and one-off use; the
/// training loop uses the staging ring instead).
pub async fn read_buffer(ctx: &super::GpuContext, source: &wgpu::Buffer) -> Result<Vec<u8>> {
    let staging = ctx.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback staging"),
        size: source.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut encoder = ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("readback") });
    encoder.copy_buffer_to_buffer(source, 0, &staging, 0, source.size());
    ctx.queue.submit([encoder.finish()]);
    let mapped = map_read(&staging);
    ctx.wait_idle()?;
    mapped.await.map_err(|e| Error::Gpu(format!("mapping a readback buffer: {e}")))?;
    take_mapped(&staging)
}
