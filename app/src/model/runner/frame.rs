//! One frame of the loop: train to the budget (or, in the lessons, N steps
//! per log), each step waiting for its batches where loader workers make
//! them, then the views and per-layer statistics from the engine.

use std::sync::Arc;

use stepscope_core::engine::profile::{clock_resolution_ms, Burst, PhaseProfile, ProfilePath};
use stepscope_core::model::Layout;
use stepscope_core::stats::TensorStats;
use stepscope_core::trainer::{Backend, PhaseClock};
use stepscope_core::{Error, StepMetrics};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_time::Instant;

use super::profiler::Profiler;
use super::{Runner, GPU_SUBMIT_MS};
use crate::model::clock::ms_since;
use crate::model::views::{draw_diagram, link_blocks, Snapshot, ViewJob};

impl Runner {
    /// Trains for one frame: `single` runs exactly one step. Also returns
    /// the milliseconds spent awaiting the GPU (the page was free then).
    /// On the CPU engine, steps run until `budget_ms` is spent.
    pub async fn train_frame(&mut self, single: bool, budget_ms: f64) -> (Result<Vec<StepMetrics>, Error>, f64) {
        let mut awaited_ms = 0.0;
        let result = self.train_frame_inner(single, budget_ms, &mut awaited_ms).await;
        (result, awaited_ms)
    }

    async fn train_frame_inner(
        &mut self,
        single: bool,
        budget_ms: f64,
        awaited_ms: &mut f64,
    ) -> Result<Vec<StepMetrics>, Error> {
        let started = Instant::now();
        let cpu = self.trainer.backend() == Backend::Cpu;
        if !cpu {
            // A step begun phase by phase is finished before whole steps.
            if let Some(metrics) = self.finish_partial_step().await? {
                if single {
                    return Ok(vec![metrics]);
                }
            }
        }
        // Lessons: a fixed number of steps between logs.
        let cap = if single { 1 } else { self.steps_per_log.unwrap_or(usize::MAX) };
        let trainer = &mut self.trainer;
        if cpu {
            // Step in parts (each micro-batch's forward and backward, then
            // the update; the same bits as whole steps) until the frame's
            // budget is spent at a step boundary, or the lesson's steps per
            // log are done, each step waiting for its batch. A long step
            // ends the frame part-way once it ran `yield_after_ms`, so that
            // Pause and edits wait at most about that long; it goes on from
            // its next part in the next frame.
            let mut out = Vec::new();
            let (every, last) = (self.checkpoint_every, self.last_checkpoint);
            loop {
                if !trainer.mid_step() {
                    // Loader workers make the batches: the step waits for its
                    // own (its data time). Loaders given another run (an
                    // edit this frame) sit out until they are set up again.
                    let rows = trainer.data().train.rows();
                    let micro = trainer.experiment().grad_accumulation;
                    if let Some(loaders) = self.loaders.as_mut().filter(|l| l.serves(trainer.experiment(), rows)) {
                        match loaders.before_step(trainer, micro).await {
                            Ok(waited) => {
                                *awaited_ms += waited;
                                self.loader_wait_ms += waited;
                            }
                            Err(why) => {
                                self.loaders = None;
                                self.loader_notice = Some(format!("{why}: the loop makes its batches itself"));
                            }
                        }
                    }
                }
                let due = if trainer.mid_step() { None } else { self.profiler.cpu_due(trainer.step_count()) };
                let part = if due == Some(true) {
                    let t = Instant::now();
                    trainer.profile_step(&Burst::for_clock()).map(|(m, profile)| {
                        self.profiler.bursts_took(&m, profile, ms_since(t));
                        Some(m)
                    })
                } else {
                    trainer.step_part()
                };
                if part.is_err() {
                    self.loader_wait_ms = 0.0;
                    self.profiler.forget_pending();
                }
                if let Some(mut metrics) = part? {
                    self.profiler.finished(&metrics, clock_resolution_ms(), trainer.experiment().grad_accumulation);
                    metrics.phases.data_ms += std::mem::take(&mut self.loader_wait_ms);
                    out.push(metrics);
                }
                let elapsed = ms_since(started);
                let free = self.steps_per_log.is_none();
                let budget_spent = free && !trainer.mid_step() && elapsed >= budget_ms;
                let long_step = free && !single && trainer.mid_step() && elapsed >= self.yield_after_ms;
                // An automatic checkpoint is taken between steps: a frame of
                // long steps, which would otherwise end part-way through
                // every time, ends at the boundary where one falls due.
                let checkpoint_due =
                    every > 0 && !out.is_empty() && !trainer.mid_step() && trainer.step_count() / every > last / every;
                if out.len() >= cap || budget_spent || long_step || checkpoint_due || out.len() >= 10_000 {
                    return Ok(out);
                }
            }
        }
        let max = trainer.max_steps_per_submit();
        let mut k = if single { 1 } else { self.steps_per_submit.min(cap) };
        if let Some(cap) = self.steps_per_log.filter(|_| !single) {
            k = cap.min(max);
        }
        // A profiled step (by number) is submitted alone; the others stop
        // short of the next one.
        let first = trainer.step_count();
        let schedule = Profiler::schedule();
        let profiled = schedule.profiles(first) && trainer.phase_clock().0 == PhaseClock::GpuTimestamps;
        let requested = k;
        if profiled {
            k = 1;
        } else {
            let next = (first..first + k as u64).find(|&t| schedule.profiles(t)).unwrap_or(first + k as u64);
            k = ((next - first) as usize).max(1);
        }
        if profiled {
            trainer.submit_profiled()?;
        } else {
            trainer.submit(k)?;
        }
        let wait = Instant::now();
        let out = trainer.collect().await?;
        *awaited_ms += ms_since(wait);
        if let (true, Some(m)) = (profiled, out.first()) {
            let (_, r) = trainer.phase_clock();
            let micro = trainer.experiment().grad_accumulation;
            self.profiler.found.push(PhaseProfile::single(m.step, ProfilePath::GpuTimestamps, &m.phases, r, micro));
        }
        // (A submit cut short for a profiled step says nothing of K.)
        if !single && self.steps_per_log.is_none() && k == requested {
            self.steps_per_submit = match trainer.submit_cost() {
                // Calibrated: as many steps as the submit cost allows.
                Some(cost) => cost.steps_for(GPU_SUBMIT_MS, max),
                // Else aim for the budget: scale K by how far off this frame was.
                None => {
                    let scale = (GPU_SUBMIT_MS / ms_since(started).max(0.1)).clamp(0.5, 2.0);
                    ((k as f64 * scale).round() as usize).clamp(1, max)
                }
            };
        }
        Ok(out)
    }

    /// Lesson: log (read back and redraw) every `n` steps exactly, one
    /// submit per log; None: as often as the frame budget allows.
    pub fn set_steps_per_log(&mut self, n: Option<usize>) {
        self.steps_per_log = n.filter(|&n| n > 0);
    }

    pub fn steps_per_log(&self) -> Option<usize> {
        self.steps_per_log
    }

    /// Works on the views for about `budget_ms` (all of them when
    /// `whole`): the views once done, from the engine's parameters at the
    /// step they were begun; None while they are still being computed
    /// (`ViewJob`: a large network's take several calls). Also the
    /// milliseconds spent awaiting the GPU's readback.
    pub async fn views(&mut self, budget_ms: f64, whole: bool) -> (Result<Option<Arc<Snapshot>>, Error>, f64) {
        let mut awaited_ms = 0.0;
        let (e, step) = (self.experiment().clone(), self.step_count());
        if self.view_job.as_ref().is_some_and(|job| !job.is_for(&e, self.data(), step)) {
            self.view_job = None;
        }
        if self.view_job.is_none() {
            let layout = Layout::new(&e);
            let wait = Instant::now();
            let read = self
                .trainer
                .with_tensors(|t| {
                    // A conv net's filters are drawn with their gradients.
                    let conv = layout.layers.iter().any(|l| l.op != stepscope_core::model::LayerOp::Dense);
                    let grads = conv.then(|| t[1].to_vec());
                    let ratios = crate::model::views::gpt::update_ratios(&layout, t);
                    (t[0].to_vec(), link_blocks(&layout, t), ratios, grads)
                })
                .await;
            if self.trainer.backend() == Backend::Gpu {
                awaited_ms = ms_since(wait);
            }
            let (params, links, ratios, grads) = match read {
                Ok(read) => read,
                Err(err) => return (Err(err), awaited_ms),
            };
            self.gpt_views.ratios = ratios;
            let prompt = self.sample_due().then(|| self.sample_prompt()).flatten();
            if prompt.is_some() {
                self.gpt_views.sampled_at = Some(Instant::now());
                self.gpt_views.dirty = false;
            }
            let spec = self.gpt_views.spec.clone();
            match ViewJob::with_gpt(&e, self.data(), step, params, links, spec, prompt) {
                Ok(mut job) => {
                    if let Some(grads) = grads {
                        job.set_gradients(grads);
                    }
                    job.set_maps_row(self.maps_row);
                    self.view_job = Some(job)
                }
                Err(err) => return (Err(err), awaited_ms),
            }
        }
        let Some(job) = self.view_job.as_mut() else { unreachable!("a job was just begun") };
        let data = self.trainer.data();
        let mut done = job.advance(data, if whole { f64::INFINITY } else { budget_ms });
        if let Some(snap) = done.as_mut() {
            // The diagram is drawn here, beside the training, not on the
            // page's thread (`views::diagram`).
            let drawing = Instant::now();
            snap.diagram = draw_diagram(&e, snap, self.link_mode);
            // A sample is written every few seconds; the views between
            // carry the newest one.
            if let Some(views) = snap.gpt.as_mut() {
                views.update_ratios = std::mem::take(&mut self.gpt_views.ratios);
                match &views.sample {
                    Some(sample) => self.gpt_views.last = Some(sample.clone()),
                    None => views.sample = self.gpt_views.last.clone(),
                }
            }
            self.snapshot_cost_ms = job.spent_ms() + ms_since(drawing);
            self.view_job = None;
        }
        (Ok(done.map(Arc::new)), awaited_ms)
    }

    /// Whether a new sample is due: the spec changed, or the last was
    /// written `SAMPLE_EVERY_MS` ago (a transformer only).
    fn sample_due(&self) -> bool {
        self.experiment().gpt().is_some()
            && (self.gpt_views.dirty
                || self.gpt_views.last.is_none()
                || self.gpt_views.sampled_at.is_none_or(|t| ms_since(t) >= SAMPLE_EVERY_MS))
    }

    /// The prompt's tokens (checked when the spec was taken; an empty
    /// prompt starts from the text's first character).
    fn sample_prompt(&self) -> Option<Vec<u32>> {
        let vocabulary = self.data().vocabulary.as_ref()?;
        let tokens = vocabulary.encode(&self.gpt_views.spec.prompt).ok()?;
        if tokens.is_empty() {
            let first = self.data().train.inputs.first().map_or(0, |&x| x as u32);
            return Some(vec![first]);
        }
        Some(tokens)
    }

    /// Takes the person's sample prompt, temperature and attention window,
    /// checked against the run's text (a bad one changes nothing).
    pub fn set_gpt_views(&mut self, spec: crate::model::views::gpt::GptViewSpec) -> Result<(), Error> {
        if let Some(vocabulary) = self.data().vocabulary.as_ref() {
            let windows = if self.data().test.rows() > 0 { self.data().test.rows() } else { self.data().train.rows() };
            crate::model::views::gpt::check_spec(&spec, vocabulary, windows)?;
        }
        if spec != self.gpt_views.spec {
            self.gpt_views.dirty = spec.prompt != self.gpt_views.spec.prompt
                || spec.temperature != self.gpt_views.spec.temperature
                || self.gpt_views.dirty;
            self.gpt_views.spec = spec;
            // The views begun for the old window are begun again.
            self.view_job = None;
        }
        Ok(())
    }

    /// Per layer: statistics of [activations, gradients, weights,
    /// updates] of the last step, from the engine (the GPU's
    /// `tensor_stats` kernel, or its CPU twin on the CPU engine).
    pub async fn layer_stats(&mut self) -> Result<Vec<[TensorStats; 4]>, Error> {
        self.trainer.layer_stats().await
    }
}

/// A transformer's sample is written again this often while it trains.
pub const SAMPLE_EVERY_MS: f64 = 4000.0;

/// The runner's side of a transformer's views: what the person asked for,
/// and the newest sample and when it was begun.
#[derive(Default)]
pub struct GptViewState {
    pub spec: crate::model::views::gpt::GptViewSpec,
    pub dirty: bool,
    pub last: Option<Arc<crate::model::views::gpt::Sample>>,
    pub sampled_at: Option<Instant>,
    /// ‖ΔW‖/‖W‖ of each weight matrix, read with the views' parameters.
    pub ratios: Vec<(String, f32)>,
}

/// The clock in milliseconds (the loader's timeline): `performance.now()`
/// of the page or of the worker the loop runs in.
pub fn now_ms() -> f64 {
    let performance = js_sys::Reflect::get(&js_sys::global(), &"performance".into()).ok();
    performance.and_then(|p| p.dyn_into::<web_sys::Performance>().ok()).map_or_else(js_sys::Date::now, |p| p.now())
}

/// Lets the event loop run (a zero timeout): in the page, drawing; in the
/// worker, the next message.
pub async fn yield_now() {
    gloo_timers::future::TimeoutFuture::new(0).await;
}

/// Resolves at the next animation frame.
pub async fn next_frame() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(w) = web_sys::window() {
            let _ = w.request_animation_frame(&resolve);
        }
    });
    let _ = JsFuture::from(promise).await;
}
