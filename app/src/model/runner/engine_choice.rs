//! The faster engine, automatically: both engines give the same run
//! (within the twin tolerances), so the page may train on whichever is
//! faster for the experiment at hand, and switching changes speed and
//! nothing else. Each is measured briefly on probes of the actual
//! experiment (fresh parameters; speed does not depend on their values),
//! without touching the run and without freezing the page: the CPU probe
//! steps in slices of a few milliseconds between animation frames, the GPU
//! probe is awaited. Results are kept per shape, so going back to a shape
//! costs nothing.

use stepscope_core::data::Dataset;
use stepscope_core::trainer::Backend;
use stepscope_core::{Error, Experiment, Trainer};
use web_time::Instant;

use super::{yield_now, Runner, GPU_SUBMIT_MS};
use crate::model::checkpoints::latest_before;

/// Which engine the user asked for (the URL's `?engine=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pin {
    /// The faster one, measured.
    #[default]
    Auto,
    Cpu,
    Gpu,
}

impl Pin {
    pub fn name(self) -> &'static str {
        match self {
            Pin::Auto => "auto",
            Pin::Cpu => "cpu",
            Pin::Gpu => "gpu",
        }
    }

    pub fn parse(s: &str) -> Option<Pin> {
        match s {
            "auto" => Some(Pin::Auto),
            "cpu" => Some(Pin::Cpu),
            "gpu" => Some(Pin::Gpu),
            _ => None,
        }
    }
}

/// Both engines' speed on one experiment, measured side by side.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Race {
    pub cpu_steps_per_s: f64,
    /// Ranks the CPU engine's probe stepped on (the run's rank workers).
    #[serde(default = "one")]
    pub cpu_ranks: usize,
    pub gpu_steps_per_s: f64,
    /// Invocations in the fused step's workgroup (64 or 4, the width the
    /// calibration measured faster) when the GPU runs the fused step;
    /// None on the phased kernels.
    pub fused_invocations: Option<usize>,
}

fn one() -> usize {
    1
}

impl Race {
    pub fn gpu_wins(&self) -> bool {
        self.gpu_steps_per_s > self.cpu_steps_per_s
    }
}

/// Stepping time the CPU probe is given, in slices of at most 6 ms.
const CPU_BUDGET_MS: f64 = 120.0;
/// How much slower than the CPU a transformer's untuned GPU steps must be
/// for the race to end before the GPU's calibration: tuning (the matmul
/// and attention variants, steps per submit) was measured to gain at most
/// about 3× on a software adapter.
const CLEARLY_SLOWER: f64 = 4.0;
const CPU_SLICE_MS: f64 = 6.0;

/// What the speed depends on (the race is kept per shape).
pub fn shape_key(e: &Experiment) -> String {
    format!(
        "{}{}|B{}x{}|{:?}|{}|clip={}|augment={}",
        e.architecture_words(),
        e.gpt().map_or(String::new(), |g| format!("{g:?}")),
        e.batch_size,
        e.grad_accumulation,
        e.loss,
        e.optimizer.name(),
        e.clip_grad_norm.is_some(),
        e.data.active_augment().is_some()
    )
}

impl Runner {
    /// Whether a GPU device is available to switch to.
    pub fn has_gpu_context(&self) -> bool {
        self.ctx.is_some()
    }

    pub fn on_gpu(&self) -> bool {
        self.trainer.backend() == Backend::Gpu
    }

    /// Whether the GPU engine runs the fused step now.
    pub fn runs_fused(&self) -> bool {
        self.trainer.runs_fused()
    }

    /// The race for the current experiment: measured now, or kept from
    /// an earlier measurement of the same shape.
    pub async fn race(&mut self) -> Result<Race, Error> {
        let Some(ctx) = self.ctx.clone() else {
            return Err(Error::Gpu("no GPU device to measure".into()));
        };
        let e = self.experiment().clone();
        let key = shape_key(&e);
        if let Some((_, race)) = self.races.iter().find(|(k, _)| *k == key) {
            return Ok(race.clone());
        }
        let data = self.data().clone();
        // The CPU probe borrows the run's rank workers (they keep no state
        // of a run: each step sends them its parameters).
        let remote = self.trainer.take_remote_ranks();
        let (cpu, remote) = cpu_speed(&e, data.clone(), remote).await;
        self.trainer.set_remote_ranks(remote);
        let (cpu_steps_per_s, cpu_ranks) = cpu?;
        if e.gpt().is_some() {
            // A transformer's calibration (every linear layer's matmul
            // variants, both attention variants, 19 timed steps) takes over
            // a minute on a software adapter. Two untuned steps first: a
            // GPU that far behind the CPU cannot catch up by tuning
            // (`CLEARLY_SLOWER`), and the race ends there.
            let mut quick = Trainer::fresh(&e, data.clone(), Some(ctx.clone()))?;
            quick.run(1, 1).await?;
            let started = Instant::now();
            quick.run(2, 2).await?;
            let gpu_steps_per_s = 2.0 / started.elapsed().as_secs_f64().max(1e-9);
            if gpu_steps_per_s * CLEARLY_SLOWER < cpu_steps_per_s {
                let race = Race { cpu_steps_per_s, cpu_ranks, gpu_steps_per_s, fused_invocations: None };
                self.races.push((key, race.clone()));
                return Ok(race);
            }
        }
        // The GPU's speed is predicted from the calibration's submit costs
        // at the steps per submit the page will use (`GPU_SUBMIT_MS`).
        let mut probe = Trainer::fresh(&e, data, Some(ctx))?;
        probe.allow_fused(self.fused_allowed);
        let calibration =
            probe.calibrate().await?.ok_or_else(|| Error::Gpu("the GPU probe did not calibrate".into()))?;
        let best = if self.fused_allowed { calibration.best() } else { calibration.phased };
        let gpu_steps_per_s = best.steps_per_second(best.steps_for(GPU_SUBMIT_MS, calibration.max_steps));
        let fused = self.fused_allowed && calibration.fused_wins();
        let fused_invocations = calibration.fused_width().filter(|_| fused).map(|w| w.invocations());
        let race = Race { cpu_steps_per_s, cpu_ranks, gpu_steps_per_s, fused_invocations };
        self.races.push((key, race.clone()));
        Ok(race)
    }

    /// Continues the run on the GPU (true) or the CPU engine: the state
    /// moves across, so the run goes on exactly where it was. After a GPU
    /// error the GPU's buffers are not to be trusted (a refused submit may
    /// have left a step half done), so the CPU engine goes on from the
    /// newest automatic checkpoint instead, and the returned notice says so.
    pub async fn switch_engine(&mut self, to_gpu: bool) -> Result<Option<String>, Error> {
        if to_gpu == self.on_gpu() {
            return Ok(None);
        }
        if to_gpu && self.ctx.is_none() {
            return Err(Error::Gpu("no WebGPU device to switch to".into()));
        }
        let read = match self.finish_partial_step().await {
            Ok(_) => self.state().await,
            Err(err) => Err(err),
        };
        let (state, notice) = match read {
            Ok(state) => (state, None),
            Err(Error::Gpu(why)) if !to_gpu => {
                let saved = latest_before(&self.ring, u64::MAX).ok_or_else(|| {
                    Error::Gpu(format!("the GPU's state could not be read ({why}) and no checkpoint is kept"))
                })?;
                let notice = format!(
                    "The GPU's state could not be read after its error; the CPU engine goes on from the newest automatic checkpoint, step {}.",
                    saved.step
                );
                self.last_checkpoint = saved.step;
                (saved.state, Some(notice))
            }
            Err(err) => return Err(err),
        };
        let data = self.data().clone();
        let gpu = if to_gpu { self.ctx.clone() } else { None };
        self.trainer.rebuild(state, data, gpu)?;
        self.calibrate().await?;
        Ok(notice)
    }

    /// Picks the GPU engine's faster path (fused or phased) for this
    /// experiment on this adapter (cached per shape by the core). The
    /// URL's `?fused=off` keeps the phased kernels (their per-phase
    /// timestamps and bit-exact comparisons).
    pub async fn calibrate(&mut self) -> Result<(), Error> {
        self.trainer.calibrate().await.map(|_| ())
    }
}

/// Remote ranks, lent to a probe and given back.
type Lent = Option<Box<dyn stepscope_core::engine::RemoteRanks>>;

/// Steps per second of the CPU engine on a probe of `e`, on the rank
/// workers `remote` where there are some, and the ranks it used; stepping
/// in slices with a yield to the event loop between them, so that the
/// page keeps drawing (and a worker keeps taking messages). The rank
/// workers come back whatever happened.
async fn cpu_speed(e: &Experiment, data: Dataset, remote: Lent) -> (Result<(f64, usize), Error>, Lent) {
    let mut probe = match Trainer::fresh(e, data, None) {
        Ok(probe) => probe,
        Err(err) => return (Err(err), remote),
    };
    probe.set_remote_ranks(remote);
    let (mut steps, mut stepping_ms, mut ranks) = (0usize, 0.0, 1);
    let mut failed = None;
    'measure: while stepping_ms < CPU_BUDGET_MS {
        let slice = Instant::now();
        while slice.elapsed().as_secs_f64() * 1e3 < CPU_SLICE_MS {
            if let Err(err) = probe.submit(1) {
                failed = Some(err);
                break 'measure;
            }
            match probe.collect().await {
                Ok(_) | Err(Error::NonFinite(_)) => steps += 1,
                Err(err) => {
                    failed = Some(err);
                    break 'measure;
                }
            }
            ranks = ranks.max(probe.ranks_used());
        }
        stepping_ms += slice.elapsed().as_secs_f64() * 1e3;
        yield_now().await;
    }
    let remote = probe.take_remote_ranks();
    match failed {
        Some(err) => (Err(err), remote),
        None => (Ok((steps as f64 * 1e3 / stepping_ms, ranks)), remote),
    }
}
