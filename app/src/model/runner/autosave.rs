//! Automatic checkpoints: when one is due, taken whole or in the
//! background (one at a time), and reported when stored
//! (`checkpoints::complete`, which writes the autosave).

use stepscope_core::trainer::StateRead;
use stepscope_core::Error;
use web_time::Instant;

use super::Runner;
use crate::model::checkpoints::{self, CheckpointReport};

impl Runner {
    /// Whether an automatic checkpoint is due (every `every` steps; 0: off).
    /// Due once a multiple of `every` was passed since the last one (a
    /// frame trains several steps, so it lands on the frame's last step).
    pub fn checkpoint_due(&self, every: u64) -> bool {
        every > 0 && self.step_count() / every > self.last_checkpoint / every
    }

    /// Starts an automatic checkpoint of the current step: the GPU copies
    /// are queued (or the CPU state cloned); `checkpoints::complete` does the
    /// rest, awaited now (synchronous) or in a task (background). None
    /// part-way through a long CPU step: it is taken at the next step
    /// boundary (still due then).
    pub fn begin_checkpoint(&mut self) -> Result<Option<StateRead>, Error> {
        if self.trainer.mid_step() {
            return Ok(None);
        }
        let pending = self.trainer.begin_read_state()?;
        self.last_checkpoint = self.step_count();
        Ok(Some(pending))
    }

    /// Takes an automatic checkpoint: awaited whole (its report), or begun
    /// here and finished by a task that reports through `take_finished`
    /// (None). One background checkpoint at a time: when they fall due
    /// faster than IndexedDB stores them (the CPU engine runs thousands of
    /// steps a second), the next is skipped until this one is stored,
    /// instead of tasks and their bytes piling up without bound (the soak
    /// benchmark found that).
    pub async fn auto_checkpoint(&mut self, background: bool) -> Option<Result<CheckpointReport, Error>> {
        if background && self.in_flight.get() {
            return None;
        }
        let started = Instant::now();
        let read = match self.begin_checkpoint() {
            Ok(Some(read)) => read,
            // Part-way through a long step: taken at its end.
            Ok(None) => return None,
            Err(err) => return Some(Err(err)),
        };
        let (ring, csv) = (self.ring.clone(), self.csv.as_ref().map(|c| c.text.clone()));
        let generation = (self.autosave_generation.clone(), self.autosave_generation.get());
        if !background {
            return Some(
                checkpoints::complete(read, ring, csv, self.stored_csv.clone(), generation, started, false).await,
            );
        }
        self.in_flight.set(true);
        let (finished, in_flight, stored_csv) =
            (self.finished.clone(), self.in_flight.clone(), self.stored_csv.clone());
        wasm_bindgen_futures::spawn_local(async move {
            let report = checkpoints::complete(read, ring, csv, stored_csv, generation, started, true).await;
            finished.borrow_mut().push(report);
            in_flight.set(false);
        });
        None
    }

    /// Background checkpoints finished since the last call.
    pub fn take_finished(&self) -> Vec<Result<CheckpointReport, Error>> {
        std::mem::take(&mut *self.finished.borrow_mut())
    }

    /// Whether a background checkpoint is being stored.
    pub fn checkpoint_in_flight(&self) -> bool {
        self.in_flight.get()
    }
}
