//! Picking the faster step path on this adapter by measuring both, as
//! cuDNN's benchmark mode picks convolution algorithms: costs differ by
//! orders of magnitude between adapters (a workgroup barrier takes
//! nanoseconds on a discrete GPU and up to milliseconds on a software
//! rasterizer), so no fixed rule picks well everywhere.
//!
//! A probe engine of the same experiment, from fresh parameters (speed does
//! not depend on the values), times a submit of 1 step and one of 8 on each
//! path. Their difference separates a submit's fixed cost (launch,
//! readback, on some adapters a large per-dispatch cost) from the cost per
//! step, which predicts the speed at any K. The result is cached per
//! adapter and shape, so a second engine of the same shape costs nothing.

use std::sync::Mutex;

use web_time::Instant;

use super::choose::MatmulTiming;
use super::cost::SubmitCost;
use super::fused::FusedWidth;
use super::GpuEngine;
use crate::engine::{StepMetrics, TrainState};
use crate::error::{Error, Result};
use crate::experiment::{Experiment, OptimizerSpec};

/// Both paths measured side by side on one adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub phased: SubmitCost,
    /// Every width of the fused step the adapter runs, timed (the kernel
    /// with 64 invocations and with 4), with the steps per submit each
    /// allows; empty where the fused step does not apply.
    pub fused_widths: Vec<(FusedWidth, SubmitCost, usize)>,
    /// Steps per submit the predictions are for (the engine's most).
    pub max_steps: usize,
    /// Whether this came from the cache (measured earlier for this
    /// adapter and shape).
    pub cached: bool,
    /// Both variants of each layer's matmuls, timed, and the one the
    /// phased path runs (measured before the paths, which run with it).
    pub matmuls: Vec<MatmulTiming>,
}

impl Calibration {
    /// The faster fused width at the steps per submit it allows.
    fn kept(&self) -> Option<(FusedWidth, SubmitCost, usize)> {
        self.fused_widths.iter().copied().max_by(|a, b| a.1.steps_per_second(a.2).total_cmp(&b.1.steps_per_second(b.2)))
    }
    /// The fused step's cost at the faster width; None where it does not
    /// apply.
    pub fn fused(&self) -> Option<SubmitCost> {
        self.kept().map(|k| k.1)
    }
    /// That width.
    pub fn fused_width(&self) -> Option<FusedWidth> {
        self.kept().map(|k| k.0)
    }
    pub fn phased_steps_per_s(&self) -> f64 {
        self.phased.steps_per_second(self.max_steps)
    }
    pub fn fused_steps_per_s(&self) -> Option<f64> {
        self.fused().map(|f| f.steps_per_second(self.max_steps))
    }
    pub fn fused_wins(&self) -> bool {
        self.fused_steps_per_s().is_some_and(|f| f > self.phased_steps_per_s())
    }
    /// The faster path's cost and speed.
    pub fn best(&self) -> SubmitCost {
        match self.fused() {
            Some(fused) if self.fused_wins() => fused,
            _ => self.phased,
        }
    }
    pub fn best_steps_per_s(&self) -> f64 {
        self.best().steps_per_second(self.max_steps)
    }
}

/// Measured calibrations by adapter and shape.
static CACHE: Mutex<Vec<(String, Calibration)>> = Mutex::new(Vec::new());

/// Steps of the second timed submit.
const LONG_SUBMIT: usize = 8;

/// What the speed of a step depends on: the adapter, the shapes, the loss
/// and the optimizer's kind.
fn shape_key(adapter: &str, e: &Experiment) -> String {
    let optimizer = match e.optimizer {
        OptimizerSpec::Sgd { momentum, .. } => {
            if momentum != 0.0 {
                "sgd+momentum"
            } else {
                "sgd"
            }
        }
        OptimizerSpec::Adam { .. } | OptimizerSpec::Adamw { .. } => "adam",
        OptimizerSpec::Lamb { .. } => "lamb",
    };
    let units: Vec<String> = e.model.layers.iter().map(|l| l.units.to_string()).collect();
    format!(
        "{adapter}|{}-{}|B{}x{}|{:?}|{optimizer}|clip={}|reg={}",
        e.model.inputs,
        units.join("-"),
        e.batch_size,
        e.grad_accumulation,
        e.loss,
        e.clip_grad_norm.is_some(),
        e.regularization.is_some()
    )
}

impl GpuEngine {
    /// Measures the phased and (where it applies) the fused path on this
    /// adapter, or takes the cached figures, and sets `use_fused` to the
    /// faster at the engine's largest submit. Costs a few steps of each
    /// path the first time for a shape; awaits the GPU without blocking
    /// on the web.
    pub async fn calibrate(&mut self) -> Result<Calibration> {
        let matmuls = self.choose_matmuls().await?;
        self.choose_attention().await?;
        let key = shape_key(&self.ctx.describe(), &self.experiment);
        let cached = CACHE.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).cloned();
        let calibration = match cached {
            Some((_, mut calibration)) => {
                calibration.cached = true;
                calibration
            }
            None => {
                let state = TrainState::fresh(&self.experiment);
                let mut probe = GpuEngine::from_state(self.ctx.clone(), state, self.data().clone())?;
                probe.phase_timing = false;
                probe.set_matmuls(self.matmuls.clone())?;
                if let Some(variant) = self.attention() {
                    probe.set_attention(variant)?;
                }
                let phased = probe.submit_cost().await?;
                let mut fused_widths = Vec::new();
                for width in probe.fused_widths() {
                    probe.use_fused = true;
                    probe.set_fused_width(width);
                    let cost = probe.submit_cost().await?;
                    fused_widths.push((width, cost, probe.max_steps_per_submit()));
                }
                let mut calibration =
                    Calibration { phased, fused_widths, max_steps: self.max_steps_per_submit, cached: false, matmuls };
                // The predictions are for the kept width's steps per submit.
                if let Some((_, _, k)) = calibration.kept() {
                    calibration.max_steps = k;
                }
                CACHE.lock().unwrap_or_else(|p| p.into_inner()).push((key, calibration.clone()));
                calibration
            }
        };
        if let Some(width) = calibration.fused_width() {
            self.set_fused_width(width);
        }
        self.use_fused = calibration.fused_wins();
        self.submit_cost = Some(calibration.best());
        Ok(calibration)
    }

    /// The submit cost on the current path: a warm-up, then the fastest
    /// of two timings each of a 1-step and an 8-step submit. A probe that
    /// diverges still measures (its later steps run, updates skipped).
    async fn submit_cost(&mut self) -> Result<SubmitCost> {
        self.timed_submit(1).await?;
        let long = LONG_SUBMIT.min(self.max_steps_per_submit());
        let (mut one, mut many) = (f64::MAX, f64::MAX);
        for _ in 0..2 {
            one = one.min(self.timed_submit(1).await?);
            many = many.min(self.timed_submit(long).await?);
        }
        let per_step_ms = ((many - one) / (long.max(2) - 1) as f64).max(1e-4);
        Ok(SubmitCost { fixed_ms: (one - per_step_ms).max(0.0), per_step_ms })
    }

    /// Milliseconds of one submit of `k` steps and its readback.
    async fn timed_submit(&mut self, k: usize) -> Result<f64> {
        let started = Instant::now();
        self.submit(k)?;
        match self.collect_any().await {
            Ok(_) | Err(Error::NonFinite(_)) => Ok(started.elapsed().as_secs_f64() * 1e3),
            Err(err) => Err(err),
        }
    }

    /// Dispatches of one step on the phased path (all micro-batches, the
    /// regularization and the optimizer); the fused path takes one per
    /// submit.
    pub fn dispatches_per_step(&self) -> usize {
        let p = &self.plan;
        self.experiment.grad_accumulation * (p.data.len() + p.forward.len() + p.backward.len())
            + p.regularize.len()
            + p.optimizer.len()
    }

    /// Awaits the submits in flight: without blocking on the web, by
    /// waiting for the device natively.
    pub async fn collect_any(&mut self) -> Result<Vec<StepMetrics>> {
        #[cfg(target_arch = "wasm32")]
        return self.collect_async().await;
        #[cfg(not(target_arch = "wasm32"))]
        return self.collect();
    }
}
