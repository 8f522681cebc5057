//! The page's ranks (ARCHITECTURE.md, "Ranks: the same bits on any number
//! of cores"): the training worker is rank 0; ranks 1.. are rank workers it
//! starts itself (the same `stepscope-worker` script, told its part by a
//! first message), each a `ShardServer` on its own replica of the model.
//! They meet in one SharedArrayBuffer: the step's parameters and each
//! micro-batch's rows go in, each rank's shards' gradients and results come
//! out, and `Atomics.wait`/`notify` on its control words start and finish
//! each micro-batch (both ends are workers, where blocking is allowed).
//! The engine sums the shards in shard order (`engine::cpu` ranks), so the
//! losses are those of one worker, bit for bit. A rank worker that does not
//! answer within `STALL_MS` is named and dropped; its shards run on.

use js_sys::{Atomics, Float32Array, Float64Array, Int32Array, Object, Reflect, SharedArrayBuffer};
use stepscope_core::engine::{RemoteRanks, ShardResult, ShardServer};
use stepscope_core::Experiment;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::client::Client;

/// Rank workers at most (a rank is a whole shard's work: more than this
/// many would each get too little of the page's networks to pay for the
/// all-reduce).
pub const MAX_RANK_WORKERS: usize = 15;
/// A rank worker that has not finished its shards after this long is
/// dropped (its shards then run on the other ranks).
pub const STALL_MS: f64 = 20_000.0;

// Control words (Int32 at the buffer's start).
const GEN: u32 = 0;
const DONE: u32 = 1;
const STOP: u32 = 2;
const PARAMS: u32 = 3;
const STEP: u32 = 4;
/// The straggler lesson: the slot (plus one; 0 none) that repeats its work,
/// and how many extra times.
const SLOW: u32 = 5;
const SLOW_EXTRA: u32 = 6;
/// Per rank worker: first shard, one past its last, the generation it
/// finished last.
const fn slot(i: usize) -> u32 {
    8 + 3 * i as u32
}
const CONTROL_WORDS: usize = 8 + 3 * MAX_RANK_WORKERS + 1;

/// Where each part lies in the shared buffer, in bytes and floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SharedLayout {
    pub params: usize,
    pub inputs: usize,
    pub targets: usize,
    pub shards: usize,
}

/// f64 words: each rank worker's finish time, then the start time.
const TIMES: usize = MAX_RANK_WORKERS + 1;
const RESULT_FLOATS: usize = ShardResult::FLOATS;

impl SharedLayout {
    fn times_byte(&self) -> usize {
        (4 * CONTROL_WORDS).div_ceil(8) * 8
    }
    fn floats_byte(&self) -> usize {
        self.times_byte() + 8 * TIMES
    }
    /// Float offsets in the f32 region.
    fn params_at(&self) -> usize {
        0
    }
    fn inputs_at(&self) -> usize {
        self.params
    }
    fn targets_at(&self) -> usize {
        self.inputs_at() + self.inputs
    }
    fn grads_at(&self) -> usize {
        self.targets_at() + self.targets
    }
    fn results_at(&self) -> usize {
        self.grads_at() + self.shards * self.params
    }
    fn floats(&self) -> usize {
        self.results_at() + self.shards * RESULT_FLOATS
    }
    pub fn bytes(&self) -> usize {
        self.floats_byte() + 4 * self.floats()
    }
}

/// The buffer's views, the same at both ends.
struct Views {
    buffer: SharedArrayBuffer,
    control: Int32Array,
    times: Float64Array,
    floats: Float32Array,
    layout: SharedLayout,
}

impl Views {
    fn new(buffer: SharedArrayBuffer, layout: SharedLayout) -> Views {
        let control = Int32Array::new_with_byte_offset_and_length(&buffer, 0, CONTROL_WORDS as u32);
        let times = Float64Array::new_with_byte_offset_and_length(&buffer, layout.times_byte() as u32, TIMES as u32);
        let floats =
            Float32Array::new_with_byte_offset_and_length(&buffer, layout.floats_byte() as u32, layout.floats() as u32);
        Views { buffer, control, times, floats, layout }
    }

    fn part(&self, at: usize, len: usize) -> Float32Array {
        self.floats.subarray(at as u32, (at + len) as u32)
    }

    fn load(&self, word: u32) -> i32 {
        Atomics::load(&self.control, word).unwrap_or(0)
    }

    fn store(&self, word: u32, value: i32) {
        let _ = Atomics::store(&self.control, word, value);
    }
}

/// Wall-clock milliseconds comparable between workers (each one's
/// `performance.now()` counts from its own origin).
fn now_ms() -> f64 {
    let performance = Reflect::get(&js_sys::global(), &"performance".into()).ok();
    let performance = performance.and_then(|p| p.dyn_into::<web_sys::Performance>().ok());
    performance.map_or_else(js_sys::Date::now, |p| p.time_origin() + p.now())
}

/// Whether this side may block on `Atomics.wait` and share memory: a
/// worker of a cross-origin-isolated page. Else why not.
pub fn ranks_possible() -> Result<(), String> {
    let global = js_sys::global();
    if global.dyn_ref::<web_sys::DedicatedWorkerGlobalScope>().is_none() {
        return Err("training runs on the page's own thread, which may not wait for other workers".into());
    }
    let isolated = Reflect::get(&global, &"crossOriginIsolated".into()).ok().and_then(|v| v.as_bool());
    if isolated != Some(true) {
        return Err("the page is not cross-origin isolated (its host sends no COOP/COEP headers, and this browser ran no service worker to add them), so its workers cannot share memory".into());
    }
    Ok(())
}

/// Rank 0's end: the rank workers and the buffer they share.
pub struct PageRanks {
    clients: Vec<Client>,
    /// Each rank worker's slot (its words and finish time), in rank order.
    slots: Vec<usize>,
    views: Views,
    params_version: i32,
    started_at: f64,
}

impl PageRanks {
    /// Starts `count` rank workers for `e`'s shards (rows of
    /// `input_width` and `target_width` floats), each told its slot.
    pub async fn spawn(
        base: &str,
        count: usize,
        e: &Experiment,
        input_width: usize,
        target_width: usize,
    ) -> Result<PageRanks, String> {
        ranks_possible()?;
        let count = count.min(MAX_RANK_WORKERS);
        let parameters = stepscope_core::model::Layout::new(e).parameter_count;
        let layout = SharedLayout {
            params: parameters,
            inputs: e.batch_size * input_width,
            targets: e.batch_size * target_width,
            shards: e.shards,
        };
        let bytes =
            u32::try_from(layout.bytes()).map_err(|_| "the ranks' shared buffer would pass 4 GiB".to_string())?;
        let buffer = SharedArrayBuffer::new(bytes);
        let views = Views::new(buffer, layout);
        let experiment = serde_json::to_string(e).map_err(|err| err.to_string())?;
        let mut clients = Vec::with_capacity(count);
        for i in 0..count {
            let client =
                Client::spawn_at(base).await.map_err(|why| format!("rank worker {} did not start: {why}", i + 1))?;
            let init = Object::new();
            let part = Object::new();
            let set = |o: &Object, k: &str, v: &JsValue| Reflect::set(o, &k.into(), v).map(drop);
            set(&part, "buffer", &views.buffer).map_err(|_| "the rank's message could not be made")?;
            set(&part, "experiment", &experiment.as_str().into())
                .map_err(|_| "the rank's message could not be made")?;
            set(&part, "slot", &(i as u32).into()).map_err(|_| "the rank's message could not be made")?;
            set(&part, "input_width", &(input_width as u32).into())
                .map_err(|_| "the rank's message could not be made")?;
            set(&part, "target_width", &(target_width as u32).into())
                .map_err(|_| "the rank's message could not be made")?;
            set(&init, RANK_MESSAGE, &part).map_err(|_| "the rank's message could not be made")?;
            client.answer(&init).await.map_err(|why| format!("rank worker {} did not take its part: {why}", i + 1))?;
            clients.push(client);
        }
        Ok(PageRanks { clients, slots: (0..count).collect(), views, params_version: 0, started_at: 0.0 })
    }
}

impl Drop for PageRanks {
    fn drop(&mut self) {
        self.views.store(STOP, 1);
        let _ = Atomics::add(&self.views.control, GEN, 1);
        let _ = Atomics::notify(&self.views.control, GEN);
        // The clients terminate their workers as they drop.
    }
}

impl RemoteRanks for PageRanks {
    fn count(&self) -> usize {
        self.slots.len()
    }

    fn start(
        &mut self,
        params: &[f32],
        new_params: bool,
        inputs: &[f32],
        targets: &[f32],
        step: u64,
        assignment: &[(usize, usize)],
    ) {
        let v = &self.views;
        let l = v.layout;
        if new_params {
            v.part(l.params_at(), l.params).copy_from(params);
            self.params_version = self.params_version.wrapping_add(1);
            v.store(PARAMS, self.params_version);
        }
        v.part(l.inputs_at(), inputs.len()).copy_from(inputs);
        v.part(l.targets_at(), targets.len()).copy_from(targets);
        for (&s, &(first, end)) in self.slots.iter().zip(assignment) {
            v.store(slot(s), first as i32);
            v.store(slot(s) + 1, end as i32);
        }
        v.store(STEP, step as i32);
        v.store(DONE, 0);
        self.started_at = now_ms();
        let _ = Atomics::add(&v.control, GEN, 1);
        let _ = Atomics::notify(&v.control, GEN);
    }

    fn finish(
        &mut self,
        grads: &mut [f32],
        results: &mut [ShardResult],
        assignment: &[(usize, usize)],
    ) -> Vec<Result<f64, String>> {
        let v = &self.views;
        let l = v.layout;
        let generation = v.load(GEN);
        let deadline = now_ms() + STALL_MS;
        loop {
            let done = v.load(DONE);
            let left = deadline - now_ms();
            if done as usize >= self.slots.len() || left <= 0.0 {
                break;
            }
            let _ = Atomics::wait_with_timeout(&v.control, DONE, done, left);
        }
        let base = assignment.first().map_or(0, |a| a.0);
        let p = l.params;
        self.slots
            .iter()
            .zip(assignment)
            .map(|(&s, &(first, end))| {
                if v.load(slot(s) + 2) != generation {
                    return Err(format!("rank worker {} did not answer within {:.0} s", s + 1, STALL_MS / 1e3));
                }
                v.part(l.grads_at() + first * p, (end - first) * p)
                    .copy_to(&mut grads[(first - base) * p..(end - base) * p]);
                let mut raw = vec![0.0f32; (end - first) * RESULT_FLOATS];
                v.part(l.results_at() + first * RESULT_FLOATS, raw.len()).copy_to(&mut raw);
                for (r, out) in raw.chunks_exact(RESULT_FLOATS).zip(&mut results[first - base..end - base]) {
                    *out = ShardResult::from_floats(r);
                }
                Ok(v.times.get_index(s as u32) - self.started_at)
            })
            .collect()
    }

    fn set_extra_work(&mut self, rank: usize, extra: u32) {
        let slot = self.slots.get(rank).map_or(0, |s| s + 1);
        self.views.store(SLOW_EXTRA, extra as i32);
        self.views.store(SLOW, if extra == 0 { 0 } else { slot as i32 });
    }

    fn drop_ranks(&mut self, dropped: &[usize]) {
        for &i in dropped.iter().rev() {
            self.slots.remove(i);
            // Dropping the client terminates its worker, stalled or not.
            drop(self.clients.remove(i));
        }
    }
}

/// The key of the first message that makes a worker a rank worker.
pub const RANK_MESSAGE: &str = "stepscope_rank";

/// A rank worker's part, when `message` is one (`RANK_MESSAGE`).
pub fn rank_part(message: &JsValue) -> Option<JsValue> {
    Reflect::get(message, &RANK_MESSAGE.into()).ok().filter(|v| v.is_object())
}

/// A rank worker's life after its part arrived: answers "ranked" through
/// `reply`, then computes its shards of each micro-batch until told to
/// stop. Blocks the worker (it has nothing else to do).
pub fn serve_rank(part: &JsValue, reply: impl Fn(&JsValue)) {
    let get = |k: &str| Reflect::get(part, &k.into()).unwrap_or(JsValue::UNDEFINED);
    let Some(buffer) = get("buffer").dyn_into::<SharedArrayBuffer>().ok() else {
        reply(&"error: the rank's part has no shared buffer".into());
        return;
    };
    let experiment = get("experiment").as_string().unwrap_or_default();
    let slot_index = get("slot").as_f64().unwrap_or(0.0) as usize;
    let input_width = get("input_width").as_f64().unwrap_or(0.0) as usize;
    let target_width = get("target_width").as_f64().unwrap_or(0.0) as usize;
    let e = match Experiment::from_json(&experiment) {
        Ok(e) => e,
        Err(err) => {
            reply(&format!("error: {err}").into());
            return;
        }
    };
    let mut server = match ShardServer::new(&e) {
        Ok(s) => s,
        Err(err) => {
            reply(&format!("error: {err}").into());
            return;
        }
    };
    let p = server.parameter_count();
    let layout = SharedLayout {
        params: p,
        inputs: e.batch_size * input_width,
        targets: e.batch_size * target_width,
        shards: e.shards,
    };
    let v = Views::new(buffer, layout);
    let mut params = vec![0.0f32; p];
    let mut inputs = vec![0.0f32; layout.inputs];
    let mut targets = vec![0.0f32; layout.targets];
    let mut grads = vec![0.0f32; e.shards * p];
    let mut params_version = 0;
    let mut seen = v.load(GEN);
    reply(&"ranked".into());
    loop {
        let _ = Atomics::wait(&v.control, GEN, seen);
        let generation = v.load(GEN);
        if v.load(STOP) != 0 {
            return;
        }
        if generation == seen {
            continue;
        }
        seen = generation;
        let at = slot(slot_index);
        let (first, end) = (v.load(at) as usize, v.load(at + 1) as usize);
        if first >= end || end > e.shards {
            continue;
        }
        let version = v.load(PARAMS);
        if version != params_version {
            v.part(layout.params_at(), p).copy_to(&mut params);
            params_version = version;
        }
        v.part(layout.inputs_at(), layout.inputs).copy_to(&mut inputs);
        v.part(layout.targets_at(), layout.targets).copy_to(&mut targets);
        let step = v.load(STEP) as u64;
        let mine = &mut grads[..(end - first) * p];
        let mut results = server.compute(&params, &inputs, &targets, first, end, step, mine);
        // The straggler lesson: the same work again, really done.
        if v.load(SLOW) == slot_index as i32 + 1 {
            for _ in 0..v.load(SLOW_EXTRA).clamp(0, 8) {
                let again = server.compute(&params, &inputs, &targets, first, end, step, mine);
                for (r, a) in results.iter_mut().zip(again) {
                    r.forward_ms += a.forward_ms;
                    r.backward_ms += a.backward_ms;
                }
            }
        }
        v.part(layout.grads_at() + first * p, mine.len()).copy_from(mine);
        let raw: Vec<f32> = results.iter().flat_map(ShardResult::to_floats).collect();
        v.part(layout.results_at() + first * RESULT_FLOATS, raw.len()).copy_from(&raw);
        v.times.set_index(slot_index as u32, now_ms());
        v.store(at + 2, generation);
        let _ = Atomics::add(&v.control, DONE, 1);
        let _ = Atomics::notify(&v.control, DONE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_buffer_holds_every_part_apart() {
        let l = SharedLayout { params: 1000, inputs: 16 * 64, targets: 16 * 64, shards: 4 };
        assert_eq!(l.times_byte() % 8, 0);
        assert!(l.times_byte() >= 4 * CONTROL_WORDS);
        assert!(slot(MAX_RANK_WORKERS - 1) + 2 < CONTROL_WORDS as u32);
        assert_eq!(l.grads_at(), 1000 + 2 * 1024);
        assert_eq!(l.results_at(), l.grads_at() + 4000);
        assert_eq!(l.bytes(), l.floats_byte() + 4 * (l.results_at() + 20));
    }
}
