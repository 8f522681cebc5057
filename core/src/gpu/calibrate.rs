//! Picking the faster step path on this adapter by measuring both, as
//! cuDNN's benchmark mode picks convolution algorithms: costs differ by
//! orders of magnitude between adapters (a workgroup barrier takes
//! nanoseconds on a discrete GPU and up to milliseconds on a software
//! rasterizer), so no fixed rule picks well everywhere.
//!
//! A probe engine of the same experiment, from fresh parameters (speed does
//! not depend on the values), runs each path for a short time budget,
//! interleaved; the result is cached per adapter and shape, so a second
//! engine of the same shape costs nothing.

use std::sync::Mutex;

use web_time::Instant;

use super::GpuEngine;
use crate::engine::{StepMetrics, TrainState};
use crate::error::{Error, Result};
use crate::experiment::{Experiment, OptimizerSpec};

/// Steps per second of both paths, measured side by side on one adapter.
#[derive(Clone, Debug, PartialEq)]
pub struct Calibration {
    pub phased_steps_per_s: f64,
    pub fused_steps_per_s: f64,
    /// Whether this came from the cache (measured earlier for this
    /// adapter and shape).
    pub cached: bool,
}

impl Calibration {
    pub fn fused_wins(&self) -> bool {
        self.fused_steps_per_s > self.phased_steps_per_s
    }
}

/// Measured calibrations by adapter and shape.
static CACHE: Mutex<Vec<(String, Calibration)>> = Mutex::new(Vec::new());

/// Time each path runs per round.
const BUDGET_MS: f64 = 40.0;
const ROUNDS: usize = 2;

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
        "{adapter}|{}-{}|B{}x{}|{:?}|{optimizer}|clip={}",
        e.model.inputs,
        units.join("-"),
        e.batch_size,
        e.grad_accumulation,
        e.loss,
        e.clip_grad_norm.is_some()
    )
}

impl GpuEngine {
    /// Measures the phased and the fused path on this adapter (or takes the
    /// cached figures) and sets `use_fused` to the faster. None when the
    /// experiment cannot run fused. Takes about 4 × 40 ms of GPU work the
    /// first time for a shape; awaits the GPU without blocking on the web.
    pub async fn calibrate(&mut self) -> Result<Option<Calibration>> {
        if !self.fused_available() {
            self.use_fused = false;
            return Ok(None);
        }
        let key = shape_key(&self.ctx.describe(), &self.experiment);
        let cached = CACHE.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).cloned();
        if let Some((_, mut calibration)) = cached {
            calibration.cached = true;
            self.use_fused = calibration.fused_wins();
            return Ok(Some(calibration));
        }
        let state = TrainState::fresh(&self.experiment);
        let mut probe = GpuEngine::from_state(self.ctx.clone(), state, self.data().clone())?;
        probe.phase_timing = false;
        let (mut phased, mut fused) = (0.0f64, 0.0f64);
        for _ in 0..ROUNDS {
            probe.use_fused = false;
            phased = phased.max(probe.steps_per_second(BUDGET_MS).await?);
            probe.use_fused = true;
            fused = fused.max(probe.steps_per_second(BUDGET_MS).await?);
        }
        let calibration = Calibration { phased_steps_per_s: phased, fused_steps_per_s: fused, cached: false };
        CACHE.lock().unwrap_or_else(|p| p.into_inner()).push((key, calibration.clone()));
        self.use_fused = calibration.fused_wins();
        Ok(Some(calibration))
    }

    /// Steps per second on the current path: a warm-up step, then submits
    /// of doubling size until `budget_ms` is spent. A probe that diverges
    /// still measures (its later steps run, their updates skipped). Use it
    /// on a probe engine: it trains.
    pub async fn steps_per_second(&mut self, budget_ms: f64) -> Result<f64> {
        self.submit(1)?;
        self.collect_any().await?;
        let started = Instant::now();
        let (mut steps, mut k) = (0usize, 1usize);
        loop {
            self.submit(k)?;
            match self.collect_any().await {
                Ok(_) | Err(Error::NonFinite(_)) => {}
                Err(err) => return Err(err),
            }
            steps += k;
            let seconds = started.elapsed().as_secs_f64();
            if seconds * 1e3 >= budget_ms {
                return Ok(steps as f64 / seconds);
            }
            k = (2 * k).min(self.max_steps_per_submit());
        }
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
