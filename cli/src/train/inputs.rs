//! What `stepscope train` reads before it trains: the experiment, the
//! starting state (fresh, `--init` weights or a checkpoint to resume), the
//! data, and how many steps to run. Every failure names the flag and file.

use stepscope_core::checkpoint::{load_checkpoint, load_weights, read_file_info};
use stepscope_core::data::Dataset;
use stepscope_core::experiment::{DataSource, Schedule};
use stepscope_core::input::{checkpoint_limit, MAX_CONFIG_BYTES, MAX_TEXT_BYTES};
use stepscope_core::limits::Limits;
use stepscope_core::{Error, Experiment, TrainState};

use super::progress::read_csv_file;
use crate::args::{TrainArgs, DEFAULT_STEPS};
use crate::files;
use crate::Failure;

pub(super) fn read_experiment(path: &str) -> Result<Experiment, Failure> {
    let text = files::read_text(path, "config", MAX_CONFIG_BYTES)?;
    Experiment::from_json(&text).map_err(|e| Failure::usage(format!("config `{path}`: {e}")))
}

/// The run to start from: a fresh one, a fresh one with given initial
/// weights, or a full checkpoint to resume. A config's experiment is held
/// to the memory budget before its parameters are allocated (a checkpoint's
/// tensors are bounded by its file, checked before they are allocated).
pub(super) fn initial_state(args: &TrainArgs) -> Result<TrainState, Failure> {
    let config = args.config.as_deref().map(read_experiment).transpose()?;
    if let Some(experiment) = &config {
        Limits::native(args.memory_budget_mib).check(experiment, None)?;
    }
    let Some(init_path) = args.init.as_deref() else {
        let experiment = config.expect("parse() requires --config or --init");
        return fresh(experiment, None);
    };
    // A checkpoint holds the run's parameters and optimizer state, within
    // its memory budget: a larger file is refused as it is read.
    let limit = checkpoint_limit(args.memory_budget_mib.saturating_mul(1 << 20));
    let bytes = files::read_checkpoint(init_path, "--init file", limit).map_err(|mut f| {
        if f.message.ends_with("the most read: refused") {
            let budget = args.memory_budget_mib;
            f.message += &format!(" (a run within --memory-budget {budget} MiB has no larger checkpoint)");
        }
        f
    })?;
    let context = |e: Error| Failure::usage(format!("--init `{init_path}`: {e}"));
    let is_checkpoint = read_file_info(&bytes).map_err(context)?.metadata.contains_key("format");
    match (config, is_checkpoint) {
        (config, true) => {
            let state = load_checkpoint(&bytes).map_err(context)?;
            if let Some(config) = config {
                if config != state.experiment {
                    return Err(Failure::usage(format!(
                        "--config differs from the experiment stored in checkpoint `{init_path}`; leave out --config to resume it"
                    )));
                }
            }
            Ok(state)
        }
        (Some(experiment), false) => {
            let params = load_weights(&bytes, &experiment).map_err(context)?;
            fresh(experiment, Some(params))
        }
        (None, false) => Err(Failure::usage(format!(
            "--init `{init_path}` holds weights only, not a Stepscope checkpoint: give --config too"
        ))),
    }
}

/// A fresh run (`TrainState::try_fresh`: a machine without the memory
/// gets an error), from given initial weights if any.
pub(super) fn fresh(experiment: Experiment, params: Option<Vec<f32>>) -> Result<TrainState, Failure> {
    let mut state = TrainState::try_fresh(&experiment)?;
    if let Some(params) = params {
        state.params = params;
    }
    Ok(state)
}

/// A text file's windows for a gpt experiment (`"source": "text"`): read
/// within `MAX_TEXT_BYTES`, then `Dataset::from_text` names whatever else
/// is wrong with it and drops the bytes once the rows are made.
pub(super) fn load_text(path: &str, experiment: &Experiment) -> Result<Dataset, Failure> {
    let context = |e: Error| Failure::usage(format!("--data `{path}`: {e}"));
    let bytes = files::read(path, "--data file", MAX_TEXT_BYTES as u64)?;
    Dataset::from_text(experiment, std::borrow::Cow::Owned(bytes)).map_err(context)
}

pub(crate) fn load_data(args: &TrainArgs, experiment: &Experiment) -> Result<Dataset, Failure> {
    match (&args.data, experiment.data.source) {
        (Some(path), DataSource::Text) => return load_text(path, experiment),
        (None, DataSource::Text) => {
            return Err(Failure::usage("the experiment's data.source is \"text\": give the file with --data FILE"))
        }
        _ => {}
    }
    let csv = match (&args.data, experiment.data.source) {
        (Some(path), DataSource::Csv) => Some(read_csv_file(path, "--data file")?),
        (None, DataSource::Csv) => {
            return Err(Failure::usage("the experiment's data.source is \"csv\": give the file with --data FILE"))
        }
        (Some(_), source) => {
            return Err(Failure::usage(format!(
                "--data is for \"source\": \"csv\" or \"text\", but the experiment uses the built-in {:?} dataset",
                source.name()
            )))
        }
        (None, _) => None,
    };
    let context = |e: Error| match &args.data {
        Some(path) => Failure::usage(format!("--data `{path}`: {e}")),
        None => Failure::from(e),
    };
    match csv {
        // The table moves into the data: its rows are never held twice.
        Some(csv) => Dataset::from_csv(experiment, csv).map_err(context),
        None => Dataset::load(experiment, None).map_err(context),
    }
}

/// Steps to run now: `--steps`, else what the schedule has left, else 100.
pub(super) fn steps_to_run(args: &TrainArgs, state: &TrainState) -> u64 {
    if let Some(steps) = args.steps {
        return steps;
    }
    match state.experiment.schedule {
        Schedule::WarmupCosine { total_steps, .. } | Schedule::WarmupLinear { total_steps, .. } => {
            total_steps.saturating_sub(state.step()).max(1)
        }
        Schedule::Constant => DEFAULT_STEPS,
    }
}
