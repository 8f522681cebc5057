//! Training engines. The CPU engine is the reference every other backend
//! is checked against; all share `TrainState` (what a checkpoint holds)
//! and `StepMetrics` (what one optimizer step reports).

pub mod anatomy;
mod cpu;
mod forward;
pub mod phases;
pub mod profile;
mod state_check;

pub use cpu::{
    sample, CpuEngine, RankTimes, RemoteRanks, SampledToken, Sampler, Sampling, ShardResult, ShardServer,
    LAYER_PART_MACS,
};
pub use forward::{
    conv_scratch_floats, evaluate, forward_layer, forward_pass, gpt_eval_windows, predict, Activations, Evaluator,
    EVAL_CHUNK_ROWS,
};
pub use phases::{LayerTimes, PhasePart, PhaseReport, StepPhase};
pub use state_check::{check_finite, check_state, MAX_ROWS_CONSUMED, MAX_SHUFFLE_REPLAY_ROWS, MAX_STEP};

use serde::{Deserialize, Serialize};

use crate::data::DataPosition;
use crate::experiment::Experiment;
use crate::model::Layout;
use crate::optim::OptimizerState;

/// What an engine's training memory holds, in bytes, from its actual
/// buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBytes {
    /// Parameters (4·P).
    pub params: u64,
    /// Gradients (4·P).
    pub grads: u64,
    /// Optimizer state: 0, 1 or 2 copies of the parameters.
    pub optimizer: u64,
    /// What forward stores for backward for one micro-batch: outputs and
    /// pre-activations of every layer, 2·4·B·Σ O_l; with activation
    /// checkpointing outputs and one shared pre-activation scratch,
    /// 4·B·(Σ O_l + max O).
    pub activations: u64,
    /// Backward's working buffers: ∂L/∂a of every layer and ∂L/∂z of one.
    pub backward_scratch: u64,
    /// The transformer's attention probabilities, B·H·T² per block kept
    /// (one block's with activation checkpointing), apart from
    /// `activations`: the part that grows with the square of the context.
    /// 0 for the MLP.
    #[serde(default)]
    pub attention: u64,
}

impl MemoryBytes {
    /// Everything alive at once during backward: the peak of a step.
    pub fn peak_backward(&self) -> u64 {
        self.params + self.grads + self.optimizer + self.activations + self.attention + self.backward_scratch
    }
}

/// What activation checkpointing trades per micro-batch, from the model
/// alone (the engines' `memory()` gives the bytes actually held).
/// Forward keeps each layer's output a but writes its pre-activation z
/// into one shared (B, max O) scratch; backward recomputes z[l] = a[l−1]·Wᵀ + b
/// for each layer before using it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointingTrade {
    /// The per-layer z's less the scratch that replaces them:
    /// 4·B·(Σ_l O_l − max_l O_l).
    pub bytes_saved: u64,
    /// One more dense forward per layer: 2·B·Σ_l I_l·O_l.
    pub extra_flops: u64,
    /// Matmul FLOPs of forward and backward without checkpointing:
    /// forward 2·B·Σ I·O, weight gradients 2·B·Σ I·O, input gradients
    /// 2·B·Σ_{l>0} I·O (the first layer's inputs need none).
    pub step_flops: u64,
}

impl CheckpointingTrade {
    pub fn new(layout: &Layout, batch: usize) -> CheckpointingTrade {
        if let Some(shape) = &layout.gpt {
            // A transformer keeps each block's output instead of its
            // activations and attention probabilities, and runs each
            // block's forward again in backward.
            let floats = |on| {
                let (acts, att, _) = crate::model::gpt::memory_floats(shape, batch, on);
                (acts + att) as u64
            };
            let (forward, backward) = shape.step_flops(batch);
            return CheckpointingTrade {
                bytes_saved: 4 * floats(false).saturating_sub(floats(true)),
                extra_flops: (shape.blocks as f64 * shape.block_forward_flops(batch)) as u64,
                step_flops: (forward + backward) as u64,
            };
        }
        let b = batch as u64;
        let units: u64 = layout.layers.iter().map(|l| l.units as u64).sum();
        let max_units = layout.layers.iter().map(|l| l.units as u64).max().unwrap_or(0);
        let macs = |skip: usize| -> u64 { layout.layers.iter().skip(skip).map(|l| l.macs() as u64).sum() };
        CheckpointingTrade {
            bytes_saved: 4 * b * (units - max_units),
            extra_flops: 2 * b * macs(0),
            step_flops: 2 * b * (2 * macs(0) + macs(1)),
        }
    }

    /// Predicted share of time added where matmuls dominate: extra / step FLOPs.
    pub fn flops_added(&self) -> f64 {
        self.extra_flops as f64 / self.step_flops.max(1) as f64
    }
}

/// Everything a run is: restoring it into any engine continues the run
/// exactly where it was.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainState {
    pub experiment: Experiment,
    pub params: Vec<f32>, // (P)
    pub optimizer: OptimizerState,
    pub data_position: DataPosition,
    /// A text run's characters (token i is the i-th), so that a checkpoint
    /// samples and resumes without guessing the mapping; None for the MLP.
    pub vocabulary: Option<crate::data::Vocabulary>,
}

impl TrainState {
    /// A fresh run of `e`: parameters initialised from its seed, empty
    /// optimizer state, data from the first row.
    pub fn fresh(e: &Experiment) -> TrainState {
        TrainState::try_fresh(e).unwrap_or_else(|err| panic!("{err}"))
    }

    /// `fresh`, or an error naming the buffer when the machine has not
    /// the memory for the parameters or the optimizer's moments.
    pub fn try_fresh(e: &Experiment) -> crate::Result<TrainState> {
        let layout = Layout::new(e);
        let params = crate::model::try_init_parameters(&layout, e.seed)?;
        // Which moments the optimizer keeps (each of P floats), from a
        // state of one parameter.
        let mut optimizer = OptimizerState::new(&e.optimizer, 1);
        for buffer in [&mut optimizer.exp_avg, &mut optimizer.exp_avg_sq, &mut optimizer.momentum_buffer] {
            if !buffer.is_empty() {
                *buffer = crate::error::zeros(layout.parameter_count, "the optimizer's state")?;
            }
        }
        Ok(TrainState {
            experiment: e.clone(),
            params,
            optimizer,
            data_position: DataPosition::start(e.seed),
            vocabulary: None,
        })
    }

    /// Optimizer steps taken.
    pub fn step(&self) -> u64 {
        self.optimizer.step
    }

    /// Whether this state can be trained on `data`: every range and
    /// consistency check of `check_state`, with the data at hand.
    pub fn check(&self, data: &crate::data::Dataset) -> crate::Result<()> {
        state_check::check_state(self, Some(data.train.rows()))?;
        if let (Some(ours), Some(theirs)) = (&self.vocabulary, &data.vocabulary) {
            if ours != theirs {
                return Err(crate::Error::Experiment(format!(
                    "the run's vocabulary {:?} is not the text's {:?}: the same ids would mean other characters",
                    ours.as_string(),
                    theirs.as_string()
                )));
            }
        }
        Ok(())
    }
}

/// Milliseconds spent in each phase of one optimizer step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTimes {
    pub data_ms: f64,
    pub forward_ms: f64,
    pub backward_ms: f64,
    pub optimizer_ms: f64,
    /// A sharded run's all-reduce (the shards' gradients summed in shard
    /// order) and the ranks' wait for the slowest (`engine::cpu` ranks);
    /// 0, and left out of the metrics, otherwise.
    #[serde(default, skip_serializing_if = "is_zero_ms")]
    pub communication_ms: f64,
    pub checkpoint_ms: f64,
    pub logging_ms: f64,
}

fn is_zero_ms(v: &f64) -> bool {
    *v == 0.0
}

/// What one optimizer step reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// 0-based index of this optimizer step.
    pub step: u64,
    /// Data loss, mean over this step's micro-batches, before the update.
    pub loss: f32,
    /// Global gradient L2 norm before clipping.
    pub grad_norm: f32,
    /// The transformer's z-loss, mean(logsumexp(logits)²) over this step's
    /// micro-batches, whether or not its coefficient is 0; None for the MLP.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub z_loss: Option<f32>,
    /// Learning rate this step used.
    pub lr: f64,
    /// Whether clipping scaled the gradients down.
    pub clipped: bool,
    #[serde(flatten)]
    pub phases: PhaseTimes,
    /// Where the phase times come from.
    pub timing: Timing,
    /// GPU time of the step's passes from timestamp queries (GPU engine
    /// with timestamps only): the GPU's share of the phase times.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu_ms: Option<f64>,
    /// A sharded run's ranks, each one's part of the step (`cpu::RankTimes`);
    /// empty, and left out of the metrics, otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub ranks: Vec<RankTimes>,
}

/// The source of a step's phase times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// CPU engine: each phase timed by the clock.
    Cpu,
    /// GPU engine: forward, backward and optimizer from GPU timestamp
    /// queries; data adds the CPU's row and scalar preparation.
    GpuTimestamps,
    /// GPU engine on an adapter without timestamp queries: the GPU's work
    /// cannot be split by phase, so `forward_ms` holds the whole submit's
    /// wall time per step and backward/optimizer read 0.
    GpuCoarse,
    /// GPU engine in throughput mode (one pass per step): `gpu_ms` is the
    /// step's GPU time from timestamps; forward, backward and optimizer
    /// read 0 because they were not timed apart. `data_ms` is the CPU's
    /// row and scalar preparation.
    GpuTotal,
    /// GPU engine on the fused path: a submit's K steps are one dispatch,
    /// so its GPU time is one number, shared evenly as each step's
    /// `gpu_ms`; forward, backward and optimizer read 0.
    GpuFused,
}

/// Where training phases are, for reporting the first non-finite value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Forward,
    Loss,
    Backward,
    Optimizer,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        };
        f.write_str(name)
    }
}

/// Mean loss and, for classification, accuracy over a table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    pub loss: f32,
    pub accuracy: Option<f32>,
}
