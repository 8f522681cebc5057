//! The CPU reference engine: plain loops in f32, deterministic, the ground
//! truth for every GPU kernel and every view.

mod batches;
mod gpt;
mod partial;
mod profile;
mod ranks;
mod step;

use gpt::GptNet;
pub use gpt::{sample, SampledToken, Sampler, Sampling};
use partial::Partial;
pub use ranks::{RankTimes, RemoteRanks, ShardResult, ShardServer};

use super::phases::{summarise, LayerTimes, PhaseReport, PhaseTensors, StepPhase};
use super::{evaluate, forward_pass, Activations, Evaluation, MemoryBytes, PhaseTimes, StepMetrics, TrainState};
use crate::data::{Batcher, Dataset, MadeBatch, Table};
use crate::error::{room, zeros, Error, Result};
use crate::experiment::Experiment;
use crate::model::{Layout, TensorInfo};
use crate::optim::OptimizerState;
use std::collections::VecDeque;

/// Multiply-adds of one micro-batch (batch × parameters) from which
/// `step_part` takes a step a layer at a time: about a millisecond of work.
pub const LAYER_PART_MACS: u64 = 1 << 20;

pub struct CpuEngine {
    experiment: Experiment,
    layout: Layout,
    tensors: Vec<TensorInfo>,
    data: Dataset,
    batcher: Batcher,
    params: Vec<f32>,  // (P)
    grads: Vec<f32>,   // (P)
    updates: Vec<f32>, // (P) the last step's p_new − p_old
    optimizer: OptimizerState,
    inputs: Vec<f32>,    // (B, I)
    targets: Vec<f32>,   // (B, T)
    acts: Activations,   // a: (B, O_l) per layer; z the same, or one (B, max O) when checkpointing
    grad: Vec<Vec<f32>>, // per layer (B, O_l): ∂L/∂a, turned into ∂L/∂z in place
    /// When false, gradients are not zeroed between steps (a common bug,
    /// shown on purpose by the page's lessons).
    pub zero_grad: bool,
    /// A step begun phase by phase and not yet finished.
    partial: Option<Partial>,
    /// The transformer's part of a step (`model.kind` "gpt"); the MLP's
    /// layers are then empty.
    gpt: Option<Box<GptNet>>,
    /// A sharded run's ranks (`shards` > 1; `ranks`). `acts`, `grad` and
    /// `gpt` are then rank 0's, sized for one shard's rows.
    ranks: Option<Box<ranks::Ranks>>,
    /// An MLP's or conv net's last whole step taken phase by phase on
    /// this thread (not by ranks at once): (step, its `LayerTimes`).
    last_layer_times: Option<(u64, LayerTimes)>,
    /// Micro-batches loader workers made ahead (`data::loader`), oldest
    /// first; taken where they are the rows the batcher serves next.
    fed: VecDeque<MadeBatch>,
}

/// What one forward and backward over a shard of rows writes besides the
/// gradients: the engine's own buffers, or a rank's (`ranks`).
struct Work<'a> {
    acts: &'a mut Activations,
    grad: &'a mut Vec<Vec<f32>>,
    gpt: &'a mut Option<Box<GptNet>>,
}

impl CpuEngine {
    /// A fresh run: parameters initialised from the seed.
    pub fn new(experiment: &Experiment, data: Dataset) -> Result<CpuEngine> {
        CpuEngine::from_state(TrainState::try_fresh(experiment)?, data)
    }

    /// Continues the run `state` (e.g. from a checkpoint). Its buffers are
    /// allocated with `try_reserve`: a machine without the memory gets an
    /// error, not an abort.
    pub fn from_state(state: TrainState, data: Dataset) -> Result<CpuEngine> {
        state.check(&data)?;
        let experiment = state.experiment;
        let layout = Layout::new(&experiment);
        let batch = experiment.batch_size;
        let batcher = Batcher::for_run(&experiment, data.train.rows(), state.data_position);
        let row = experiment.model.inputs.max(data.train.input_width);
        let target_row = data.train.target_width;
        // A sharded run's forward and backward take one shard's rows.
        let rows = batch / experiment.shards;
        let gpt = match layout.gpt {
            Some(shape) => Some(Box::new(GptNet::new(shape, rows, false)?)),
            None => None,
        };
        let ranks = match experiment.shards {
            1 => None,
            shards => Some(Box::new(ranks::Ranks::new(shards, layout.parameter_count)?)),
        };
        Ok(CpuEngine {
            tensors: layout.tensors(),
            acts: Activations::try_new(&layout, rows)?,
            grad: layout.layers.iter().map(|l| zeros(rows * l.units, "backward's buffers")).collect::<Result<_>>()?,
            grads: zeros(layout.parameter_count, "the gradients")?,
            updates: zeros(layout.parameter_count, "the last updates")?,
            inputs: room(batch.saturating_mul(row), "the batch's rows")?,
            targets: room(batch.saturating_mul(target_row), "the batch's rows")?,
            params: state.params,
            optimizer: state.optimizer,
            batcher,
            data,
            layout,
            experiment,
            zero_grad: true,
            partial: None,
            gpt,
            ranks,
            last_layer_times: None,
            fed: VecDeque::new(),
        })
    }

    pub fn experiment(&self) -> &Experiment {
        &self.experiment
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }
    pub fn data(&self) -> &Dataset {
        &self.data
    }
    pub fn params(&self) -> &[f32] {
        &self.params
    }
    pub fn grads(&self) -> &[f32] {
        &self.grads
    }
    /// The last step's update, p_new − p_old (as the GPU's `updates`).
    pub fn updates(&self) -> &[f32] {
        &self.updates
    }
    pub fn activations(&self) -> &Activations {
        &self.acts
    }
    pub fn step_count(&self) -> u64 {
        self.optimizer.step
    }

    /// Activation checkpointing: forward keeps only each layer's output
    /// a; backward recomputes the pre-activation z of each layer (one
    /// more `dense_forward` per layer and micro-batch, the same function
    /// on the same inputs, so the results are unchanged bit for bit).
    /// Refused part-way through a step taken phase by phase, whose
    /// backward would need what forward did not keep.
    pub fn set_activation_checkpointing(&mut self, on: bool) -> Result<()> {
        if on == self.acts.checkpointing {
            return Ok(());
        }
        if self.partial.is_some() {
            return Err(Error::Experiment(
                "finish the step begun phase by phase before switching activation checkpointing".into(),
            ));
        }
        let batch = self.experiment.batch_size / self.experiment.shards;
        if let Some(ranks) = &mut self.ranks {
            ranks.drop_buffers();
        }
        if let Some(gpt) = &mut self.gpt {
            // Per block: keep each block's input, recompute its forward in
            // backward. The old buffers go before the new are allocated.
            use crate::model::gpt::GptActivations;
            let shape = gpt.model.shape;
            gpt.acts = GptActivations::new(on);
            gpt.acts = GptActivations::allocate(&shape, batch, on)?;
            self.acts.checkpointing = on;
            return Ok(());
        }
        self.acts = Activations::default();
        self.acts = if on {
            Activations::try_checkpointed(&self.layout, batch)?
        } else {
            Activations::try_new(&self.layout, batch)?
        };
        Ok(())
    }

    /// A transformer's last whole step: (step, forward, backward) by op
    /// kind and block (`OpTimes`); None for the MLP or before a step.
    pub fn op_times(&self) -> Option<&(u64, crate::model::gpt::OpTimes, crate::model::gpt::OpTimes)> {
        self.gpt.as_ref()?.last_times.as_ref()
    }

    /// An MLP's or conv net's last whole step by layer: (step, forward and
    /// backward milliseconds per layer, the loss's); None for a
    /// transformer (`op_times`), before a step, or where ranks took the
    /// step at once.
    pub fn layer_times(&self) -> Option<&(u64, LayerTimes)> {
        self.last_layer_times.as_ref()
    }

    pub fn activation_checkpointing(&self) -> bool {
        self.acts.checkpointing
    }

    /// Takes a live edit of the hyperparameters in place, at a step
    /// boundary (`Experiment::retunable_to`): the next step uses them.
    pub fn retune(&mut self, to: &Experiment) -> Result<()> {
        if !self.experiment.retunable_to(to) {
            return Err(Error::Experiment(
                "this edit changes the run's shape; rebuild the engine from its state".into(),
            ));
        }
        if self.partial.is_some() {
            return Err(Error::Experiment("finish the step begun phase by phase before editing the run".into()));
        }
        self.experiment = to.clone();
        Ok(())
    }

    /// Bytes of the engine's training buffers.
    pub fn memory(&self) -> MemoryBytes {
        if let Some(gpt) = &self.gpt {
            let (activations, attention, backward_scratch) = gpt.memory();
            return MemoryBytes {
                params: 4 * self.params.len() as u64,
                grads: 4 * self.grads.len() as u64,
                optimizer: self.optimizer.bytes() as u64,
                activations,
                attention,
                backward_scratch,
            };
        }
        let scratch: usize = self.grad.iter().map(Vec::len).sum::<usize>();
        MemoryBytes {
            params: 4 * self.params.len() as u64,
            grads: 4 * self.grads.len() as u64,
            optimizer: self.optimizer.bytes() as u64,
            activations: self.acts.bytes() as u64,
            backward_scratch: (4 * scratch + self.acts.scratch_bytes()) as u64,
            attention: 0,
        }
    }

    /// Bytes of the buffers `memory` leaves out: the last update, the
    /// micro-batch's rows (and the transformer's token ids), the shuffle's
    /// permutation (`limits::RunBytes::engine`, which adds the second
    /// permutation held while a new epoch's is drawn).
    pub fn other_bytes(&self) -> u64 {
        let ids = self.gpt.as_ref().map_or(0, |g| g.ids_capacity());
        let floats = self.updates.capacity() + self.inputs.capacity() + self.targets.capacity();
        let ranks = self.ranks.as_ref().map_or(0, |r| r.bytes());
        4 * (floats + ids) as u64 + self.batcher.bytes() + ranks
    }

    /// A snapshot of the run, for checkpoints.
    pub fn state(&self) -> TrainState {
        TrainState {
            experiment: self.experiment.clone(),
            params: self.params.clone(),
            optimizer: self.optimizer.clone(),
            data_position: self.batcher.position().clone(),
            vocabulary: self.data.vocabulary.clone(),
        }
    }

    /// One optimizer step: `grad_accumulation` micro-batches of forward and
    /// backward, regularization, clipping, then the update. On a NaN or Inf
    /// the step stops before the update and names the layer and phase;
    /// parameters and optimizer state are left as they were. A step begun
    /// phase by phase (`step_phase`) is finished from where it stands.
    pub fn step(&mut self) -> Result<StepMetrics> {
        if self.ranks.is_some() && self.partial.is_none() {
            self.last_layer_times = None;
            return self.sharded_step();
        }
        let mut partial = self.partial.take().unwrap_or_default();
        loop {
            if let Some(metrics) = self.advance(&mut partial, false)? {
                return Ok(metrics);
            }
        }
    }

    /// Runs the next part of the current step and keeps the step's
    /// progress, as step-by-phase mode does but without its statistics:
    /// the metrics when that part finished the step. A part is one
    /// micro-batch's forward or backward, or the update; where one
    /// micro-batch costs at least `LAYER_PART_MACS` multiply-adds, it is
    /// one layer's forward or backward. The same arithmetic in the same
    /// order as `step`, so a step taken in parts has the same bits; a
    /// caller can yield between parts of a long step. On an error the step
    /// is abandoned, as `step` would.
    pub fn step_part(&mut self) -> Result<Option<StepMetrics>> {
        if self.ranks.is_some() && self.partial.is_none() {
            // A sharded step is one part: its ranks run it at once.
            return self.sharded_step().map(Some);
        }
        let mut partial = self.partial.take().unwrap_or_default();
        let by_layer =
            self.gpt.is_none() && (self.experiment.batch_size * self.layout.parameter_count) as u64 >= LAYER_PART_MACS;
        let done = self.advance(&mut partial, by_layer)?;
        if done.is_none() {
            self.partial = Some(partial);
        }
        Ok(done)
    }

    /// Drops a step begun in parts, as if it had not begun: the data goes
    /// back to where the step began, and parameters and optimizer state
    /// were not touched yet (the update is the step's last part), so the
    /// state is that of the last finished step (the CLI's Ctrl-C inside a
    /// long step). Gradients piled up by the lesson without zeroing keep
    /// the dropped step's part.
    pub fn abandon_step(&mut self) {
        if let Some(start) = self.partial.take().and_then(|p| p.start) {
            self.batcher = Batcher::for_run(&self.experiment, self.data.train.rows(), start);
        }
    }

    /// The phase times of the step under way so far (zero between steps):
    /// a trace splits each part of a step taken in parts by them.
    pub fn phases_so_far(&self) -> PhaseTimes {
        self.partial.as_ref().map_or_else(PhaseTimes::default, |p| p.phases)
    }

    /// Whether a step is part-way through (step-by-phase mode).
    pub fn mid_step(&self) -> bool {
        self.partial.is_some()
    }

    /// The phase `step_phase` runs next.
    pub fn next_phase(&self) -> StepPhase {
        self.partial.as_ref().map_or(StepPhase::Forward { micro: 0 }, |p| p.next)
    }

    /// The gradients step-by-phase shows: the shard's own while a sharded
    /// micro-batch's shards are under way, else the step's.
    fn shown_grads(&self, partial: &Partial) -> &[f32] {
        match (partial.shown_shard, &self.ranks) {
            (Some(s), Some(ranks)) => ranks.shard_grads(s, self.layout.parameter_count),
            _ => &self.grads,
        }
    }

    /// Runs one phase of the current step and summarises its tensors. On
    /// an error the step is abandoned, as `step` would.
    pub fn step_phase(&mut self) -> Result<PhaseReport> {
        let mut partial = self.partial.take().unwrap_or_default();
        let phase = partial.next;
        let step = self.optimizer.step;
        // A transformer's forward and backward stop between a block's ops.
        let metrics = self.advance(&mut partial, self.gpt.is_some())?;
        let k = self.experiment.grad_accumulation;
        let finished = partial.next != phase || metrics.is_some();
        let mut part = None;
        let layers = match (phase, &self.gpt) {
            (StepPhase::Forward { .. } | StepPhase::Backward { .. }, Some(gpt)) => {
                let i = if finished { gpt.stages() - 1 } else { partial.layers_done - 1 };
                let (layers, stop) = gpt.phase_rows(&self.layout, phase, i, self.shown_grads(&partial));
                part = Some(stop);
                layers
            }
            // With checkpointing there are no per-layer z's to show.
            (StepPhase::Forward { .. }, None) => {
                summarise(&self.layout, &PhaseTensors::Forward { z: self.acts.stored_z(), a: &self.acts.a })
            }
            (StepPhase::Backward { .. }, None) => {
                summarise(&self.layout, &PhaseTensors::Backward { grads: self.shown_grads(&partial) })
            }
            (StepPhase::Optimizer, _) => {
                let moments = self.optimizer.buffers().into_iter().map(|(n, b)| (n, b.as_slice())).collect();
                let updates = &self.updates;
                summarise(&self.layout, &PhaseTensors::Optimizer { params: &self.params, updates, moments })
            }
        };
        let loss = (matches!(phase, StepPhase::Forward { .. }) && finished).then_some(partial.last_loss);
        if metrics.is_none() {
            self.partial = Some(partial);
        }
        Ok(PhaseReport { phase, step, micro_batches: k, loss, metrics, layers, part })
    }

    /// Mean loss (and accuracy for classification) over `table`, in one
    /// pass, without touching the training state.
    pub fn evaluate(&self, table: &Table) -> Option<Evaluation> {
        evaluate(&self.params, &self.layout, &self.experiment, table)
    }

    /// Network outputs for `inputs` (rows, I): (rows, O).
    pub fn predict(&self, inputs: &[f32]) -> Vec<f32> {
        // A non-finite layer shows as NaN/Inf in the outputs the views draw.
        let layout = &self.layout;
        super::predict(&self.params, layout, &self.experiment, inputs).unwrap_or_else(|_| {
            let rows = inputs.len() / self.experiment.model.inputs.max(1);
            let mut acts = Activations::new(layout, rows);
            forward_pass(&mut acts, &self.params, inputs, layout, &self.experiment);
            acts.output().to_vec()
        })
    }
}
