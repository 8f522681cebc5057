//! Every WGSL kernel, by name. The name is the file in `shaders/` and the
//! CPU twin it is tested against.

use std::collections::HashMap;

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    DenseForward,
    DenseForwardBlocked,
    LossForwardBackward,
    DenseBackwardInput,
    DenseBackwardInputBlocked,
    DenseBackwardWeight,
    DenseBackwardWeightBlocked,
    BiasBackward,
    GatherRows,
    Advance,
    RegularizationBackward,
    GradNorm,
    ClipGradNorm,
    SgdStep,
    AdamStep,
    LambMoments,
    LambStep,
    TensorStats,
    FmaPeak,
    /// The fused step with 64 invocations in its workgroup.
    TrainStepFused,
    /// The same kernel with 4 (its `WG` override): fewer, longer
    /// invocations, for adapters where a barrier costs more than the
    /// arithmetic it separates (`fused::FusedWidth`).
    TrainStepFusedNarrow,
    /// The transformer's exact GELU and its derivative.
    GeluForward,
    GeluBackward,
    /// The transformer's LayerNorm: forward, ∂L/∂x, and dγ, dβ.
    LayerNormForward,
    LayerNormBackwardInput,
    LayerNormBackwardParams,
    /// The token and position embeddings, and their gradients.
    EncoderForward,
    EncoderBackward,
    /// Causal self-attention, keeping the probabilities; its backward in
    /// two halves, per query row (∂L/∂s, ∂L/∂q) and down the columns
    /// (∂L/∂k, ∂L/∂v).
    AttentionForward,
    AttentionBackwardQuery,
    AttentionBackwardKey,
    /// The same forward and query-row backward with an invocation per
    /// query row and no barrier (`gpu::gpt::AttentionVariant`).
    AttentionForwardRows,
    AttentionBackwardQueryRows,
    /// The cross-entropy over the vocabulary with z-loss, per row with its
    /// gradient, then the means into the step's statistics.
    CrossEntropyForwardBackward,
    CrossEntropyLoss,
    /// y += x: the residual adds.
    ResidualForward,
    /// The q/k LayerNorm over each head's q and k: forward, ∂L/∂x, dγ and dβ.
    QkLayerNormForward,
    QkLayerNormBackwardInput,
    QkLayerNormBackwardParams,
    /// Convolution: forward (with its activation), ∂L/∂x (with the layer
    /// below's activation backward) and ∂W with ∂b in two passes (partial
    /// sums over segments of the terms, then their sum; `gpu::conv`).
    Conv2dForward,
    Conv2dBackwardInput,
    Conv2dBackwardWeight,
    Conv2dBackwardWeightSum,
    /// Their implicit-GEMM variants, tiled in workgroup memory (the same
    /// bindings and bits; `gpu::conv`, picked per layer by the calibration).
    Conv2dForwardTiled,
    Conv2dBackwardInputTiled,
    Conv2dBackwardWeightTiled,
    /// Max and average pooling, forward and backward.
    MaxPool2dForward,
    MaxPool2dBackward,
    AvgPool2dForward,
    AvgPool2dBackward,
}

/// A kernel's WGSL as the engine embeds it: `shaders/<name>.wgsl` without
/// its comments (core/build.rs).
macro_rules! shader {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".wgsl"))
    };
}

impl Kernel {
    pub const ALL: &'static [Kernel] = &[
        Kernel::DenseForward,
        Kernel::DenseForwardBlocked,
        Kernel::LossForwardBackward,
        Kernel::DenseBackwardInput,
        Kernel::DenseBackwardInputBlocked,
        Kernel::DenseBackwardWeight,
        Kernel::DenseBackwardWeightBlocked,
        Kernel::BiasBackward,
        Kernel::GatherRows,
        Kernel::Advance,
        Kernel::RegularizationBackward,
        Kernel::GradNorm,
        Kernel::ClipGradNorm,
        Kernel::SgdStep,
        Kernel::AdamStep,
        Kernel::LambMoments,
        Kernel::LambStep,
        Kernel::TensorStats,
        Kernel::FmaPeak,
        Kernel::TrainStepFused,
        Kernel::TrainStepFusedNarrow,
        Kernel::GeluForward,
        Kernel::GeluBackward,
        Kernel::LayerNormForward,
        Kernel::LayerNormBackwardInput,
        Kernel::LayerNormBackwardParams,
        Kernel::EncoderForward,
        Kernel::EncoderBackward,
        Kernel::AttentionForward,
        Kernel::AttentionBackwardQuery,
        Kernel::AttentionBackwardKey,
        Kernel::AttentionForwardRows,
        Kernel::AttentionBackwardQueryRows,
        Kernel::CrossEntropyForwardBackward,
        Kernel::CrossEntropyLoss,
        Kernel::ResidualForward,
        Kernel::QkLayerNormForward,
        Kernel::QkLayerNormBackwardInput,
        Kernel::QkLayerNormBackwardParams,
        Kernel::Conv2dForward,
        Kernel::Conv2dBackwardInput,
        Kernel::Conv2dBackwardWeight,
        Kernel::Conv2dBackwardWeightSum,
        Kernel::Conv2dForwardTiled,
        Kernel::Conv2dBackwardInputTiled,
        Kernel::Conv2dBackwardWeightTiled,
        Kernel::MaxPool2dForward,
        Kernel::MaxPool2dBackward,
        Kernel::AvgPool2dForward,
        Kernel::AvgPool2dBackward,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::DenseForward => "dense_forward",
            Kernel::DenseForwardBlocked => "dense_forward_blocked",
            Kernel::LossForwardBackward => "loss_forward_backward",
            Kernel::DenseBackwardInput => "dense_backward_input",
            Kernel::DenseBackwardWeight => "dense_backward_weight",
            Kernel::DenseBackwardWeightBlocked => "dense_backward_weight_blocked",
            Kernel::DenseBackwardInputBlocked => "dense_backward_input_blocked",
            Kernel::BiasBackward => "bias_backward",
            Kernel::GatherRows => "gather_rows",
            Kernel::Advance => "advance",
            Kernel::RegularizationBackward => "regularization_backward",
            Kernel::GradNorm => "grad_norm",
            Kernel::ClipGradNorm => "clip_grad_norm",
            Kernel::SgdStep => "sgd_step",
            Kernel::AdamStep => "adam_step",
            Kernel::LambMoments => "lamb_moments",
            Kernel::LambStep => "lamb_step",
            Kernel::TensorStats => "tensor_stats",
            Kernel::FmaPeak => "fma_peak",
            Kernel::TrainStepFused | Kernel::TrainStepFusedNarrow => "train_step_fused",
            Kernel::GeluForward => "gelu_forward",
            Kernel::GeluBackward => "gelu_backward",
            Kernel::LayerNormForward => "layernorm_forward",
            Kernel::LayerNormBackwardInput => "layernorm_backward_input",
            Kernel::LayerNormBackwardParams => "layernorm_backward_params",
            Kernel::EncoderForward => "encoder_forward",
            Kernel::EncoderBackward => "encoder_backward",
            Kernel::AttentionForward => "attention_forward",
            Kernel::AttentionBackwardQuery => "attention_backward_query",
            Kernel::AttentionBackwardKey => "attention_backward_key",
            Kernel::AttentionForwardRows => "attention_forward_rows",
            Kernel::AttentionBackwardQueryRows => "attention_backward_query_rows",
            Kernel::CrossEntropyForwardBackward => "cross_entropy_forward_backward",
            Kernel::CrossEntropyLoss => "cross_entropy_loss",
            Kernel::ResidualForward => "residual_forward",
            Kernel::QkLayerNormForward => "qk_layernorm_forward",
            Kernel::QkLayerNormBackwardInput => "qk_layernorm_backward_input",
            Kernel::QkLayerNormBackwardParams => "qk_layernorm_backward_params",
            Kernel::Conv2dForward => "conv2d_forward",
            Kernel::Conv2dBackwardInput => "conv2d_backward_input",
            Kernel::Conv2dBackwardWeight => "conv2d_backward_weight",
            Kernel::Conv2dBackwardWeightSum => "conv2d_backward_weight_sum",
            Kernel::Conv2dForwardTiled => "conv2d_forward_tiled",
            Kernel::Conv2dBackwardInputTiled => "conv2d_backward_input_tiled",
            Kernel::Conv2dBackwardWeightTiled => "conv2d_backward_weight_tiled",
            Kernel::MaxPool2dForward => "max_pool2d_forward",
            Kernel::MaxPool2dBackward => "max_pool2d_backward",
            Kernel::AvgPool2dForward => "avg_pool2d_forward",
            Kernel::AvgPool2dBackward => "avg_pool2d_backward",
        }
    }

    pub fn source(self) -> &'static str {
        match self {
            Kernel::DenseForward => shader!("dense_forward"),
            Kernel::DenseForwardBlocked => shader!("dense_forward_blocked"),
            Kernel::LossForwardBackward => shader!("loss_forward_backward"),
            Kernel::DenseBackwardInput => shader!("dense_backward_input"),
            Kernel::DenseBackwardWeight => shader!("dense_backward_weight"),
            Kernel::DenseBackwardWeightBlocked => shader!("dense_backward_weight_blocked"),
            Kernel::DenseBackwardInputBlocked => shader!("dense_backward_input_blocked"),
            Kernel::BiasBackward => shader!("bias_backward"),
            Kernel::GatherRows => shader!("gather_rows"),
            Kernel::Advance => shader!("advance"),
            Kernel::RegularizationBackward => shader!("regularization_backward"),
            Kernel::GradNorm => shader!("grad_norm"),
            Kernel::ClipGradNorm => shader!("clip_grad_norm"),
            Kernel::SgdStep => shader!("sgd_step"),
            Kernel::AdamStep => shader!("adam_step"),
            Kernel::LambMoments => shader!("lamb_moments"),
            Kernel::LambStep => shader!("lamb_step"),
            Kernel::TensorStats => shader!("tensor_stats"),
            Kernel::FmaPeak => shader!("fma_peak"),
            Kernel::TrainStepFused | Kernel::TrainStepFusedNarrow => {
                shader!("train_step_fused")
            }
            Kernel::GeluForward => shader!("gelu_forward"),
            Kernel::GeluBackward => shader!("gelu_backward"),
            Kernel::LayerNormForward => shader!("layernorm_forward"),
            Kernel::LayerNormBackwardInput => shader!("layernorm_backward_input"),
            Kernel::LayerNormBackwardParams => shader!("layernorm_backward_params"),
            Kernel::EncoderForward => shader!("encoder_forward"),
            Kernel::EncoderBackward => shader!("encoder_backward"),
            Kernel::AttentionForward => shader!("attention_forward"),
            Kernel::AttentionBackwardQuery => shader!("attention_backward_query"),
            Kernel::AttentionBackwardKey => shader!("attention_backward_key"),
            Kernel::AttentionForwardRows => shader!("attention_forward_rows"),
            Kernel::AttentionBackwardQueryRows => {
                shader!("attention_backward_query_rows")
            }
            Kernel::CrossEntropyForwardBackward => {
                shader!("cross_entropy_forward_backward")
            }
            Kernel::CrossEntropyLoss => shader!("cross_entropy_loss"),
            Kernel::ResidualForward => shader!("residual_forward"),
            Kernel::QkLayerNormForward => shader!("qk_layernorm_forward"),
            Kernel::QkLayerNormBackwardInput => shader!("qk_layernorm_backward_input"),
            Kernel::QkLayerNormBackwardParams => shader!("qk_layernorm_backward_params"),
            Kernel::Conv2dForward => shader!("conv2d_forward"),
            Kernel::Conv2dBackwardInput => shader!("conv2d_backward_input"),
            Kernel::Conv2dBackwardWeight => shader!("conv2d_backward_weight"),
            Kernel::Conv2dBackwardWeightSum => shader!("conv2d_backward_weight_sum"),
            Kernel::Conv2dForwardTiled => shader!("conv2d_forward_tiled"),
            Kernel::Conv2dBackwardInputTiled => shader!("conv2d_backward_input_tiled"),
            Kernel::Conv2dBackwardWeightTiled => shader!("conv2d_backward_weight_tiled"),
            Kernel::MaxPool2dForward => shader!("max_pool2d_forward"),
            Kernel::MaxPool2dBackward => shader!("max_pool2d_backward"),
            Kernel::AvgPool2dForward => shader!("avg_pool2d_forward"),
            Kernel::AvgPool2dBackward => shader!("avg_pool2d_backward"),
        }
    }

    /// Values of the kernel's pipeline-overridable constants (WGSL
    /// `override`), where they differ from the defaults in its source.
    pub fn constants(self) -> &'static [(&'static str, f64)] {
        match self {
            Kernel::TrainStepFusedNarrow => &[("WG", 4.0)],
            _ => &[],
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
                compilation_options: wgpu::PipelineCompilationOptions {
                    constants: kernel.constants(),
                    ..Default::default()
                },
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
