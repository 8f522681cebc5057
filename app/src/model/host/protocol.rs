//! What the page asks of the engine's side, and what it answers: one
//! request at a time, each answered with the loop's status. Messages cross
//! to the worker as MessagePack in a transferred `ArrayBuffer`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::engine::MemoryBytes;
use stepscope_core::stats::TensorStats;
use stepscope_core::{Error, Experiment, StepMetrics};

use crate::model::checkpoints::CheckpointReport;
use crate::model::runner::{Command, Outcome, Race};
use crate::model::views::Snapshot;

/// How a run starts: the experiment, or an autosaved checkpoint of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Start {
    pub experiment: Experiment,
    /// A checkpoint file to continue (the autosaved run), else fresh.
    #[serde(with = "super::bytes::option")]
    pub checkpoint: Option<Vec<u8>>,
    pub csv: Option<Arc<String>>,
    /// The page's `?fused=off` keeps the GPU on the phased kernels.
    pub fused_allowed: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    Start(Box<Start>),
    /// Start creating the GPU device (in a task of its own: training goes
    /// on meanwhile); `Status::gpu` says when it is there.
    StartGpu,
    Handle(Box<Command>),
    Calibrate,
    Race,
    SwitchEngine(bool),
    /// One frame of training: `single`, exactly one step; else the CPU
    /// engine steps for `budget_ms`.
    TrainFrame {
        single: bool,
        budget_ms: f64,
    },
    /// Work on the views for about `budget_ms` (all of them when `whole`).
    Snapshot {
        budget_ms: f64,
        whole: bool,
    },
    LayerStats,
    /// An automatic checkpoint: awaited whole, or begun and finished in
    /// the background (its report comes in a later `Status`).
    Checkpoint {
        background: bool,
    },
    RecoverDevice,
    /// Nothing but the status.
    Status,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Answer {
    Done(Result<(), Error>),
    Handled(Result<Option<Outcome>, Error>),
    Race(Result<Race, Error>),
    Switched(Result<Option<String>, Error>),
    /// A frame's steps, and the ms spent awaiting the GPU within it.
    Trained(Result<Vec<StepMetrics>, Error>, f64),
    /// The views when done (None: still being computed), and the ms
    /// spent awaiting the GPU.
    Snapshot(Result<Option<Arc<Snapshot>>, Error>, f64),
    LayerStats(Result<Vec<[TensorStats; 4]>, Error>),
    /// A synchronous checkpoint's report; None when it went to the
    /// background (or one was already running there).
    Checkpoint(Option<Result<CheckpointReport, Error>>),
    Recovered(Result<String, Error>),
    /// The engine's side failed (the worker panicked or could not be
    /// reached); the message says how.
    Failed(String),
}

/// The training loop's state after a request.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Status {
    pub started: bool,
    pub step: u64,
    pub memory: MemoryBytes,
    pub experiment: Option<Experiment>,
    pub on_gpu: bool,
    pub runs_fused: bool,
    pub has_gpu_context: bool,
    pub gpu_lost: bool,
    pub steps_per_log: Option<usize>,
    /// The step of the newest automatic checkpoint.
    pub last_checkpoint: u64,
    pub snapshot_cost_ms: f64,
    /// The GPU device, once its creation finished: its adapter, or why
    /// there is none.
    pub gpu: Option<Result<String, String>>,
    /// Background checkpoints finished since the last reply.
    pub checkpoints: Vec<Result<CheckpointReport, Error>>,
    pub checkpoint_in_flight: bool,
    /// Bytes of the WebAssembly memory on the engine's side.
    pub wasm_memory_bytes: f64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    pub answer: Answer,
    pub status: Status,
}

pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    rmp_serde::to_vec_named(value).expect("the protocol's messages always serialize")
}

pub fn decode<T: for<'de> Deserialize<'de>>(bytes: &[u8]) -> Result<T, String> {
    rmp_serde::from_slice(bytes).map_err(|e| format!("a message between the page and its worker did not decode: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepscope_core::engine::{PhaseReport, StepPhase};
    use stepscope_core::trainer::conformance::training_matrix;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de> + std::fmt::Debug>(value: &T) {
        let back: T = decode(&encode(value)).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{value:?}"));
    }

    /// Every experiment of the training matrix (each optimizer, loss,
    /// schedule, clipping and regularization: internally tagged enums and
    /// optional fields) crosses to the worker and back unchanged, as do
    /// the replies' metrics, errors, views and reports.
    #[test]
    fn bytes_cross_as_bin_and_errors_keep_their_kind() {
        let file: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let restore = Request::Handle(Box::new(Command::RestoreCheckpoint(Arc::new(file.clone()))));
        let encoded = encode(&restore);
        assert!(encoded.len() < file.len() + 100, "a file crosses as its bytes: {} bytes", encoded.len());
        round_trip(&restore);
        let saved = Answer::Handled(Ok(Some(Outcome::Checkpoint(file.clone(), 4))));
        assert!(encode(&saved).len() < file.len() + 100);
        round_trip(&saved);
        round_trip(&Answer::Handled(Ok(Some(Outcome::File("stepscope-train.csv".into(), file)))));
        let e = training_matrix().remove(0).1;
        round_trip(&Request::Start(Box::new(Start {
            experiment: e,
            checkpoint: None,
            csv: None,
            fused_allowed: true,
        })));
        let refused = Error::Checkpoint("truncated".into()).context("The checkpoint was not loaded");
        let back: Answer = decode(&encode(&Answer::Handled(Err(refused.clone())))).unwrap();
        let Answer::Handled(Err(back)) = back else { panic!("{back:?}") };
        assert_eq!(back, refused);
        assert_eq!(back.cause(), &Error::Checkpoint("truncated".into()));
    }

    #[test]
    fn messages_cross_unchanged() {
        for (_, e) in training_matrix() {
            round_trip(&Request::Start(Box::new(Start {
                experiment: e.clone(),
                checkpoint: Some(vec![0, 1, 255]),
                csv: Some(Arc::new("x1,y\n1,0\n".into())),
                fused_allowed: false,
            })));
            round_trip(&Request::Handle(Box::new(Command::Apply(e.clone()))));
            let status = Status { experiment: Some(e), started: true, step: 7, ..Status::default() };
            round_trip(&Reply { answer: Answer::Done(Ok(())), status });
        }
        let metrics = StepMetrics {
            step: 3,
            loss: 0.25,
            grad_norm: 1.5,
            lr: 0.01,
            clipped: true,
            phases: Default::default(),
            timing: stepscope_core::engine::Timing::Cpu,
            gpu_ms: Some(0.5),
        };
        round_trip(&Answer::Trained(Ok(vec![metrics.clone()]), 2.0));
        round_trip(&Answer::Trained(Err(Error::NonFinite("layer 1, backward".into())), 0.0));
        let snapshot = Snapshot {
            step: 9,
            boundary: Some(vec![0.5; 4]),
            neurons: vec![vec![vec![-1.0, 1.0]]],
            ..Default::default()
        };
        round_trip(&Answer::Snapshot(Ok(Some(Arc::new(snapshot))), 1.0));
        round_trip(&Answer::Snapshot(Ok(None), 0.0));
        round_trip(&Request::Snapshot { budget_ms: 10.0, whole: false });
        let report = PhaseReport {
            phase: StepPhase::Optimizer,
            step: 3,
            micro_batches: 2,
            loss: None,
            metrics: Some(metrics),
            layers: Vec::new(),
        };
        round_trip(&Answer::Handled(Ok(Some(Outcome::Phase(Box::new(report))))));
        round_trip(&Answer::Checkpoint(Some(Ok(CheckpointReport {
            step: 100,
            bytes: 2048,
            background: true,
            loop_ms: 0.1,
            total_ms: 3.0,
            stored: Err("quota".into()),
        }))));
    }
}
