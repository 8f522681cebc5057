//! Command-line arguments of `stepscope train`.

use crate::Failure;

#[derive(Debug, Default)]
pub struct TrainArgs {
    pub config: Option<String>,
    pub init: Option<String>,
    pub data: Option<String>,
    pub steps: Option<u64>,
    pub backend: Backend,
    pub out: Option<String>,
    pub metrics: Option<String>,
    pub checkpoint_every: Option<u64>,
    /// MiB a run may hold at its peak (`limits::Limits::native`).
    pub memory_budget_mib: u64,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    #[default]
    Cpu,
    Gpu,
}

/// Default memory budget of a run, in MiB.
pub const DEFAULT_MEMORY_BUDGET_MIB: u64 = 4096;

/// Default number of steps when neither `--steps` nor a schedule's
/// `total_steps` says.
pub const DEFAULT_STEPS: u64 = 100;

fn positive(flag: &str, value: &str) -> Result<u64, Failure> {
    match value.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(Failure::usage(format!("{flag} needs a whole number > 0, got `{value}`"))),
    }
}

impl TrainArgs {
    pub fn parse(argv: &[String]) -> Result<TrainArgs, Failure> {
        let mut args = TrainArgs { memory_budget_mib: DEFAULT_MEMORY_BUDGET_MIB, ..TrainArgs::default() };
        let mut it = argv.iter();
        while let Some(flag) = it.next() {
            let mut value = || it.next().cloned().ok_or_else(|| Failure::usage(format!("{flag} needs a value")));
            match flag.as_str() {
                "--config" => args.config = Some(value()?),
                "--init" => args.init = Some(value()?),
                "--data" => args.data = Some(value()?),
                "--steps" => args.steps = Some(positive(flag, &value()?)?),
                "--backend" => {
                    args.backend = match value()?.as_str() {
                        "cpu" => Backend::Cpu,
                        "gpu" => Backend::Gpu,
                        other => return Err(Failure::usage(format!("--backend `{other}` is not one of: cpu, gpu"))),
                    }
                }
                "--out" => args.out = Some(value()?),
                "--metrics" => args.metrics = Some(value()?),
                "--checkpoint-every" => args.checkpoint_every = Some(positive(flag, &value()?)?),
                "--memory-budget" => args.memory_budget_mib = positive(flag, &value()?)?,
                other => return Err(Failure::usage(format!("unknown argument `{other}` (try `stepscope --help`)"))),
            }
        }
        if args.config.is_none() && args.init.is_none() {
            return Err(Failure::usage("train needs --config FILE (or --init CHECKPOINT to resume)"));
        }
        if args.checkpoint_every.is_some() && args.out.is_none() {
            return Err(Failure::usage("--checkpoint-every needs --out FILE to write the checkpoints to"));
        }
        Ok(args)
    }
}
