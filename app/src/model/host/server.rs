//! The engine's side: owns the training loop's `Runner` and answers the
//! page's requests one at a time. It runs in the training worker, or in
//! the page itself where there is no worker (`Host::local`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use stepscope_core::checkpoint::load_checkpoint;
use stepscope_core::gpu::GpuContext;
use stepscope_core::Error;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;

use super::protocol::{Answer, Reply, Request, Start, Status};
use crate::model::runner::{CsvData, Runner};

type Slot<T> = Rc<RefCell<Option<T>>>;

#[derive(Default)]
pub struct Server {
    runner: Option<Runner>,
    /// Filled by the task creating the GPU device.
    arriving: Slot<Result<Arc<GpuContext>, String>>,
    gpu_started: bool,
    gpu: Option<Result<String, String>>,
}

impl Server {
    pub async fn serve(&mut self, request: Request) -> Reply {
        self.take_gpu();
        let answer = self.answer(request).await;
        self.take_gpu();
        Reply { answer, status: self.status() }
    }

    /// A GPU device that arrived goes to the runner.
    fn take_gpu(&mut self) {
        let Some(runner) = self.runner.as_mut() else { return };
        let Some(arrived) = self.arriving.borrow_mut().take() else { return };
        self.gpu = Some(match arrived {
            Ok(ctx) => {
                let adapter = ctx.describe();
                runner.set_context(ctx);
                Ok(adapter)
            }
            Err(reason) => Err(reason),
        });
    }

    async fn answer(&mut self, request: Request) -> Answer {
        if let Request::Start(start) = request {
            return Answer::Done(self.start(*start));
        }
        if let Request::StartGpu = request {
            self.start_gpu();
            return Answer::Done(Ok(()));
        }
        let Some(runner) = self.runner.as_mut() else {
            return Answer::Failed("the training loop was asked for work before it started".into());
        };
        match request {
            Request::Start(_) | Request::StartGpu => unreachable!("answered above"),
            Request::Calibrate => Answer::Done(runner.calibrate().await),
            Request::Race => Answer::Race(runner.race().await),
            Request::SwitchEngine(to_gpu) => Answer::Switched(runner.switch_engine(to_gpu).await),
            Request::Frame(plan) => Answer::Frame(Box::new(runner.frame(*plan).await)),
            Request::RecoverDevice => Answer::Recovered(runner.recover_device().await),
            Request::Status => Answer::Done(Ok(())),
        }
    }

    fn start(&mut self, start: Start) -> Result<(), Error> {
        // An autosaved run's CSV is read whole here, once.
        let csv = start.csv.clone().map(|text| CsvData::read(text, &start.experiment)).transpose()?;
        let mut runner = match &start.checkpoint {
            Some(bytes) => {
                let state = load_checkpoint(bytes)?;
                Runner::from_state(state, None, csv)?
            }
            None => Runner::new(&start.experiment, None, csv)?,
        };
        runner.set_fused_allowed(start.fused_allowed);
        self.runner = Some(runner);
        Ok(())
    }

    fn start_gpu(&mut self) {
        if self.gpu_started {
            return;
        }
        self.gpu_started = true;
        let slot = self.arriving.clone();
        spawn_local(async move {
            let result = if !webgpu_available() {
                Err("this browser has no WebGPU (navigator.gpu is missing)".to_string())
            } else {
                match GpuContext::new().await {
                    // The engine takes an Arc; the context stays on this thread.
                    #[allow(clippy::arc_with_non_send_sync)]
                    Ok(ctx) => Ok(Arc::new(ctx)),
                    Err(e) => Err(format!("WebGPU is present but unusable: {e}")),
                }
            };
            *slot.borrow_mut() = Some(result);
        });
    }

    fn status(&self) -> Status {
        let mut status = Status { gpu: self.gpu.clone(), wasm_memory_bytes: wasm_memory_bytes(), ..Status::default() };
        if let Some(r) = &self.runner {
            status.checkpoints = r.take_finished();
            status.checkpoint_in_flight = r.checkpoint_in_flight();
            status.started = true;
            status.step = r.step_count();
            status.memory = r.memory();
            status.experiment = Some(r.experiment().clone());
            status.on_gpu = r.on_gpu();
            status.runs_fused = r.runs_fused();
            status.has_gpu_context = r.has_gpu_context();
            status.gpu_lost = r.gpu_lost();
            status.steps_per_log = r.steps_per_log();
            status.last_checkpoint = r.last_checkpoint();
            status.run_id = r.run_id();
            status.racing = r.racing();
        }
        status
    }
}

/// Whether `navigator.gpu` exists, in the page or in the worker.
pub fn webgpu_available() -> bool {
    let navigator = js_sys::Reflect::get(&js_sys::global(), &"navigator".into());
    navigator.and_then(|n| js_sys::Reflect::get(&n, &"gpu".into())).is_ok_and(|g| !g.is_undefined() && !g.is_null())
}

/// Bytes of this side's WebAssembly memory (it only grows).
pub fn wasm_memory_bytes() -> f64 {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map_or(0.0, |m| m.buffer().dyn_into::<js_sys::ArrayBuffer>().map_or(0.0, |b| f64::from(b.byte_length())))
}
