//! The race's trainers, stepped side by side within the runner's frame.
//!
//! Round-robin per frame: every lane trains in every frame, and the lanes
//! stay level. On the CPU engine they take one step each in turn until the
//! frame's budget is spent, stepping in parts as the runner's own loop
//! does; on the GPU every lane's submit of the same K steps is queued
//! before any is awaited, so the device works through all of them while
//! the worker waits once. A lane is the core's `Trainer` fed exactly
//! as a lone run's, so its numbers are the lone run's.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::data::Dataset;
use stepscope_core::engine::Evaluation;
use stepscope_core::gpu::GpuContext;
use stepscope_core::trainer::Backend;
use stepscope_core::{Error, Experiment, StepMetrics, TrainState, Trainer};
use web_time::Instant;

use super::{lane_state, RaceSpec};
use crate::model::runs::downsample;

/// Steps of a lane's curve sent per frame, at most (a small network takes
/// thousands of CPU steps a frame; the chart needs far fewer).
const POINTS_PER_FRAME: usize = 48;
/// Least time between a lane's full-set evaluations (its test loss and
/// accuracy), in ms.
const EVALUATION_MS: f64 = 250.0;
/// Wall time all lanes' GPU submits of a frame aim for together.
const GPU_FRAME_MS: f64 = 30.0;

struct Lane {
    label: String,
    trainer: Trainer,
    /// Steps since the last report: (step, loss, gradient norm).
    points: Vec<(u64, f32, f32)>,
    last_loss: Option<f32>,
    evaluated_at: Option<Instant>,
    evaluated_step: Option<u64>,
    /// An evaluation not yet reported: step, train, test.
    evaluation: Option<(u64, Option<Evaluation>, Option<Evaluation>)>,
    /// Why the lane stopped early (a NaN), when it did.
    error: Option<String>,
    steps_per_submit: usize,
}

impl Lane {
    fn done(&self, target: Option<u64>) -> bool {
        self.error.is_some() || target.is_some_and(|t| self.trainer.step_count() >= t && !self.trainer.mid_step())
    }

    /// Steps left before the target (at least 1 when there is none).
    fn left(&self, target: Option<u64>) -> usize {
        target.map_or(usize::MAX, |t| t.saturating_sub(self.trainer.step_count()) as usize)
    }

    fn record(&mut self, metrics: &[StepMetrics]) {
        self.points.extend(metrics.iter().map(|m| (m.step, m.loss, m.grad_norm)));
        if let Some(m) = metrics.last() {
            self.last_loss = Some(m.loss);
        }
    }

    /// A lane's NaN stops that lane; any other error the race.
    fn stop_on_nan(&mut self, result: Result<(), Error>) -> Result<(), Error> {
        match result {
            Err(Error::NonFinite(why)) => {
                self.error = Some(format!("stopped at step {}: {why}", self.trainer.step_count() + 1));
                Ok(())
            }
            other => other,
        }
    }
}

/// One lane as the page draws it after a frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneReport {
    pub label: String,
    pub experiment: Experiment,
    pub step: u64,
    /// New steps since the last report, thinned: (step, loss, gradient norm).
    pub points: Vec<(u64, f32, f32)>,
    /// The last step's mini-batch loss, exactly.
    pub last_loss: Option<f32>,
    /// A full-set evaluation since the last report: step, train, test.
    pub evaluation: Option<(u64, Option<Evaluation>, Option<Evaluation>)>,
    pub done: bool,
    pub error: Option<String>,
}

/// The race after a frame.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaceReport {
    pub spec: RaceSpec,
    pub lanes: Vec<LaneReport>,
    pub on_gpu: bool,
    /// The first report of a race begun (or reset) in this frame: the page
    /// drops what it drew of an earlier one.
    pub started: bool,
    /// The race is over (all lanes done, or ended): the page keeps its runs.
    pub ended: bool,
    /// Why the race stopped, when an error ended it.
    pub error: Option<String>,
}

pub struct RaceLanes {
    spec: RaceSpec,
    lanes: Vec<Lane>,
    started: bool,
}

impl RaceLanes {
    /// The lanes of `spec` on `base`, on the GPU of `gpu` or the CPU, all
    /// from `base`'s initial weights. Refused whole, with a message.
    pub async fn new(
        spec: RaceSpec,
        base: &Experiment,
        data: &Dataset,
        gpu: Option<Arc<GpuContext>>,
        fused_allowed: bool,
    ) -> Result<RaceLanes, Error> {
        let variants = spec.variants(base).map_err(Error::Experiment)?;
        let fresh = TrainState::fresh(base);
        let mut lanes = Vec::with_capacity(variants.len());
        for (label, e) in variants {
            // A batch-size lane uses the same data: only the batches differ.
            let mut trainer = Trainer::new(lane_state(&fresh, &e), data.clone(), gpu.clone())?;
            trainer.allow_fused(fused_allowed);
            // The GPU path a lone run of this experiment would take.
            trainer.calibrate().await?;
            lanes.push(Lane {
                label,
                trainer,
                points: Vec::new(),
                last_loss: None,
                evaluated_at: None,
                evaluated_step: None,
                evaluation: None,
                error: None,
                steps_per_submit: 1,
            });
        }
        Ok(RaceLanes { spec, lanes, started: true })
    }

    pub fn spec(&self) -> &RaceSpec {
        &self.spec
    }

    pub fn on_gpu(&self) -> bool {
        self.lanes.first().is_some_and(|l| l.trainer.backend() == Backend::Gpu)
    }

    /// The GPU device the lanes are on, if any.
    pub fn gpu_context(&self) -> Option<Arc<GpuContext>> {
        self.lanes.first().and_then(|l| l.trainer.gpu_context().cloned())
    }

    pub fn finished(&self) -> bool {
        self.lanes.iter().all(|l| l.done(self.spec.steps))
    }

    /// Trains every lane for one frame (`single`: one step each); returns
    /// the ms spent awaiting the GPU.
    pub async fn train_frame(&mut self, single: bool, budget_ms: f64, yield_after_ms: f64) -> Result<f64, Error> {
        let target = self.spec.steps;
        if self.on_gpu() {
            return self.train_gpu(single, target).await;
        }
        // Rounds of one step for each lane that is behind or level, until
        // the budget is spent: the lanes stay within a step of each other
        // whatever each step costs (a batch of 128 against one of 8).
        let started = Instant::now();
        let elapsed = || started.elapsed().as_secs_f64() * 1e3;
        let mut metrics: Vec<Vec<StepMetrics>> = vec![Vec::new(); self.lanes.len()];
        let mut result = Ok(());
        let lowest = |lanes: &[Lane]| lanes.iter().filter(|l| !l.done(target)).map(|l| l.trainer.step_count()).min();
        'frame: while let Some(level) = lowest(&self.lanes) {
            for (lane, taken) in self.lanes.iter_mut().zip(&mut metrics) {
                if lane.done(target) || lane.trainer.step_count() > level {
                    continue;
                }
                // One whole step, in parts; a long one ends the frame
                // part-way and goes on next frame.
                loop {
                    match lane.trainer.step_part() {
                        Ok(Some(m)) => {
                            taken.push(m);
                            break;
                        }
                        Ok(None) if !single && elapsed() >= yield_after_ms => break 'frame,
                        Ok(None) => {}
                        Err(Error::NonFinite(why)) => {
                            lane.error = Some(format!("stopped at step {}: {why}", lane.trainer.step_count() + 1));
                            break;
                        }
                        Err(err) => {
                            result = Err(err);
                            break 'frame;
                        }
                    }
                }
            }
            let steps: usize = metrics.iter().map(Vec::len).sum();
            if single || elapsed() >= budget_ms || steps >= 10_000 {
                break;
            }
        }
        for (lane, taken) in self.lanes.iter_mut().zip(&metrics) {
            lane.record(taken);
        }
        result?;
        self.evaluate(false).await;
        Ok(0.0)
    }

    /// GPU: every lane's submit first, then each awaited.
    async fn train_gpu(&mut self, single: bool, target: Option<u64>) -> Result<f64, Error> {
        let n = self.lanes.len() as f64;
        // The same steps for every lane (the fewest any lane's share of
        // the frame allows), so that they stay level.
        let active = self.lanes.iter().filter(|l| !l.done(target));
        let k =
            if single { 1 } else { active.map(|l| l.steps_per_submit.min(l.left(target))).min().unwrap_or(1).max(1) };
        let mut submitted = Vec::new();
        for (i, lane) in self.lanes.iter_mut().enumerate().filter(|(_, l)| !l.done(target)) {
            let k = k.min(lane.left(target)).max(1);
            let result = lane.trainer.submit(k);
            lane.stop_on_nan(result)?;
            submitted.push((i, k));
        }
        let wait = Instant::now();
        for (i, k) in submitted {
            let lane = &mut self.lanes[i];
            let started = Instant::now();
            let result = match lane.trainer.collect().await {
                Ok(metrics) => {
                    lane.record(&metrics);
                    Ok(())
                }
                Err(err) => Err(err),
            };
            lane.stop_on_nan(result)?;
            if !single {
                let max = lane.trainer.max_steps_per_submit();
                lane.steps_per_submit = match lane.trainer.submit_cost() {
                    Some(cost) => cost.steps_for(GPU_FRAME_MS / n, max),
                    None => {
                        let took = started.elapsed().as_secs_f64() * 1e3;
                        let scale = (GPU_FRAME_MS / n / took.max(0.1)).clamp(0.5, 2.0);
                        ((k as f64 * scale).round() as usize).clamp(1, max)
                    }
                };
            }
        }
        let waited = wait.elapsed().as_secs_f64() * 1e3;
        self.evaluate(false).await;
        Ok(waited)
    }

    /// Full-set evaluations of the lanes due (every `EVALUATION_MS`, and at
    /// a lane's end), or of all lanes (`all`).
    async fn evaluate(&mut self, all: bool) {
        let target = self.spec.steps;
        for lane in &mut self.lanes {
            let step = lane.trainer.step_count();
            let fresh = lane.evaluated_step == Some(step);
            let due = lane.evaluated_at.is_none_or(|t| t.elapsed().as_secs_f64() * 1e3 >= EVALUATION_MS);
            if fresh || lane.trainer.mid_step() || !(all || due || lane.done(target)) {
                continue;
            }
            lane.evaluated_at = Some(Instant::now());
            lane.evaluated_step = Some(step);
            let data = lane.trainer.data();
            // A transformer's over the views' fixed windows (its whole
            // text would take seconds a lane).
            let (train_rows, test_rows) = match lane.trainer.experiment().gpt() {
                Some(_) => crate::model::views::gpt::eval_windows(data),
                None => (data.train.clone(), data.test.clone()),
            };
            let train = lane.trainer.evaluate(&train_rows).await.ok().flatten();
            let test = lane.trainer.evaluate(&test_rows).await.ok().flatten();
            lane.evaluation = Some((step, train, test));
        }
    }

    /// What the page draws now; takes the steps and evaluations reported.
    pub fn report(&mut self, ended: bool) -> RaceReport {
        let target = self.spec.steps;
        let lanes = self
            .lanes
            .iter_mut()
            .map(|lane| LaneReport {
                label: lane.label.clone(),
                experiment: lane.trainer.experiment().clone(),
                step: lane.trainer.step_count(),
                points: downsample(&std::mem::take(&mut lane.points), POINTS_PER_FRAME),
                last_loss: lane.last_loss,
                // An evaluation is sent once.
                evaluation: lane.evaluation.take(),
                done: lane.done(target),
                error: lane.error.clone(),
            })
            .collect();
        let started = std::mem::take(&mut self.started);
        RaceReport { spec: self.spec.clone(), lanes, on_gpu: self.on_gpu(), started, ended, error: None }
    }

    /// The last report of a race being ended: every lane evaluated at the
    /// step it reached.
    pub async fn final_report(&mut self) -> RaceReport {
        for lane in &mut self.lanes {
            // A step begun in parts is finished, so the lane ends on a whole step.
            if let Ok(Some(m)) = lane.trainer.finish_partial_step().await {
                lane.record(&[m]);
            }
        }
        self.evaluate(true).await;
        self.report(true)
    }
}
