//! # stepscope-core
//!
//! All of Stepscope's training math: the experiment format, the CPU
//! reference engine, optimizers, schedules, data and checkpoints. No UI.
//!
//! ## Shape legend
//! - B: batch (rows of one micro-batch)
//! - I: inputs of a layer, O: outputs (units) of a layer
//! - N: rows of a data table, T: target columns
//! - P: parameters of the whole model (one flat buffer)
//!
//! Buffers carry their shape in a comment, e.g. `// (B, O)`; matrices are
//! row-major.

pub mod checkpoint;
pub mod data;
pub mod engine;
pub mod error;
pub mod experiment;
pub mod export;
#[doc(hidden)]
pub mod fuzz;
pub mod gpu;
pub mod input;
pub mod json;
pub mod limits;
pub mod link;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod rng;
pub mod runs;
pub mod stats;
pub mod trainer;
mod validate;
pub mod workloads;

pub use engine::{CpuEngine, Evaluation, PhaseTimes, StepMetrics, TrainState};
pub use error::{Error, Result};
pub use experiment::Experiment;
pub use trainer::Trainer;
