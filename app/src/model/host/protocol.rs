//! What the page asks of the engine's side, and what it answers: one
//! request at a time, each answered with the loop's status. Messages cross
//! to the worker as MessagePack in a transferred `ArrayBuffer`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::engine::MemoryBytes;
use stepscope_core::{Error, Experiment};

use crate::model::checkpoints::CheckpointReport;
#[cfg(test)]
use crate::model::runner::{Command, CsvProgress, Outcome};
use crate::model::runner::{FramePlan, FrameReport, Race};
#[cfg(test)]
use crate::model::views::Snapshot;

/// How a run starts: the experiment, or an autosaved checkpoint of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Start {
    pub experiment: Experiment,
    /// A checkpoint file to continue (the autosaved run), else fresh.
    #[serde(with = "crate::model::bytes::option")]
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
    Calibrate,
    /// The engine race, the CPU engine on the ranks asked for (as many as
    /// the run's shards allow and the page can start).
    Race(usize),
    SwitchEngine(bool),
    /// One frame of the loop (`Runner::frame`): commands, training,
    /// checkpoints and views as due.
    Frame(Box<FramePlan>),
    RecoverDevice,
    /// Nothing but the status.
    Status,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Answer {
    Done(Result<(), Error>),
    Race(Result<Race, Error>),
    Switched(Result<Option<String>, Error>),
    Frame(Box<FrameReport>),
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
    /// The GPU device, once its creation finished: its adapter, or why
    /// there is none.
    pub gpu: Option<Result<String, String>>,
    /// Background checkpoints finished since the last reply.
    pub checkpoints: Vec<Result<CheckpointReport, Error>>,
    pub checkpoint_in_flight: bool,
    /// Bytes of the WebAssembly memory on the engine's side.
    pub wasm_memory_bytes: f64,
    /// Which fresh run trains (`Runner::run_id`), and whether a race is
    /// under way.
    pub run_id: u64,
    pub racing: bool,
    /// The run's ranks (`host::ranks`).
    pub ranks: RankStatus,
    /// The run's loader workers (`host::loaders`).
    pub loaders: LoaderStatus,
}

/// How many loader workers make the run's batches, how long one takes to
/// make a batch, and why none or fewer than asked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LoaderStatus {
    pub in_use: usize,
    pub asked: usize,
    pub make_ms: f64,
    pub reason: Option<String>,
}

/// How many ranks share the run's steps, why not as many as asked, and
/// each one's part of the last step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankStatus {
    pub in_use: usize,
    pub asked: usize,
    pub reason: Option<String>,
    pub last: Vec<stepscope_core::engine::RankTimes>,
    /// A rank dropped since the last reply, and why.
    pub notice: Option<String>,
    /// The straggler lesson is on (the last rank repeats its work).
    pub straggler: bool,
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
    use crate::model::spikes::Verdict;
    use stepscope_core::engine::{PhasePart, PhaseReport, StepPhase};
    use stepscope_core::stats::TensorStats;
    use stepscope_core::trainer::conformance::training_matrix;
    use stepscope_core::StepMetrics;

    fn round_trip<T: Serialize + for<'de> Deserialize<'de> + std::fmt::Debug>(value: &T) {
        let back: T = decode(&encode(value)).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{value:?}"));
    }

    fn frame(commands: Vec<Command>) -> Request {
        Request::Frame(Box::new(FramePlan { commands, running: true, budget_ms: 15.0, ..FramePlan::default() }))
    }

    fn answer(report: FrameReport) -> Answer {
        Answer::Frame(Box::new(report))
    }

    /// Checkpoint files and downloads cross as MessagePack `bin`, and an
    /// error keeps its kind under its context.
    #[test]
    fn bytes_cross_as_bin_and_errors_keep_their_kind() {
        let file: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
        let restore = frame(vec![Command::RestoreCheckpoint(Arc::new(file.clone()))]);
        let encoded = encode(&restore);
        assert!(encoded.len() < file.len() + 300, "a file crosses as its bytes: {} bytes", encoded.len());
        round_trip(&restore);
        let saved = answer(FrameReport {
            outcomes: vec![Ok(Some(Outcome::Checkpoint(file.clone(), 4)))],
            ..FrameReport::default()
        });
        assert!(encode(&saved).len() < file.len() + 300);
        round_trip(&saved);
        round_trip(&answer(FrameReport {
            outcomes: vec![Ok(Some(Outcome::File("stepscope-train.csv".into(), file)))],
            ..FrameReport::default()
        }));
        let e = training_matrix().remove(0).1;
        round_trip(&Request::Start(Box::new(Start {
            experiment: e,
            checkpoint: None,
            csv: None,
            fused_allowed: true,
        })));
        let refused = Error::Checkpoint("truncated".into()).context("The checkpoint was not loaded");
        let sent = answer(FrameReport { outcomes: vec![Err(refused.clone())], ..FrameReport::default() });
        let Answer::Frame(back) = decode(&encode(&sent)).unwrap() else { panic!("not a frame") };
        let Err(back) = &back.outcomes[0] else { panic!("{back:?}") };
        assert_eq!(back, &refused);
        assert_eq!(back.cause(), &Error::Checkpoint("truncated".into()));
    }

    /// Every experiment of the training matrix (each optimizer, loss,
    /// schedule, clipping and regularization: internally tagged enums and
    /// optional fields) crosses to the worker and back unchanged, as do
    /// the frame reports' metrics, errors, verdicts, views and reports.
    #[test]
    fn messages_cross_unchanged() {
        for (_, e) in training_matrix() {
            round_trip(&Request::Start(Box::new(Start {
                experiment: e.clone(),
                checkpoint: Some(vec![0, 1, 255]),
                csv: Some(Arc::new("x1,y\n1,0\n".into())),
                fused_allowed: false,
            })));
            round_trip(&frame(vec![Command::Apply(e.clone()), Command::StepOnce]));
            let status = Status { experiment: Some(e), started: true, step: 7, ..Status::default() };
            round_trip(&Reply { answer: Answer::Done(Ok(())), status });
        }
        let metrics = StepMetrics {
            step: 3,
            loss: 0.25,
            grad_norm: 1.5,
            z_loss: None,
            lr: 0.01,
            clipped: true,
            phases: Default::default(),
            timing: stepscope_core::engine::Timing::Cpu,
            gpu_ms: Some(0.5),
            ranks: Vec::new(),
        };
        let snapshot = Snapshot {
            step: 9,
            grid: 2,
            boundary: Some(vec![0.5; 4]),
            // Thumbnails and links stay on the engine's side; the diagram
            // they are drawn into crosses.
            diagram: Some(crate::model::views::Diagram {
                mode: crate::model::views::LinkMode::Gradient,
                width: 2,
                height: 1,
                rgba: vec![1, 2, 3, 255, 4, 5, 6, 255],
                notes: vec![(1.0, 2.0, "+3 more".into())],
            }),
            ..Default::default()
        };
        let report = PhaseReport {
            phase: StepPhase::Optimizer,
            step: 3,
            micro_batches: 2,
            loss: None,
            metrics: Some(metrics.clone()),
            layers: Vec::new(),
            part: Some(PhasePart {
                name: "block 2 · attention".into(),
                index: 6,
                count: 14,
                next: Some("block 2 · ln_2".into()),
                added: 4,
            }),
        };
        let metrics_phases = metrics.phases;
        round_trip(&answer(FrameReport {
            outcomes: vec![Ok(Some(Outcome::Phase(Box::new(report)))), Ok(None)],
            calibration: Some(Error::Gpu("lost".into())),
            trained: Some(Ok(vec![metrics])),
            verdicts: vec![(3, Verdict::GradJump(2.0, 1.0)), (4, Verdict::LossSpike(1.0, 0.1, 3.0, 1.0))],
            checkpoint: Some(Ok(CheckpointReport {
                step: 100,
                bytes: 2048,
                background: false,
                loop_ms: 0.1,
                total_ms: 3.0,
                stored: Err("quota".into()),
            })),
            checkpoint_ms: 3.0,
            views: Some(Ok(Arc::new(snapshot))),
            maps: Some((
                12,
                crate::model::views::ConvViews {
                    row: 3,
                    input_shape: [1, 2, 2],
                    image: vec![0.0, 0.25, 0.5, 1.0],
                    layers: vec![crate::model::views::ConvLayerView {
                        layer: 0,
                        words: "conv2d 1×1×1".into(),
                        shape: [1, 2, 2],
                        maps: vec![vec![-1.0, 0.5, 0.0, 1.0]],
                        kernel: 1,
                        in_channels: 1,
                        filter_channels: 1,
                        filters: vec![vec![1.0]],
                        gradients: vec![vec![-1.0]],
                    }],
                },
            )),
            layers: Some(Ok((4, vec![[TensorStats::default(); 4]]))),
            logging_ms: 1.5,
            gpu_wait_ms: 2.0,
            race: None,
            csv_progress: Some(CsvProgress {
                name: "mnist.csv".into(),
                receiving: false,
                progress: stepscope_core::data::ReadProgress { bytes: 10, total_bytes: 100, rows: 3 },
            }),
            profiles: vec![stepscope_core::engine::profile::PhaseProfile::single(
                2,
                stepscope_core::engine::profile::ProfilePath::CpuClock,
                &metrics_phases,
                0.005,
                2,
            )],
            profiling_ms: 0.4,
            phase_clock: Some((stepscope_core::trainer::PhaseClock::Clock, 0.005)),
            frame_ms: 12.0,
            train_ms: 9.0,
            ahead_ms: 7.5,
            gpu_passes: vec![stepscope_core::gpu::StepPass {
                step: 3,
                kind: stepscope_core::gpu::PassKind::Backward,
                start_ms: 0.25,
                end_ms: 0.5,
            }],
            op_times: Some(crate::model::op_table::OpStep { step: 3, ..Default::default() }),
            layer_step: None,
            // Set on the page, never sent.
            messaging_ms: 0.0,
        }));
        round_trip(&answer(FrameReport {
            outcomes: vec![Ok(Some(Outcome::CsvLoaded("mnist.csv".into(), Box::new(training_matrix().remove(0).1))))],
            ..FrameReport::default()
        }));
        round_trip(&frame(vec![Command::CsvBytes("d.csv".into(), 9, b"x1,".to_vec())]));
        round_trip(&frame(vec![Command::ReadCsv(
            "d.csv".into(),
            b"x1,y\n1,0\n".to_vec(),
            training_matrix().remove(0).1,
        )]));
        // A run opened from files: its bytes cross as `bin`, its view back.
        let log = b"{\"step\": 1, \"loss\": 0.5, \"forward_ms\": 2.0}\n".to_vec();
        let files = vec![crate::model::opened::RunFile { name: "m.jsonl".into(), bytes: log }];
        round_trip(&frame(vec![Command::RunPart(0, "m.jsonl".into(), files[0].bytes.clone()), Command::OpenRun]));
        let view = crate::model::opened::OpenedView::open(&files).unwrap();
        round_trip(&answer(FrameReport {
            outcomes: vec![Ok(Some(Outcome::Opened(Box::new(view))))],
            ..FrameReport::default()
        }));
        round_trip(&answer(FrameReport {
            trained: Some(Err(Error::NonFinite("layer 1, backward".into()))),
            ..FrameReport::default()
        }));
    }
}
