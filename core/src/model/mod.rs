//! The network: dense layers with an activation each, the losses, and
//! regularization. Each op is a `_forward` / `_backward` pair in one file.
//! `gpt`: the character-level transformer's ops and layout (the second
//! model kind, built up in issue 26).

mod activation;
pub mod conv;
mod dense;
mod gemm;
pub mod gpt;
mod layout;
mod loss;
pub mod pool;
mod regularization;
mod wide;

pub use activation::{activation_backward, activation_forward};
pub use dense::{dense_backward, dense_forward, dense_forward_reference};
pub use gemm::{gemm, gemm_from, gemm_reference, Lhs, Start};
pub use layout::{init_parameters, try_init_parameters, LayerOp, LayerShape, Layout, TensorInfo};
pub use loss::{loss_backward, loss_forward};
pub use regularization::{regularization_backward, regularization_forward};
pub use wide::all_finite;
