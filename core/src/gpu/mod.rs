//! The GPU engine: WGSL kernels (`shaders/`, one per file, named as their
//! CPU twins) run through wgpu: WebGPU in the browser, Vulkan/Metal/DX12
//! natively.
//!
//! Set up once per (model, batch size): buffers, pipelines and bind groups.
//! A training step is one submit (or K steps per submit); only small
//! statistics are read back, asynchronously.

mod activation_checkpointing;
mod buffers;
mod calibrate;
pub mod choose;
mod collect;
mod context;
pub mod conv;
mod cost;
mod dispatch;
mod engine;
mod fused;
pub mod gpt;
mod gpt_attention;
mod gpt_buffers;
mod gpt_sample;
pub mod harness;
mod kernels;
pub mod launch;
pub mod matmul;
pub mod params;
mod passes;
mod phases;
mod plan;
pub mod probe;
mod profile;
mod readback;
mod readout;
mod retune;
pub mod timing;

pub use buffers::MAX_STEPS_PER_SUBMIT;
pub use calibrate::Calibration;
pub use cost::SubmitCost;
pub use engine::GpuEngine;
pub use fused::{
    caps_loop_iterations, fused_unsupported, loop_iterations_per_step, max_fused_steps, FusedLayer, FusedParams,
    FusedRun, FusedWidth, MAX_FUSED_LAYERS,
};
pub use gpt_sample::{logit_bound, GpuSampler, LOGIT_TOLERANCE};
pub use passes::{GpuPass, PassKind, StepPass, MAX_KEPT_PASSES};
pub use readout::PendingState;

pub use context::GpuContext;
pub use kernels::Kernel;
pub use readback::read_buffer;

/// Why the GPU engine cannot train `e`, in words that finish "… trains on
/// the CPU engine: ", or None: a transformer its kernels do not cover
/// yet (`gpt::unsupported`), or augmented images (the GPU engine gathers
/// its rows on the device from the data it was given, unchanged).
pub fn unsupported(e: &crate::Experiment) -> Option<String> {
    if let Some(why) = gpt::unsupported(e) {
        return Some(format!("this transformer trains on the CPU engine: {why}"));
    }
    e.data.active_augment().map(|a| {
        format!(
            "augmented images ({}) train on the CPU engine: the GPU engine gathers its rows on the device, unchanged",
            a.describe()
        )
    })
}
