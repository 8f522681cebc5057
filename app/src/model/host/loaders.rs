//! The page's loader workers (ARCHITECTURE.md, "A data loader that does
//! real work"): as PyTorch's `DataLoader(num_workers=W, prefetch_factor=P)`,
//! W workers (the same `stepscope-worker` script, told their part by a
//! first message) each hold the training rows and make micro-batches,
//! augmented as the experiment says (`data::BatchMaker`), P each ahead of
//! the training loop, micro-batch j of the run by worker j mod W. The loop
//! feeds them to the engine (`Trainer::feed`), which takes a batch only
//! where it holds the rows it would serve itself: the bits are the
//! experiment's, however many loaders there are. The time the loop waits
//! for its batch is the step's data time.
//!
//! A loader that does not answer within `LOADER_STALL_MS` is named, the
//! loaders are dropped, and the loop makes its batches itself.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use js_sys::{Array, Float32Array, Object, Reflect};
use stepscope_core::data::{BatchMaker, DataPosition, MadeBatch, Table};
use stepscope_core::trainer::Trainer;
use stepscope_core::Experiment;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::client::{Client, Next, SharedInbox};

/// The key of the first message that makes a worker a loader worker.
pub const LOADER_MESSAGE: &str = "stepscope_loader";
/// A loader silent this long while the loop waits is dropped.
pub const LOADER_STALL_MS: f64 = 20_000.0;

/// What the loaders' batches depend on: the experiment's seed, batch size
/// and data (its augmentation and loader settings included), and the
/// training rows (an edit of anything else keeps them).
#[derive(Clone, Debug, PartialEq)]
struct Given {
    batches: String,
    rows: usize,
}

impl Given {
    fn of(e: &Experiment, rows: usize) -> Given {
        let data = serde_json::to_string(&e.data).unwrap_or_default();
        Given { batches: format!("{}|{}|{data}", e.seed, e.batch_size), rows }
    }
}

/// The training worker's end: the loader workers and what is asked of them.
pub struct PageLoaders {
    clients: Vec<Client>,
    given: Given,
    /// Requests of an older generation (before a jump of the data
    /// position) are answered and dropped.
    generation: u32,
    batch: u64,
    prefetch: u64,
    /// The counter of micro-batch 0 of this generation (assignment base)
    /// and where the next request starts.
    base: u64,
    next_request: u64,
    /// Requested and not yet received.
    pending: BTreeSet<u64>,
    /// Milliseconds the loaders took per batch (mean of the last ones).
    pub make_ms: f64,
}

fn set(o: &Object, k: &str, v: &JsValue) -> Result<(), String> {
    Reflect::set(o, &k.into(), v).map(drop).map_err(|_| "the loader's message could not be made".to_string())
}

fn get(o: &JsValue, k: &str) -> JsValue {
    Reflect::get(o, &k.into()).unwrap_or(JsValue::UNDEFINED)
}

/// The page's folder, where the worker's files are (from a worker: as it
/// was told; on the page: its own address).
pub fn worker_base() -> Option<String> {
    if let Some(base) = Client::base() {
        return Some(base);
    }
    let href = web_sys::window()?.location().href().ok()?;
    web_sys::Url::new_with_base(".", &href).ok().map(|u| u.href())
}

impl PageLoaders {
    /// Starts `count` loader workers for `e`'s batches over `table`, from
    /// `position`.
    pub async fn spawn(
        base: &str,
        count: usize,
        e: &Experiment,
        table: &Table,
        position: &DataPosition,
    ) -> Result<PageLoaders, String> {
        let given = Given::of(e, table.rows());
        let experiment = serde_json::to_string(e).map_err(|err| err.to_string())?;
        let mut clients = Vec::with_capacity(count);
        for i in 0..count {
            let client =
                Client::spawn_at(base).await.map_err(|why| format!("loader worker {} did not start: {why}", i + 1))?;
            let init = init_message(&experiment, table, position, 0)?;
            client
                .answer(&init)
                .await
                .map_err(|why| format!("loader worker {} did not take its part: {why}", i + 1))?;
            clients.push(client);
        }
        Ok(PageLoaders {
            clients,
            given,
            generation: 0,
            batch: e.batch_size as u64,
            prefetch: e.data.prefetch_factor() as u64,
            base: position.rows_consumed,
            next_request: position.rows_consumed,
            pending: BTreeSet::new(),
            make_ms: 0.0,
        })
    }

    pub fn count(&self) -> usize {
        self.clients.len()
    }

    /// Whether these loaders serve `e` over `rows` training rows as they
    /// are (else they are started again).
    pub fn serve(&self, e: &Experiment, rows: usize) -> bool {
        self.given == Given::of(e, rows) && self.clients.len() == e.data.num_workers()
    }

    /// Starts a new generation at `position` (the run jumped: a restore, a
    /// rollback, an edit that rebuilt it): every loader moves its maker there.
    fn restart(&mut self, position: &DataPosition) -> Result<(), String> {
        self.generation = self.generation.wrapping_add(1);
        let text = serde_json::to_string(position).map_err(|e| e.to_string())?;
        for client in &self.clients {
            let m = Object::new();
            set(&m, "generation", &self.generation.into())?;
            set(&m, "position", &text.as_str().into())?;
            client.post(&m, &Array::new())?;
        }
        (self.base, self.next_request) = (position.rows_consumed, position.rows_consumed);
        self.pending.clear();
        Ok(())
    }

    fn owner(&self, start: u64) -> usize {
        (((start - self.base) / self.batch) % self.clients.len() as u64) as usize
    }

    /// Asks for every micro-batch up to W·P ahead of `k`, and at least the
    /// step's `micro`.
    fn request_ahead(&mut self, k: u64, micro: u64) -> Result<(), String> {
        let end = k + (self.clients.len() as u64 * self.prefetch).max(micro) * self.batch;
        while self.next_request < end {
            let start = self.next_request;
            let m = Object::new();
            set(&m, "generation", &self.generation.into())?;
            set(&m, "start", &(start as f64).into())?;
            self.clients[self.owner(start)].post(&m, &Array::new())?;
            self.pending.insert(start);
            self.next_request += self.batch;
        }
        Ok(())
    }

    /// Takes a loader's message: a batch of this generation goes to the
    /// engine.
    fn take(&mut self, message: &JsValue, trainer: &mut Trainer) -> Result<(), String> {
        if let Some(text) = message.as_string() {
            return Err(text.trim_start_matches("error: ").to_string());
        }
        if get(message, "generation").as_f64() != Some(f64::from(self.generation)) {
            return Ok(());
        }
        let start = get(message, "start").as_f64().unwrap_or(-1.0);
        let (inputs, targets) = (get(message, "inputs"), get(message, "targets"));
        let (Some(inputs), Some(targets)) = (inputs.dyn_ref::<Float32Array>(), targets.dyn_ref::<Float32Array>())
        else {
            return Err("a loader sent a batch without its rows".into());
        };
        let start = start as u64;
        if self.pending.remove(&start) {
            let ms = get(message, "ms").as_f64().unwrap_or(0.0);
            self.make_ms = if self.make_ms == 0.0 { ms } else { 0.9 * self.make_ms + 0.1 * ms };
            trainer.feed(MadeBatch { start, inputs: inputs.to_vec(), targets: targets.to_vec() });
        }
        Ok(())
    }

    /// Before a step: feeds what has come, asks ahead, and waits for the
    /// step's `micro` micro-batches. Returns the ms waited; an error names
    /// a loader that failed or stalled (the loop then makes its batches).
    pub async fn before_step(&mut self, trainer: &mut Trainer, micro: usize) -> Result<f64, String> {
        let Some((k, _)) = trainer.next_batch_fed() else { return Ok(0.0) };
        let behind = k < self.base || !(k - self.base).is_multiple_of(self.batch);
        let missed = k > self.next_request;
        if behind || missed {
            let position = trainer.data_position().ok_or("the run has no data position")?;
            self.restart(&position)?;
        }
        for i in 0..self.clients.len() {
            while let Some(m) = self.clients[i].try_next() {
                self.take(&m, trainer)?;
            }
        }
        self.request_ahead(k, micro as u64)?;
        let started = crate::model::runner::now_ms();
        for m in 0..micro as u64 {
            let start = k + m * self.batch;
            while self.pending.contains(&start) {
                let owner = self.owner(start);
                let left = LOADER_STALL_MS - (crate::model::runner::now_ms() - started);
                let message = match Timed::new(self.clients[owner].next(), left.max(0.0)).await {
                    Some(m) => m,
                    None => return Err(format!("loader worker {} did not answer in {LOADER_STALL_MS} ms", owner + 1)),
                };
                self.take(&message, trainer)?;
            }
        }
        Ok((crate::model::runner::now_ms() - started).max(0.0))
    }
}

/// A message, or None after `ms`.
struct Timed {
    next: Next,
    timer: gloo_timers::future::TimeoutFuture,
}

impl Timed {
    fn new(next: Next, ms: f64) -> Timed {
        Timed { next, timer: gloo_timers::future::TimeoutFuture::new(ms.ceil().clamp(0.0, u32::MAX as f64) as u32) }
    }
}

impl Future for Timed {
    type Output = Option<JsValue>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<JsValue>> {
        if let Poll::Ready(m) = Pin::new(&mut self.next).poll(cx) {
            return Poll::Ready(Some(m));
        }
        match Pin::new(&mut self.timer).poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn init_message(experiment: &str, table: &Table, position: &DataPosition, generation: u32) -> Result<JsValue, String> {
    let part = Object::new();
    set(&part, "experiment", &experiment.into())?;
    set(&part, "position", &serde_json::to_string(position).map_err(|e| e.to_string())?.into())?;
    set(&part, "inputs", &Float32Array::from(table.inputs.as_slice()))?;
    set(&part, "targets", &Float32Array::from(table.targets.as_slice()))?;
    set(&part, "input_width", &(table.input_width as u32).into())?;
    set(&part, "target_width", &(table.target_width as u32).into())?;
    set(&part, "generation", &generation.into())?;
    let init = Object::new();
    set(&init, LOADER_MESSAGE, &part)?;
    Ok(init.into())
}

/// A loader worker's part, when `message` is one (`LOADER_MESSAGE`).
pub fn loader_part(message: &JsValue) -> Option<JsValue> {
    Reflect::get(message, &LOADER_MESSAGE.into()).ok().filter(|v| v.is_object())
}

/// A loader worker's life after its part arrived: answers "loading", then
/// makes each batch asked for, in order, until the page goes away.
pub(super) async fn serve_loader(part: JsValue, inbox: SharedInbox, reply: impl Fn(&JsValue, &Array)) {
    let experiment = get(&part, "experiment").as_string().unwrap_or_default();
    let position = get(&part, "position").as_string().unwrap_or_default();
    let made = (|| -> Result<(Experiment, Table, DataPosition), String> {
        let e = Experiment::from_json(&experiment).map_err(|e| e.to_string())?;
        let position: DataPosition = serde_json::from_str(&position).map_err(|e| e.to_string())?;
        let floats = |k: &str| get(&part, k).dyn_into::<Float32Array>().map(|a| a.to_vec());
        let (Ok(inputs), Ok(targets)) = (floats("inputs"), floats("targets")) else {
            return Err("the loader's part has no rows".into());
        };
        let width = |k: &str| get(&part, k).as_f64().unwrap_or(0.0) as usize;
        let (input_width, target_width) = (width("input_width"), width("target_width"));
        let rows = inputs.len().checked_div(input_width).unwrap_or(0);
        if input_width == 0 || rows * input_width != inputs.len() || rows * target_width != targets.len() {
            return Err("the loader's rows do not fit their widths".into());
        }
        Ok((e, Table { inputs, targets, input_width, target_width }, position))
    })();
    let (e, table, position) = match made {
        Ok(made) => made,
        Err(why) => {
            reply(&format!("error: {why}").into(), &Array::new());
            return;
        }
    };
    let mut generation = get(&part, "generation").as_f64().unwrap_or(0.0) as u32;
    let mut maker = BatchMaker::new(&e, table.rows(), position);
    reply(&"loading".into(), &Array::new());
    loop {
        let message = Next(inbox.clone()).await;
        if let Some(position) = get(&message, "position").as_string() {
            // A new generation: the run's data position jumped.
            if let Ok(position) = serde_json::from_str::<DataPosition>(&position) {
                generation = get(&message, "generation").as_f64().unwrap_or(0.0) as u32;
                maker = BatchMaker::new(&e, table.rows(), position);
            }
            continue;
        }
        if get(&message, "generation").as_f64() != Some(f64::from(generation)) {
            continue;
        }
        let Some(start) = get(&message, "start").as_f64() else { continue };
        let started = crate::model::runner::now_ms();
        let Some(batch) = maker.make(start as u64, &table) else { continue };
        let ms = crate::model::runner::now_ms() - started;
        let out = Object::new();
        let inputs = Float32Array::from(batch.inputs.as_slice());
        let targets = Float32Array::from(batch.targets.as_slice());
        let ok = set(&out, "generation", &generation.into())
            .and(set(&out, "start", &start.into()))
            .and(set(&out, "inputs", &inputs))
            .and(set(&out, "targets", &targets))
            .and(set(&out, "ms", &ms.into()));
        if ok.is_ok() {
            reply(&out.into(), &Array::of2(&inputs.buffer(), &targets.buffer()));
        }
    }
}

impl crate::model::runner::BatchLoaders for PageLoaders {
    fn serves(&self, e: &Experiment, rows: usize) -> bool {
        PageLoaders::serve(self, e, rows)
    }
    fn count(&self) -> usize {
        PageLoaders::count(self)
    }
    fn make_ms(&self) -> f64 {
        self.make_ms
    }
    fn before_step<'a>(
        &'a mut self,
        trainer: &'a mut Trainer,
        micro: usize,
    ) -> Pin<Box<dyn Future<Output = Result<f64, String>> + 'a>> {
        Box::pin(PageLoaders::before_step(self, trainer, micro))
    }
}
