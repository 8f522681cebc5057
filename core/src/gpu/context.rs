//! The device, its queue and compiled pipelines, created once. GPU errors
//! are made visible: uncaptured validation errors and device loss are
//! recorded and returned as `Error::Gpu` by `check`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::kernels::Pipelines;
use crate::error::{Error, Result};

pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter_info: wgpu::AdapterInfo,
    /// Whether timestamp queries are available for per-phase GPU time.
    pub timestamps: bool,
    pub pipelines: Pipelines,
    first_error: Arc<Mutex<Option<String>>>,
    lost: Arc<AtomicBool>,
}

impl GpuContext {
    /// Picks the default adapter (a high-performance one when there is a
    /// choice), and opens a device with timestamp queries when offered.
    pub async fn new() -> Result<GpuContext> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::Gpu(format!("no GPU adapter: {e}")))?;
        let adapter_info = adapter.get_info();
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let required_features = if timestamps { wgpu::Features::TIMESTAMP_QUERY } else { wgpu::Features::empty() };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("stepscope device"),
                required_features,
                required_limits: adapter.limits(),
                experimental_features: Default::default(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| Error::Gpu(format!("cannot open the GPU device: {e}")))?;
        let first_error = Arc::new(Mutex::new(None));
        let lost = Arc::new(AtomicBool::new(false));
        {
            let first_error = first_error.clone();
            device.on_uncaptured_error(Arc::new(move |err: wgpu::Error| {
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| err.to_string());
            }));
        }
        {
            let (first_error, lost) = (first_error.clone(), lost.clone());
            device.set_device_lost_callback(move |reason, message| {
                lost.store(true, Ordering::SeqCst);
                let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| format!("device lost ({reason:?}): {message}"));
            });
        }
        let pipelines = Pipelines::new(&device).await?;
        Ok(GpuContext { device, queue, adapter_info, timestamps, pipelines, first_error, lost })
    }

    /// Blocks until the context exists (native only).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<GpuContext> {
        pollster::block_on(GpuContext::new())
    }

    /// The adapter in words, e.g. "llvmpipe (LLVM 15.0.6, 256 bits), Vulkan, Cpu".
    pub fn describe(&self) -> String {
        let i = &self.adapter_info;
        format!("{}, {:?}, {:?}", i.name, i.backend, i.device_type)
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// The first uncaptured GPU error or device loss, as an `Error`.
    pub fn check(&self) -> Result<()> {
        let slot = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(message) => Err(Error::Gpu(message.clone())),
            None => Ok(()),
        }
    }

    /// Native: waits for all submitted work. On the web this is a no-op
    /// (the browser drives the queue; readback is `map_async` + await).
    pub fn wait_idle(&self) -> Result<()> {
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        Ok(())
    }

    /// Drives map callbacks without blocking (native); a no-op on the web.
    pub fn poll(&self) {
        #[cfg(not(target_arch = "wasm32"))]
        let _ = self.device.poll(wgpu::PollType::Poll);
    }
}
