//! Every `Params` uniform (and `StepScalars`, `Run`) the Rust side uploads
//! has the size its WGSL struct declares, read from the shader by naga (the
//! WGSL front end wgpu itself uses); the fused step's structs, the most
//! intricate, are checked field by field.

use std::mem::{offset_of, size_of};

use stepscope_core::gpu::params::*;
use stepscope_core::gpu::{FusedLayer, FusedParams, FusedRun, Kernel};
use stepscope_core::optim::StepScalars;

/// (member name, byte offset) of struct `name` in `kernel`'s WGSL, and its size.
fn wgsl_struct(kernel: Kernel, name: &str) -> (Vec<(String, u32)>, u32) {
    let module = naga::front::wgsl::parse_str(kernel.source()).unwrap_or_else(|e| panic!("{}: {e}", kernel.name()));
    let (_, ty) = module
        .types
        .iter()
        .find(|(_, t)| t.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("{} declares no struct {name}", kernel.name()));
    match &ty.inner {
        naga::TypeInner::Struct { members, span } => {
            (members.iter().map(|m| (m.name.clone().unwrap_or_default(), m.offset)).collect(), *span)
        }
        other => panic!("{name} in {} is not a struct: {other:?}", kernel.name()),
    }
}

fn assert_size(kernel: Kernel, name: &str, rust_size: usize) {
    let (_, span) = wgsl_struct(kernel, name);
    assert_eq!(span as usize, rust_size, "{}: WGSL {name} is {span} bytes, its Rust twin {rust_size}", kernel.name());
}

#[test]
fn every_params_struct_has_its_rust_twins_size() {
    let cases: &[(Kernel, usize)] = &[
        (Kernel::DenseForward, size_of::<DenseForwardParams>()),
        (Kernel::DenseForwardBlocked, size_of::<DenseForwardParams>()),
        (Kernel::LossForwardBackward, size_of::<LossForwardBackwardParams>()),
        (Kernel::DenseBackwardInput, size_of::<DenseBackwardInputParams>()),
        (Kernel::DenseBackwardInputBlocked, size_of::<DenseBackwardInputParams>()),
        (Kernel::DenseBackwardWeight, size_of::<DenseBackwardWeightParams>()),
        (Kernel::DenseBackwardWeightBlocked, size_of::<DenseBackwardWeightParams>()),
        (Kernel::BiasBackward, size_of::<BiasBackwardParams>()),
        (Kernel::GatherRows, size_of::<GatherRowsParams>()),
        (Kernel::Advance, size_of::<AdvanceParams>()),
        (Kernel::RegularizationBackward, size_of::<RegularizationBackwardParams>()),
        (Kernel::GradNorm, size_of::<GradNormParams>()),
        (Kernel::ClipGradNorm, size_of::<ClipGradNormParams>()),
        (Kernel::SgdStep, size_of::<SgdStepParams>()),
        (Kernel::AdamStep, size_of::<AdamStepParams>()),
        (Kernel::LambMoments, size_of::<LambParams>()),
        (Kernel::LambStep, size_of::<LambParams>()),
        (Kernel::TensorStats, size_of::<TensorStatsParams>()),
        (Kernel::FmaPeak, size_of::<FmaPeakParams>()),
        (Kernel::GeluForward, size_of::<ElementwiseParams>()),
        (Kernel::GeluBackward, size_of::<GeluBackwardParams>()),
        (Kernel::LayerNormForward, size_of::<LayerNormParams>()),
        (Kernel::LayerNormBackwardInput, size_of::<LayerNormBackwardInputParams>()),
        (Kernel::LayerNormBackwardParams, size_of::<LayerNormParams>()),
        (Kernel::EncoderForward, size_of::<EncoderParams>()),
        (Kernel::EncoderBackward, size_of::<EncoderParams>()),
        (Kernel::AttentionForward, size_of::<AttentionParams>()),
        (Kernel::AttentionBackwardQuery, size_of::<AttentionParams>()),
        (Kernel::AttentionBackwardKey, size_of::<AttentionParams>()),
        (Kernel::AttentionForwardRows, size_of::<AttentionParams>()),
        (Kernel::AttentionBackwardQueryRows, size_of::<AttentionParams>()),
        (Kernel::CrossEntropyForwardBackward, size_of::<CrossEntropyParams>()),
        (Kernel::CrossEntropyLoss, size_of::<CrossEntropyLossParams>()),
        (Kernel::ResidualForward, size_of::<ElementwiseParams>()),
        (Kernel::QkLayerNormForward, size_of::<QkLayerNormParams>()),
        (Kernel::QkLayerNormBackwardInput, size_of::<QkLayerNormParams>()),
        (Kernel::QkLayerNormBackwardParams, size_of::<QkLayerNormParams>()),
        (Kernel::Conv2dForward, size_of::<ConvParams>()),
        (Kernel::Conv2dBackwardInput, size_of::<ConvParams>()),
        (Kernel::Conv2dBackwardWeight, size_of::<ConvParams>()),
        (Kernel::Conv2dBackwardWeightSum, size_of::<ConvParams>()),
        (Kernel::Conv2dForwardTiled, size_of::<ConvParams>()),
        (Kernel::Conv2dBackwardInputTiled, size_of::<ConvParams>()),
        (Kernel::Conv2dBackwardWeightTiled, size_of::<ConvParams>()),
        (Kernel::MaxPool2dForward, size_of::<PoolParams>()),
        (Kernel::MaxPool2dBackward, size_of::<PoolParams>()),
        (Kernel::AvgPool2dForward, size_of::<PoolParams>()),
        (Kernel::AvgPool2dBackward, size_of::<PoolParams>()),
        (Kernel::TrainStepFused, size_of::<FusedParams>()),
    ];
    for &(kernel, size) in cases {
        assert_size(kernel, "Params", size);
    }
    for kernel in [Kernel::SgdStep, Kernel::AdamStep, Kernel::LambMoments, Kernel::LambStep, Kernel::TrainStepFused] {
        assert_size(kernel, "StepScalars", size_of::<StepScalars>());
    }
    assert_size(Kernel::TrainStepFused, "Run", size_of::<FusedRun>());
    assert_size(Kernel::TrainStepFused, "Layer", size_of::<FusedLayer>());
}

#[test]
fn the_fused_steps_structs_match_field_by_field() {
    let rust = [
        ("batch", offset_of!(FusedParams, batch)),
        ("inputs", offset_of!(FusedParams, inputs)),
        ("target_width", offset_of!(FusedParams, target_width)),
        ("n_layers", offset_of!(FusedParams, n_layers)),
        ("count", offset_of!(FusedParams, count)),
        ("loss", offset_of!(FusedParams, loss)),
        ("micro_batches", offset_of!(FusedParams, micro_batches)),
        ("loss_scale", offset_of!(FusedParams, loss_scale)),
        ("optimizer", offset_of!(FusedParams, optimizer)),
        ("decoupled", offset_of!(FusedParams, decoupled)),
        ("use_momentum", offset_of!(FusedParams, use_momentum)),
        ("nesterov", offset_of!(FusedParams, nesterov)),
        ("momentum", offset_of!(FusedParams, momentum)),
        ("one_minus_dampening", offset_of!(FusedParams, one_minus_dampening)),
        ("weight_decay", offset_of!(FusedParams, weight_decay)),
        ("one_minus_beta1", offset_of!(FusedParams, one_minus_beta1)),
        ("beta2", offset_of!(FusedParams, beta2)),
        ("one_minus_beta2", offset_of!(FusedParams, one_minus_beta2)),
        ("eps", offset_of!(FusedParams, eps)),
        ("clip_enabled", offset_of!(FusedParams, clip_enabled)),
        ("max_norm", offset_of!(FusedParams, max_norm)),
        ("regularization", offset_of!(FusedParams, regularization)),
        ("regularization_rate", offset_of!(FusedParams, regularization_rate)),
        ("updates_offset", offset_of!(FusedParams, updates_offset)),
        ("stats_offset", offset_of!(FusedParams, stats_offset)),
        ("flags_offset", offset_of!(FusedParams, flags_offset)),
        ("x_offset", offset_of!(FusedParams, x_offset)),
        ("t_offset", offset_of!(FusedParams, t_offset)),
        ("layers", offset_of!(FusedParams, layers)),
    ];
    let (members, _) = wgsl_struct(Kernel::TrainStepFused, "Params");
    let wgsl: Vec<(String, usize)> = members.into_iter().map(|(n, o)| (n, o as usize)).collect();
    let rust: Vec<(String, usize)> = rust.iter().map(|&(n, o)| (n.to_string(), o)).collect();
    assert_eq!(wgsl, rust);
    let (layer, _) = wgsl_struct(Kernel::TrainStepFused, "Layer");
    assert_eq!(layer, vec![("shape".to_string(), 0), ("place".to_string(), offset_of!(FusedLayer, place) as u32)]);
    let (scalars, _) = wgsl_struct(Kernel::TrainStepFused, "StepScalars");
    let offsets: Vec<u32> = scalars.iter().map(|(_, o)| *o).collect();
    assert_eq!(
        offsets,
        [
            offset_of!(StepScalars, neg_lr),
            offset_of!(StepScalars, neg_step_size),
            offset_of!(StepScalars, bias_correction2_sqrt),
            offset_of!(StepScalars, decay),
            offset_of!(StepScalars, bias_correction1),
            offset_of!(StepScalars, bias_correction2),
            offset_of!(StepScalars, first_step),
            offset_of!(StepScalars, _pad),
        ]
        .map(|o| o as u32)
    );
}

/// The two variants of each matmul share one `Params` twin: field by field.
#[test]
fn the_matmul_variants_share_their_params_field_by_field() {
    let forward = [
        ("batch", offset_of!(DenseForwardParams, batch)),
        ("inputs", offset_of!(DenseForwardParams, inputs)),
        ("units", offset_of!(DenseForwardParams, units)),
        ("weight_offset", offset_of!(DenseForwardParams, weight_offset)),
        ("bias_offset", offset_of!(DenseForwardParams, bias_offset)),
        ("activation", offset_of!(DenseForwardParams, activation)),
        ("layer", offset_of!(DenseForwardParams, layer)),
    ];
    let weight = [
        ("batch", offset_of!(DenseBackwardWeightParams, batch)),
        ("inputs", offset_of!(DenseBackwardWeightParams, inputs)),
        ("units", offset_of!(DenseBackwardWeightParams, units)),
        ("weight_offset", offset_of!(DenseBackwardWeightParams, weight_offset)),
        ("layer", offset_of!(DenseBackwardWeightParams, layer)),
        ("bias_offset", offset_of!(DenseBackwardWeightParams, bias_offset)),
    ];
    let input = [
        ("batch", offset_of!(DenseBackwardInputParams, batch)),
        ("inputs", offset_of!(DenseBackwardInputParams, inputs)),
        ("units", offset_of!(DenseBackwardInputParams, units)),
        ("weight_offset", offset_of!(DenseBackwardInputParams, weight_offset)),
        ("activation", offset_of!(DenseBackwardInputParams, activation)),
    ];
    type Fields<'a> = &'a [(&'a str, usize)];
    let cases: [(&[Kernel], Fields); 3] = [
        (&[Kernel::DenseForward, Kernel::DenseForwardBlocked], &forward),
        (&[Kernel::DenseBackwardWeight, Kernel::DenseBackwardWeightBlocked], &weight),
        (&[Kernel::DenseBackwardInput, Kernel::DenseBackwardInputBlocked], &input),
    ];
    for (kernels, fields) in cases {
        for &kernel in kernels {
            let (members, _) = wgsl_struct(kernel, "Params");
            for &(name, offset) in fields {
                let found = members.iter().find(|(m, _)| m == name).map(|(_, o)| *o as usize);
                assert_eq!(found, Some(offset), "{}: Params.{name}", kernel.name());
            }
        }
    }
}

#[test]
fn the_loss_params_match_field_by_field() {
    let rust = [
        ("batch", offset_of!(LossForwardBackwardParams, batch)),
        ("outputs", offset_of!(LossForwardBackwardParams, outputs)),
        ("loss", offset_of!(LossForwardBackwardParams, loss)),
        ("target_width", offset_of!(LossForwardBackwardParams, target_width)),
        ("scale", offset_of!(LossForwardBackwardParams, scale)),
        ("activation", offset_of!(LossForwardBackwardParams, activation)),
    ];
    let (members, _) = wgsl_struct(Kernel::LossForwardBackward, "Params");
    for (name, offset) in rust {
        let found = members.iter().find(|(m, _)| m == name).map(|(_, o)| *o as usize);
        assert_eq!(found, Some(offset), "loss_forward_backward: Params.{name}");
    }
}

/// The text of `fn name(…) { … }` in `kernel`'s WGSL (up to the first
/// closing brace at the start of a line).
fn wgsl_fn(kernel: Kernel, name: &str) -> &'static str {
    let source = kernel.source();
    let start = source.find(&format!("fn {name}(")).unwrap_or_else(|| panic!("{} has no fn {name}", kernel.name()));
    let end = start + source[start..].find("\n}\n").expect("a closing brace") + 2;
    &source[start..end]
}

/// WGSL has no includes, so the kernels that apply an activation's
/// backward each carry a copy of the derivative (and its helpers): every
/// copy is the same text, so one CPU twin covers them all.
#[test]
fn every_copy_of_the_activation_derivative_is_the_same() {
    let kernels = [
        Kernel::LossForwardBackward,
        Kernel::DenseBackwardInput,
        Kernel::DenseBackwardInputBlocked,
        Kernel::TrainStepFused,
    ];
    for name in ["activation_derivative", "tanh_stable", "sigmoid"] {
        let first = wgsl_fn(kernels[0], name);
        for &kernel in &kernels[1..] {
            assert_eq!(
                wgsl_fn(kernel, name),
                first,
                "{}: fn {name} differs from {}'s",
                kernel.name(),
                kernels[0].name()
            );
        }
    }
    let first = wgsl_fn(Kernel::LossForwardBackward, "log1p");
    assert_eq!(wgsl_fn(Kernel::TrainStepFused, "log1p"), first, "train_step_fused: fn log1p differs");
}

/// core/build.rs embeds each kernel without its `//` comments; WGSL has no
/// strings, and no kernel may use a block comment, which it would keep.
#[test]
fn the_kernels_are_embedded_without_their_comments() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shaders");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("/*"), "{}: a block comment", path.display());
    }
    for &kernel in Kernel::ALL {
        assert!(!kernel.source().contains("//"), "{}", kernel.name());
    }
}
