//! What the controls ask of the training loop, and what it answers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use stepscope_core::engine::PhaseReport;
use stepscope_core::Experiment;

use crate::model::race::RaceSpec;

/// What the controls ask of the loop.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Command {
    /// Fresh parameters for this experiment (model, data or seed changed).
    Reset(Experiment),
    /// Continue the run under changed hyperparameters.
    Apply(Experiment),
    /// One optimizer step.
    StepOnce,
    /// What the diagram's links show; the next views are drawn so.
    LinkMode(crate::model::views::LinkMode),
    /// A transformer's sample prompt and temperature, and the window its
    /// attention views read (refused with its reason if the run's text
    /// cannot serve it).
    GptViews(crate::model::views::gpt::GptViewSpec),
    /// The test image a conv net's feature maps are drawn for (its row in
    /// the test set; past the last, the last).
    MapsImage(usize),
    /// A part of an uploaded file's bytes (its name, its whole size, the
    /// part), kept unread until its `ReadCsv`: the page sends a large file
    /// a part a frame, so no one message copies it whole on the page.
    CsvBytes(String, u64, #[serde(with = "crate::model::bytes::vec")] Vec<u8>),
    /// The page could not read the rest of an upload: its parts are
    /// dropped and the run goes on.
    DropCsvBytes,
    /// A reset starts over for good: the autosaved run is forgotten, and
    /// no checkpoint of it still being stored is written afterwards.
    ForgetAutosave,
    /// An uploaded CSV file (its name and its last bytes, after the parts
    /// sent for it, unread): the loop reads it in parts (`csv_job`) and
    /// restarts on the experiment it implies, built on this one.
    ReadCsv(String, #[serde(with = "crate::model::bytes::vec")] Vec<u8>, Experiment),
    /// An uploaded text for the transformer (its name and its last bytes,
    /// after the `CsvBytes` parts sent for it): the run restarts on it,
    /// built on this experiment, or the text is refused with its reason.
    ReadText(String, #[serde(with = "crate::model::bytes::vec")] Vec<u8>, Experiment),
    /// The current run as checkpoint bytes, for a download.
    SaveCheckpoint,
    /// Continue from an uploaded checkpoint (refused whole if bad).
    RestoreCheckpoint(#[serde(with = "crate::model::bytes::arc")] Arc<Vec<u8>>),
    /// Restore the current run into a fresh engine and compare.
    VerifyRestore,
    /// The "forgot to zero the gradients" lesson: false keeps gradients
    /// piling up across steps, as a loop without `optimizer.zero_grad()`.
    ZeroGrad(bool),
    /// Step-by-phase mode: run the next phase of the current step.
    StepPhase,
    /// Back to the newest automatic checkpoint from before this step.
    Rollback(u64),
    /// A PyTorch script that continues this run from its checkpoint.
    ExportPytorch,
    /// The training rows as CSV (for the PyTorch script's `--data`).
    ExportData,
    /// Lesson: log every this many steps exactly (None: as the frame
    /// budget allows).
    LogEvery(Option<usize>),
    /// Lesson: one step with k micro-batches of b against one batch of
    /// k·b, from the current state.
    CheckAccumulation(usize),
    /// Recompute pre-activations in backward instead of storing them.
    ActivationCheckpointing(bool),
    /// Race variants of the run's experiment (`model::race`); they train
    /// instead of the run until the race ends.
    StartRace(RaceSpec),
    /// End the race: its runs are reported, the run goes on.
    EndRace,
    /// A part of a file to open as a run (its index among the files, its
    /// name, the part): kept unread until `OpenRun`. The page sends a part
    /// a frame, so no one message copies a large trace whole on the page.
    RunPart(usize, String, #[serde(with = "crate::model::bytes::vec")] Vec<u8>),
    /// Open the parts sent as a run from outside (metrics logs, traces),
    /// read-only: the training run is not touched.
    OpenRun,
    /// The page could not read a file to open: the parts are dropped.
    DropRunParts,
    /// Test hook: destroy the GPU device in use (a device loss).
    LoseDevice,
    /// Test hook: ask the GPU device in use for a buffer past its limit,
    /// which it refuses with a validation error (a GPU error that is not a
    /// device loss, as an allocation the GPU cannot serve is).
    RefuseGpuWork,
}

/// What a command produced for the page.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Outcome {
    Checkpoint(#[serde(with = "crate::model::bytes::vec")] Vec<u8>, u64),
    Restored(Box<Experiment>, u64),
    Verified(String, bool),
    Phase(Box<PhaseReport>),
    /// Rolled back to the checkpoint of this step (its experiment).
    RolledBack(Box<Experiment>, u64),
    /// A file to download: name and contents.
    File(String, #[serde(with = "crate::model::bytes::vec")] Vec<u8>),
    Accumulation(AccumulationReport),
    /// An uploaded CSV was read whole and the run restarted on it: its
    /// name and the experiment it implied.
    CsvLoaded(String, Box<Experiment>),
    /// A run opened from files (`Command::OpenRun`).
    Opened(Box<crate::model::opened::OpenedView>),
    /// A reset the loop could not make (its data did not load: MNIST not
    /// fetched, say): why, and the experiment of the run it kept training,
    /// which the page shows again.
    Refused(String, Box<Experiment>),
}

/// One step as one batch of k·b rows against k micro-batches of b rows.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AccumulationReport {
    pub step: u64,
    pub k: usize,
    pub micro_batch: usize,
    /// Loss of the step: one batch, accumulated.
    pub loss: (f32, f32),
    /// Largest |θ_one − θ_accumulated| after the step, and largest |θ|.
    pub max_diff: f32,
    pub max_param: f32,
    /// Stored activations: one batch, accumulated.
    pub activation_bytes: (u64, u64),
}

impl AccumulationReport {
    pub fn passed(&self) -> bool {
        self.max_diff <= 1e-5 * self.max_param.max(1.0)
    }
}

pub type Commands = Arc<Mutex<VecDeque<Command>>>;

pub fn push(commands: &Commands, command: Command) {
    commands.lock().unwrap_or_else(|p| p.into_inner()).push_back(command);
}

/// Which engine runs, and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BackendInfo {
    pub gpu: bool,
    /// "WebGPU" or "CPU (WebAssembly)".
    pub name: String,
    /// The GPU adapter, once its device exists.
    pub adapter: String,
    /// Why the GPU is not used, when it cannot be.
    pub fallback_reason: Option<String>,
    /// Both engines measured on this network, when they were.
    pub race: Option<super::Race>,
    /// The engine the user pinned (auto: the faster).
    pub pin: super::Pin,
    /// Whether the GPU engine runs the fused step.
    pub fused: bool,
    /// Whether the choice is made (false while the GPU device is being
    /// created or the engines measured).
    pub settled: bool,
}
