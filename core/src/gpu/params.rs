//! `Params` uniforms of the kernels, laid out as the WGSL structs (all
//! 4-byte scalars, padded to a multiple of 16 bytes).

use bytemuck::{Pod, Zeroable};

use crate::experiment::{Activation, Loss};

pub fn activation_code(act: Activation) -> u32 {
    match act {
        Activation::Linear => 0,
        Activation::Relu => 1,
        Activation::LeakyRelu => 2,
        Activation::Tanh => 3,
        Activation::Sigmoid => 4,
        Activation::GeluTanh => 5,
        Activation::Silu => 6,
    }
}

pub fn loss_code(loss: Loss) -> u32 {
    match loss {
        Loss::Mse => 0,
        Loss::BceWithLogits => 1,
        Loss::CrossEntropy => 2,
    }
}

/// `shaders/dense_forward.wgsl`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, Pod, Zeroable)]
pub struct DenseForwardParams {
    pub batch: u32,
    pub inputs: u32,
    pub units: u32,
    pub weight_offset: u32,
    pub bias_offset: u32,
    pub activation: u32,
    pub layer: u32,
    pub _pad: u32,
}

/// Initial contents of the `flags` buffer: no non-finite value seen, step
/// 0, micro-batch 0.
pub const FLAGS_INIT: [u32; 4] = [u32::MAX, 0, 0, 0];

/// Phase numbers in a non-finite code `(step << 16) | (phase << 8) | order`.
pub const PHASE_FORWARD: u32 = 1;
pub const PHASE_LOSS: u32 = 2;
pub const PHASE_BACKWARD: u32 = 3;
pub const PHASE_OPTIMIZER: u32 = 4;
