//! Every WGSL kernel, by name. The name is the file in `shaders/` and the
//! CPU twin it is tested against.

use std::collections::HashMap;

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    DenseForward,
}

impl Kernel {
    pub const ALL: &'static [Kernel] = &[Kernel::DenseForward];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::DenseForward => "dense_forward",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Kernel::DenseForward => include_str!("../../../shaders/dense_forward.wgsl"),
        }
    }
}

/// Compiled pipelines, built once per device. Layouts come from the
/// shaders' own binding declarations (`layout: None`), so the WGSL file is
/// the single statement of each kernel's signature.
pub struct Pipelines {
    pipelines: HashMap<Kernel, wgpu::ComputePipeline>,
}

impl Pipelines {
    /// Compiles every kernel inside a validation error scope, so a shader
    /// error becomes an `Error::Gpu` naming the kernel instead of a panic.
    pub async fn new(device: &wgpu::Device) -> Result<Pipelines> {
        let mut pipelines = HashMap::new();
        for &kernel in Kernel::ALL {
            let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some(kernel.name()),
                source: wgpu::ShaderSource::Wgsl(kernel.source().into()),
            });
            let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(kernel.name()),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
            if let Some(err) = scope.pop().await {
                return Err(Error::Gpu(format!("kernel {}: {err}", kernel.name())));
            }
            pipelines.insert(kernel, pipeline);
        }
        Ok(Pipelines { pipelines })
    }

    pub fn get(&self, kernel: Kernel) -> &wgpu::ComputePipeline {
        &self.pipelines[&kernel]
    }
}
