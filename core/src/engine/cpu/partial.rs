//! Where a step taken phase by phase stands (the page's step-by-phase
//! view, a large network's step a layer at a time, a sharded step shard by
//! shard): what is done, the losses so far and the phases' times.

use crate::data::DataPosition;
use crate::engine::phases::{LayerTimes, StepPhase};
use crate::engine::PhaseTimes;

/// Where a step taken phase by phase stands.
pub(super) struct Partial {
    pub(super) next: StepPhase,
    /// Layers of the current forward or backward phase already run (a
    /// large network's step is taken a layer at a time by `step_part`).
    pub(super) layers_done: usize,
    pub(super) loss_sum: f32,
    pub(super) last_loss: f32,
    /// A sharded run's shard under way, and its micro-batch's shard losses
    /// (and z-losses) so far; the z-losses of the step's micro-batches.
    pub(super) shard: usize,
    pub(super) shard_loss: f32,
    pub(super) shard_z: f32,
    pub(super) z_sum: f32,
    /// The shard whose gradient buffer the last backward wrote, until the
    /// all-reduce (what step-by-phase shows); None: `grads`.
    pub(super) shown_shard: Option<usize>,
    pub(super) phases: PhaseTimes,
    /// The MLP's layers' share of `phases` (`LayerTimes`).
    pub(super) layer_times: LayerTimes,
    /// Where the data stood when the step began (`abandon_step`).
    pub(super) start: Option<DataPosition>,
}

impl Default for Partial {
    fn default() -> Partial {
        Partial {
            next: StepPhase::Forward { micro: 0 },
            layers_done: 0,
            loss_sum: 0.0,
            last_loss: 0.0,
            shard: 0,
            shard_loss: 0.0,
            shard_z: 0.0,
            z_sum: 0.0,
            shown_shard: None,
            phases: PhaseTimes::default(),
            layer_times: LayerTimes::default(),
            start: None,
        }
    }
}

impl Partial {
    /// A forward's loss (and z-loss): into the step's sum, or for a
    /// sharded run into its micro-batch's shard sums.
    pub(super) fn add_loss(&mut self, loss: f32, z: f32, sharded: bool) {
        if sharded {
            self.shard_loss += loss;
            self.shard_z += z;
        } else {
            self.loss_sum += loss;
        }
        self.last_loss = loss;
    }

    /// A sharded micro-batch's last shard finished: its losses averaged
    /// over the shards (in order, as `sharded_step`) into the step's.
    pub(super) fn end_micro_batch(&mut self, shards: usize) {
        self.loss_sum += self.shard_loss / shards as f32;
        self.z_sum += self.shard_z / shards as f32;
        (self.shard, self.shard_loss, self.shard_z) = (0, 0.0, 0.0);
    }
}
