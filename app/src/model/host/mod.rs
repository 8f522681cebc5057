//! Where the engine runs. The page's training loop talks to a `Host`; the
//! engine and everything that touches it (the `Runner`: stepping, views,
//! statistics, checkpoints, the engine race, GPU errors) live behind it:
//!
//! - in a dedicated Web Worker (`Host::start` on the page), so that a long
//!   step never blocks the main thread, which only draws;
//! - or, where the worker's files are not there (the browser tests mount
//!   the page without them) or a worker cannot start, in the page itself,
//!   answering the same requests through the same `Server`.
//!
//! Each request is answered with the loop's `Status`, which the host keeps:
//! the page reads step counts, memory and the engine in use from it
//! without asking.

mod client;
pub mod loaders;
pub mod protocol;
pub mod ranks;
mod server;
pub mod worker;

use std::cell::Cell;

use stepscope_core::engine::MemoryBytes;
use stepscope_core::{Error, Experiment};
use web_time::Instant;

use crate::model::checkpoints::CheckpointReport;
use crate::model::clock::ms_since;
use crate::model::runner::{
    FramePlan, FrameReport, Race, PAGE_TRAIN_BUDGET_MS, PAGE_VIEWS_BUDGET_MS, WORKER_TRAIN_BUDGET_MS,
    WORKER_VIEWS_BUDGET_MS,
};
use protocol::{Answer, Reply, Request, Start, Status};
pub use server::webgpu_available;

thread_local! {
    static USE_WORKER: Cell<bool> = const { Cell::new(false) };
    static WORKER_MEMORY: Cell<f64> = const { Cell::new(0.0) };
}

/// The training worker's WebAssembly memory as of its last reply (0
/// without a worker).
pub fn worker_memory_bytes() -> f64 {
    WORKER_MEMORY.with(Cell::get)
}

/// Fetches `name` from the folder the page is served from, in the page or
/// in a worker (a blob, whose script sets `STEPSCOPE_BASE` to the page's
/// folder: relative addresses mean nothing there).
async fn fetch_beside(name: &str) -> Result<Vec<u8>, String> {
    use wasm_bindgen::JsCast;
    use wasm_bindgen_futures::JsFuture;
    let global = js_sys::global();
    let get = |from: &wasm_bindgen::JsValue, key: &str| {
        js_sys::Reflect::get(from, &key.into()).unwrap_or(wasm_bindgen::JsValue::UNDEFINED)
    };
    let fetch = get(&global, "fetch").dyn_into::<js_sys::Function>().map_err(|_| "no fetch here")?;
    let url = match get(&global, "STEPSCOPE_BASE").as_string() {
        Some(base) => format!("{base}{name}"),
        None => name.to_string(),
    };
    let promise = fetch
        .call1(&global, &url.into())
        .map_err(|e| format!("{e:?}"))?
        .dyn_into::<js_sys::Promise>()
        .map_err(|_| "fetch gave no promise")?;
    let response = JsFuture::from(promise).await.map_err(|e| format!("{e:?}"))?;
    if get(&response, "ok").as_bool() != Some(true) {
        return Err(format!("{name}: status {}", get(&response, "status").as_f64().unwrap_or(0.0)));
    }
    let read = get(&response, "arrayBuffer").dyn_into::<js_sys::Function>().map_err(|_| "no arrayBuffer")?;
    let promise =
        read.call0(&response).map_err(|e| format!("{e:?}"))?.dyn_into::<js_sys::Promise>().map_err(|_| "no promise")?;
    let buffer = JsFuture::from(promise).await.map_err(|e| format!("{e:?}"))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Fetches `tinyshakespeare.txt` from beside the page and makes it the
/// built-in text of this module (`stepscope_core::data::set_shakespeare`),
/// unless it has it already.
pub async fn fetch_shakespeare() -> Result<(), String> {
    if stepscope_core::data::shakespeare().is_some() {
        return Ok(());
    }
    let bytes: &'static [u8] = Box::leak(fetch_beside("tinyshakespeare.txt").await?.into_boxed_slice());
    if stepscope_core::data::set_shakespeare(bytes) {
        Ok(())
    } else {
        Err("the file fetched is not Tiny Shakespeare".into())
    }
}

/// Fetches MNIST (`mnist_5k.csv.gz`, served beside the page and not built
/// into any module) and gives it to the core, checked against its digest,
/// unless this module has it already: on first use, by the side that
/// loads the data.
pub async fn fetch_mnist() -> Result<(), String> {
    use stepscope_core::data::{mnist_file, set_mnist, MNIST_FILE};
    if mnist_file().is_some() {
        return Ok(());
    }
    let bytes: &'static [u8] = Box::leak(fetch_beside(MNIST_FILE).await?.into_boxed_slice());
    set_mnist(bytes).map_err(|e| e.to_string())
}

/// Called by the page's entry point before mounting: train in the worker.
pub fn use_worker() {
    USE_WORKER.with(|w| w.set(true));
}

enum Link {
    Local(Box<server::Server>),
    Worker(client::Client),
}

pub struct Host {
    link: Link,
    status: Status,
    /// Background checkpoints finished, not yet taken by the page.
    finished: Vec<Result<CheckpointReport, Error>>,
    /// Why the worker is not used, when it is not (shown as a notice).
    pub fallback: Option<String>,
}

impl Host {
    /// Starts the training loop, in the worker when the page asked for one
    /// (`use_worker`) and it starts, else in the page.
    pub async fn start(start: Start) -> Result<Host, Error> {
        let (link, fallback): (Link, Option<String>) = if USE_WORKER.with(Cell::get) {
            match client::Client::spawn().await {
                Ok(client) => (Link::Worker(client), None),
                Err(why) => (
                    Link::Local(Box::default()),
                    Some(format!(
                        "Training runs on the page's main thread: the training worker did not start ({why})."
                    )),
                ),
            }
        } else {
            (Link::Local(Box::default()), None)
        };
        if matches!(link, Link::Local(_)) {
            // Training on the page's own thread: the built-in text comes
            // from the file beside the page (the page's module does not
            // carry it; the worker's does). Without it a transformer on
            // Tiny Shakespeare is refused by name, and the rest trains.
            if let Err(why) = fetch_shakespeare().await {
                web_sys::console::warn_1(&format!("Tiny Shakespeare was not fetched: {why}").into());
            }
        }
        let mut host = Host { link, status: Status::default(), finished: Vec::new(), fallback };
        match host.call(Request::Start(Box::new(start))).await.0 {
            Answer::Done(result) => result.map(|()| host),
            other => Err(unexpected(other)),
        }
    }

    /// Whether the engine runs in the worker.
    pub fn in_worker(&self) -> bool {
        matches!(self.link, Link::Worker(_))
    }

    /// Sends `request`; returns the answer and the ms of main-thread work
    /// it cost the page beyond waiting (decoding a worker's reply).
    async fn call(&mut self, request: Request) -> (Answer, f64) {
        let (reply, page_ms): (Reply, f64) = match &mut self.link {
            Link::Local(server) => {
                let started = Instant::now();
                let reply = server.serve(request).await;
                (reply, started.elapsed().as_secs_f64() * 1e3)
            }
            Link::Worker(client) => client.call(&request).await,
        };
        if !matches!(reply.answer, Answer::Failed(_)) {
            let mut status = reply.status;
            if self.in_worker() {
                WORKER_MEMORY.with(|m| m.set(status.wasm_memory_bytes));
            }
            self.finished.append(&mut status.checkpoints);
            self.status = status;
        }
        (reply.answer, page_ms)
    }

    pub fn status(&self) -> &Status {
        &self.status
    }

    pub fn step_count(&self) -> u64 {
        self.status.step
    }

    pub fn memory(&self) -> MemoryBytes {
        self.status.memory
    }

    pub fn experiment(&self) -> Option<&Experiment> {
        self.status.experiment.as_ref()
    }

    pub fn on_gpu(&self) -> bool {
        self.status.on_gpu
    }

    pub fn runs_fused(&self) -> bool {
        self.status.runs_fused
    }

    pub fn has_gpu_context(&self) -> bool {
        self.status.has_gpu_context
    }

    pub fn gpu_lost(&self) -> bool {
        self.status.gpu_lost
    }

    pub fn steps_per_log(&self) -> Option<usize> {
        self.status.steps_per_log
    }

    /// Background checkpoints finished since the last call.
    pub fn take_finished_checkpoints(&mut self) -> Vec<Result<CheckpointReport, Error>> {
        std::mem::take(&mut self.finished)
    }

    /// Asks for nothing but the status (e.g. whether the GPU arrived).
    pub async fn poll(&mut self) -> Result<(), Error> {
        match self.call(Request::Status).await.0 {
            Answer::Done(result) => result,
            other => Err(unexpected(other)),
        }
    }

    pub async fn start_gpu(&mut self) -> Result<(), Error> {
        match self.call(Request::StartGpu).await.0 {
            Answer::Done(result) => result,
            other => Err(unexpected(other)),
        }
    }

    pub async fn calibrate(&mut self) -> Result<(), Error> {
        match self.call(Request::Calibrate).await.0 {
            Answer::Done(result) => result,
            other => Err(unexpected(other)),
        }
    }

    pub async fn race(&mut self, ranks: usize) -> Result<Race, Error> {
        match self.call(Request::Race(ranks)).await.0 {
            Answer::Race(result) => result,
            other => Err(unexpected(other)),
        }
    }

    pub async fn switch_engine(&mut self, to_gpu: bool) -> Result<Option<String>, Error> {
        match self.call(Request::SwitchEngine(to_gpu)).await.0 {
            Answer::Switched(result) => result,
            other => Err(unexpected(other)),
        }
    }

    /// One frame of the loop on the engine's side (`Runner::frame`): the
    /// report, and the ms the page was free meanwhile (all of it but the
    /// decoding when the worker did the frame; the GPU waits when the page
    /// did).
    pub async fn frame(&mut self, mut plan: FramePlan) -> (FrameReport, f64) {
        let started = Instant::now();
        let worker = self.in_worker();
        plan.budget_ms = if worker { WORKER_TRAIN_BUDGET_MS } else { PAGE_TRAIN_BUDGET_MS };
        plan.views_budget_ms = if worker { WORKER_VIEWS_BUDGET_MS } else { PAGE_VIEWS_BUDGET_MS };
        let (answer, page_ms) = self.call(Request::Frame(Box::new(plan))).await;
        match answer {
            Answer::Frame(mut report) => {
                let free_ms = if worker { ms_since(started) - page_ms } else { report.gpu_wait_ms };
                if worker {
                    report.messaging_ms = (ms_since(started) - report.frame_ms).max(0.0);
                }
                (*report, free_ms)
            }
            // The engine's side failed: as a training error, which pauses.
            other => (FrameReport { trained: Some(Err(unexpected(other))), ..FrameReport::default() }, 0.0),
        }
    }

    pub async fn recover_device(&mut self) -> Result<String, Error> {
        match self.call(Request::RecoverDevice).await.0 {
            Answer::Recovered(result) => result,
            other => Err(unexpected(other)),
        }
    }
}

/// The engine's side failed, or answered what was not asked: as the core's
/// error, not a GPU error (which the page would try to recover from), not
/// a NaN.
fn unexpected(answer: Answer) -> Error {
    match answer {
        Answer::Failed(message) => Error::Other(message),
        other => Error::Other(format!("the training loop gave an unexpected answer ({other:?})")),
    }
}
