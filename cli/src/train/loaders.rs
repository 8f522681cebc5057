//! Loader threads (`data.num_workers` natively): as the page's loader
//! workers and PyTorch's DataLoader, W threads each make every W-th
//! micro-batch of the run (`data::BatchMaker`, augmented as the experiment
//! says), up to `prefetch_factor` ahead; the loop feeds them to the engine,
//! which takes a batch only where it holds the rows it would serve itself,
//! so the bits are the experiment's. The time the loop waits for a batch
//! is the step's data time.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use stepscope_core::data::{BatchMaker, DataPosition, MadeBatch, Table};
use stepscope_core::{Experiment, Trainer};

pub struct ThreadLoaders {
    receivers: Vec<Receiver<MadeBatch>>,
    threads: Vec<JoinHandle<()>>,
    /// Micro-batches taken so far (which thread makes the next).
    taken: u64,
}

impl ThreadLoaders {
    /// W threads making `e`'s micro-batches over `table` from `position`.
    pub fn start(e: &Experiment, table: Table, position: &DataPosition) -> ThreadLoaders {
        let workers = e.data.num_workers().max(1) as u64;
        let table = Arc::new(table);
        let batch = e.batch_size as u64;
        let (mut receivers, mut threads) = (Vec::new(), Vec::new());
        for w in 0..workers {
            let (send, receive) = sync_channel(e.data.prefetch_factor());
            let mut maker = BatchMaker::new(e, table.rows(), position.clone());
            let (table, first) = (table.clone(), position.rows_consumed);
            threads.push(std::thread::spawn(move || {
                let mut j = w;
                // Ends when the loop drops its receiver.
                while let Some(made) = maker.make(first + j * batch, &table) {
                    if send.send(made).is_err() {
                        break;
                    }
                    j += workers;
                }
            }));
            receivers.push(receive);
        }
        ThreadLoaders { receivers, threads, taken: 0 }
    }

    /// Feeds the next step's `micro` micro-batches to the engine; the ms
    /// waited for them.
    pub fn before_step(&mut self, engine: &mut Trainer, micro: usize) -> f64 {
        let waited = Instant::now();
        for _ in 0..micro {
            let owner = (self.taken % self.receivers.len() as u64) as usize;
            // A thread that ended (it cannot, short of a panic) leaves the
            // loop to make its batches itself.
            if let Ok(made) = self.receivers[owner].recv() {
                engine.feed(made);
            }
            self.taken += 1;
        }
        waited.elapsed().as_secs_f64() * 1e3
    }
}

impl Drop for ThreadLoaders {
    fn drop(&mut self) {
        self.receivers.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
