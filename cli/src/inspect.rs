//! `stepscope inspect FILE`: a checkpoint's experiment, step and tensors.
//!
//! `stepscope verify CHECKPOINT [--data FILE] [--steps N]`: the page's
//! "verify restore" for a file: the checkpoint is loaded, saved, restored
//! into a fresh engine and compared bit for bit, and both copies take the
//! next N steps (default 3), which must give identical losses.

use stepscope_core::checkpoint::{load_checkpoint, read_file_info, verify_restore};
use stepscope_core::input::MAX_CHECKPOINT_BYTES;

use crate::args::TrainArgs;
use crate::export::read_checkpoint;
use crate::train::load_data;
use crate::{files, say, Failure};

pub fn verify(path: &str, data: Option<String>, steps: usize) -> Result<(), Failure> {
    let state = read_checkpoint(path)?;
    let data = load_data(&TrainArgs { data, ..TrainArgs::default() }, &state.experiment)?;
    let report = verify_restore(&state, &data, steps)?;
    say!("{}", report.summary());
    match report.passed() {
        true => Ok(()),
        false => Err(Failure { message: format!("`{path}` did not restore exactly"), status: 1 }),
    }
}

pub fn run(path: &str) -> Result<(), Failure> {
    let bytes = files::read_checkpoint(path, "checkpoint", MAX_CHECKPOINT_BYTES)?;
    let info = read_file_info(&bytes)?;
    // A Stepscope checkpoint is fully verified; a plain weights file is
    // listed as it is.
    match info.metadata.get("format") {
        Some(_) => {
            let state = load_checkpoint(&bytes)?;
            say!("format:     {}", info.metadata["format"]);
            say!("step:       {}", state.step());
            say!(
                "data:       {} rows consumed (epoch {})",
                state.data_position.rows_consumed,
                state.data_position.epoch
            );
            say!("digest:     {} (verified)", info.metadata["digest"]);
            say!("experiment: {}", state.experiment.to_json());
        }
        None => say!("plain safetensors file (no Stepscope metadata)"),
    }
    say!("tensors:");
    for (name, dtype, shape) in &info.tensors {
        say!("  {name:<44} {dtype:<5} {shape:?}");
    }
    Ok(())
}
