//! `stepscope inspect FILE`: a checkpoint's experiment, step and tensors.

use stepscope_core::checkpoint::{load_checkpoint, read_file_info};

use crate::{files, say, Failure};

pub fn run(path: &str) -> Result<(), Failure> {
    let bytes = files::read(path, "checkpoint")?;
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
