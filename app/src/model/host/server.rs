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

use super::protocol::{Answer, LoaderStatus, RankStatus, Reply, Request, Start, Status};
use crate::model::runner::{CsvData, Runner};

type Slot<T> = Rc<RefCell<Option<T>>>;

#[derive(Default)]
pub struct Server {
    runner: Option<Runner>,
    /// Filled by the task creating the GPU device.
    arriving: Slot<Result<Arc<GpuContext>, String>>,
    gpu_started: bool,
    gpu: Option<Result<String, String>>,
    /// The ranks last set up (or tried): for which experiment and how many,
    /// and why fewer than asked.
    ranks_tried: Option<(stepscope_core::Experiment, usize)>,
    ranks: RankStatus,
    /// Why a rank worker was dropped, until ranks are set up again.
    rank_dropped: Option<String>,
    /// The loader workers last set up (or tried): for which run and which
    /// batches (`loaders_key`), and why none or fewer than asked.
    loaders_tried: Option<String>,
    loaders: LoaderStatus,
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
        // MNIST is fetched on first use, before the request that loads it;
        // where it does not arrive, the refusal says why.
        let mut not_fetched = None;
        if stepscope_core::data::mnist_file().is_none() && wants_mnist(&request) {
            not_fetched = super::fetch_mnist().await.err();
        }
        if let Request::Frame(plan) = &request {
            self.sync_ranks(plan.ranks).await;
            self.sync_loaders().await;
            if let Some(runner) = self.runner.as_mut() {
                self.ranks.straggler = plan.straggler > 0 && runner.set_straggler(plan.straggler);
            }
        }
        // The race measures the CPU engine on the ranks the run will use.
        if let Request::Race(ranks) = &request {
            self.sync_ranks(*ranks).await;
        }
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
        if !matches!(request, Request::Frame(_) | Request::Status) {
            runner.stop_ahead();
        }
        match request {
            Request::Start(_) | Request::StartGpu => unreachable!("answered above"),
            Request::Calibrate => Answer::Done(runner.calibrate().await),
            Request::Race(_) => Answer::Race(runner.race().await),
            Request::SwitchEngine(to_gpu) => Answer::Switched(runner.switch_engine(to_gpu).await),
            Request::Frame(plan) => {
                let mut report = runner.frame(*plan).await;
                if let Some(why) = not_fetched {
                    for outcome in &mut report.outcomes {
                        if let Ok(Some(crate::model::runner::Outcome::Refused(message, _))) = outcome {
                            *message = format!("{message}. The file did not arrive: {why}");
                        }
                    }
                }
                Answer::Frame(Box::new(report))
            }
            Request::RecoverDevice => Answer::Recovered(runner.recover_device().await),
            Request::Status => Answer::Done(Ok(())),
        }
    }

    /// Trains one step ahead of the page's next request, where the last
    /// frame allows it (`runner::ahead`): false when there is nothing to do.
    pub async fn train_ahead(&mut self) -> bool {
        match self.runner.as_mut() {
            Some(runner) => runner.train_ahead().await,
            None => false,
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

    /// Rank workers for the run as asked (`host::ranks`): as many as the
    /// run's shards allow (rank 0 is this side), started again when the
    /// run's shard work changed; none on the GPU, where the page is not
    /// isolated, or on the page's own thread, each with its reason.
    async fn sync_ranks(&mut self, asked: usize) {
        let Some(runner) = self.runner.as_mut() else { return };
        let e = runner.experiment().clone();
        let asked = asked.max(1);
        let mut reason = None;
        let mut target = asked.min(e.shards);
        if asked > 1 {
            if runner.on_gpu() {
                reason = Some("the GPU engine is one device: ranks share the CPU engine's steps".to_string());
                target = 1;
            } else if e.shards == 1 {
                reason = Some(
                    "this run's batch is one shard: the experiment's \"shards\" sets how many ranks can share a step"
                        .to_string(),
                );
            } else if asked > e.shards {
                reason = Some(format!("this run's batch has {} shards: one rank each at most", e.shards));
            }
            if target > 1 {
                if let Err(why) = super::ranks::ranks_possible() {
                    reason = Some(why);
                    target = 1;
                }
            }
        }
        let same = self
            .ranks_tried
            .as_ref()
            .is_some_and(|(tried, n)| *n == target && stepscope_core::trainer::same_shard_work(tried, &e));
        let attached = runner.ranks_used();
        if !same && (target > 1 || attached > 1) {
            self.ranks_tried = Some((e.clone(), target));
            self.rank_dropped = None;
            runner.set_remote_ranks(None);
            if target > 1 {
                let (input_width, target_width) = runner.row_widths();
                let base = super::client::Client::base().unwrap_or_default();
                match super::ranks::PageRanks::spawn(&base, target - 1, &e, input_width, target_width).await {
                    Ok(ranks) => runner.set_remote_ranks(Some(Box::new(ranks))),
                    Err(why) => reason = Some(why),
                }
            }
        } else if !same {
            self.ranks_tried = Some((e.clone(), target));
        }
        self.ranks.reason = reason.or_else(|| self.rank_dropped.clone());
        self.ranks.asked = asked;
    }

    /// Loader workers as the run's `data.num_workers` asks (`host::loaders`),
    /// started again when the run changed how its batches are made; none
    /// on the GPU engine (it gathers its rows on the device) or for a
    /// transformer (its windows cost nothing to make), each with its reason.
    async fn sync_loaders(&mut self) {
        let Some(runner) = self.runner.as_mut() else { return };
        let e = runner.experiment().clone();
        let asked = e.data.num_workers();
        let mut reason = None;
        if asked > 0 && runner.on_gpu() {
            reason = Some("the GPU engine gathers its rows on the device: loader workers serve the CPU engine".into());
        } else if asked > 0 && e.gpt().is_some() {
            reason = Some("a transformer's windows are read, not made: the loop serves them".into());
        }
        let wanted = if reason.is_some() { 0 } else { asked };
        // Once per run and way of making its batches: loaders that failed
        // to start, or were dropped, are not tried again every frame.
        let key = format!("{}|{}|{}|{wanted}", runner.run_id(), e.seed, e.batch_size)
            + &serde_json::to_string(&e.data).unwrap_or_default();
        if self.loaders_tried.as_ref() == Some(&key) {
            self.loaders.asked = asked;
            return;
        }
        self.loaders_tried = Some(key);
        runner.set_loaders(None);
        if wanted > 0 {
            match (runner.data_position(), super::loaders::worker_base()) {
                (Some(position), Some(base)) => {
                    let table = runner.training_table();
                    match super::loaders::PageLoaders::spawn(&base, wanted, &e, table, &position).await {
                        Ok(loaders) => runner.set_loaders(Some(Box::new(loaders))),
                        Err(why) => reason = Some(why),
                    }
                }
                _ => reason = Some("the loader workers' files could not be found".into()),
            }
        }
        self.loaders.asked = asked;
        self.loaders.reason = reason;
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

    fn status(&mut self) -> Status {
        let mut status = Status { gpu: self.gpu.clone(), wasm_memory_bytes: wasm_memory_bytes(), ..Status::default() };
        if let Some(r) = &mut self.runner {
            self.ranks.in_use = r.ranks_used();
            self.ranks.last = r.rank_times();
            if let Some(notice) = r.take_rank_notice() {
                self.ranks.reason = Some(notice.clone());
                self.rank_dropped = Some(notice.clone());
                self.ranks.notice = Some(notice);
            }
            let (in_use, make_ms, dropped) = r.loader_status();
            if let Some(why) = dropped {
                self.loaders.reason = Some(why);
            }
            status.loaders = LoaderStatus { in_use, make_ms, ..self.loaders.clone() };
            let notice = self.ranks.notice.take();
            status.ranks = RankStatus { notice, ..self.ranks.clone() };
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

/// Whether `request` may load MNIST: a start, a reset or an edit of an
/// experiment on it, or a checkpoint that names it.
fn wants_mnist(request: &Request) -> bool {
    use crate::model::runner::Command;
    use stepscope_core::experiment::DataSource;
    let on_mnist = |e: &stepscope_core::Experiment| e.data.source == DataSource::Mnist;
    let names_it = |bytes: &[u8]| bytes.windows(7).any(|w| w == b"\"mnist\"");
    match request {
        Request::Start(start) => on_mnist(&start.experiment) || start.checkpoint.as_deref().is_some_and(names_it),
        Request::Frame(plan) => plan.commands.iter().any(|c| match c {
            Command::Reset(e) | Command::Apply(e) => on_mnist(e),
            Command::RestoreCheckpoint(bytes) => names_it(bytes),
            _ => false,
        }),
        _ => false,
    }
}
