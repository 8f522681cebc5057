//! Recording a training step's compute passes, and decoding what the
//! GPU reports back about them (timestamps, non-finite codes).

use std::future::Future;

use super::dispatch::Dispatch;
use super::params::{PHASE_BACKWARD, PHASE_FORWARD, PHASE_LOSS, PHASE_OPTIMIZER};
use super::GpuContext;
use crate::error::Error;

/// The phases a timestamp pair can cover.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PassKind {
    Data,
    Forward,
    Backward,
    Optimizer,
    /// A whole step in one pass (phase timing off).
    Step,
    /// Every step of a submit in one dispatch (the fused step).
    Fused,
}

impl PassKind {
    /// The phase's name, as traces and the anatomy name it.
    pub fn name(self) -> &'static str {
        match self {
            PassKind::Data => "data",
            PassKind::Forward => "forward",
            PassKind::Backward => "backward",
            PassKind::Optimizer => "optimizer",
            PassKind::Step => "step",
            PassKind::Fused => "fused steps",
        }
    }
}

/// A timed pass of a collected step, kept for a trace drawn later (the
/// page's `download-trace`): the step's number, and the pass in
/// milliseconds from its submit's first pass on the GPU's clock.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StepPass {
    pub step: u64,
    pub kind: PassKind,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// Step passes kept until taken (`GpuEngine::take_passes`); older ones go.
pub const MAX_KEPT_PASSES: usize = 4096;

/// One timed pass of the last submit collected, in milliseconds from the
/// submit's first pass on the GPU's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuPass {
    /// The step within the submit (every step, for a fused pass).
    pub step: usize,
    pub kind: PassKind,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// Records one compute pass of `dispatches`, with a timestamp pair when
/// timestamps are on.
pub fn record_pass(
    encoder: &mut wgpu::CommandEncoder,
    ctx: &GpuContext,
    timestamps: Option<&(wgpu::QuerySet, wgpu::Buffer)>,
    passes: &mut Vec<(usize, PassKind)>,
    step: usize,
    kind: PassKind,
    dispatches: &[&Dispatch],
) {
    let timestamp_writes = timestamps.map(|(query_set, _)| {
        let i = 2 * passes.len() as u32;
        wgpu::ComputePassTimestampWrites {
            query_set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        }
    });
    if timestamps.is_some() {
        passes.push((step, kind));
    }
    let mut pass =
        encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(kind.name()), timestamp_writes });
    for d in dispatches {
        pass.set_pipeline(ctx.pipelines.get(d.kernel));
        pass.set_bind_group(0, &d.bind_group, &[]);
        pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
    }
}

/// Pops a validation scope without an executor: natively the result is
/// ready at once; on the web the error (if any) also reaches the
/// uncaptured-error handler, which `check` reports.
pub fn pollster_free_pop(scope: wgpu::ErrorScopeGuard) -> Option<Error> {
    let future = scope.pop();
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(Some(err)) => Some(Error::Gpu(format!("setting up the GPU engine: {err}"))),
        _ => None,
    }
}

/// Decodes a non-finite code `(step << 16) | (phase << 8) | order`; the
/// code's step counts from `first_step`, the engine's step count when the
/// submit began. The message numbers steps as the page does (the first is 1).
pub fn non_finite(code: u32, layout: &crate::model::Layout, first_step: u64) -> Error {
    let step = first_step + u64::from(code >> 16) + 1;
    let phase = (code >> 8) & 0xff;
    let order = (code & 0xff) as usize;
    let layers = layout.layers.len();
    let (phase_name, layer) = match phase {
        PHASE_FORWARD => ("forward", order),
        PHASE_LOSS => ("loss", layers.max(1) - 1),
        PHASE_BACKWARD => ("backward", 255 - order),
        _ => ("optimizer", order),
    };
    let kept = if phase == PHASE_OPTIMIZER {
        "the update already applied: restore the last good checkpoint"
    } else {
        "parameters and optimizer state kept from before this step"
    };
    // A transformer's places are its linear layers and its loss
    // (`gpt::op_name`); the optimizer's code names no tensor.
    let place = match (&layout.gpt, phase) {
        (Some(_), PHASE_OPTIMIZER) => "the parameters".to_string(),
        (Some(shape), PHASE_LOSS) => super::gpt::op_name(shape, 4 * shape.blocks + 1),
        (Some(shape), _) => super::gpt::op_name(shape, layer),
        (None, _) => format!("layer {layer}"),
    };
    Error::NonFinite(format!("first NaN/Inf at step {step}, in {place} during {phase_name}; {kept}"))
}
