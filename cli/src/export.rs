//! `stepscope export-pytorch CHECKPOINT [--out FILE] [--data-out FILE [--data CSV]]`:
//! the PyTorch script that continues a checkpoint's run, and the training
//! rows it reads: a built-in dataset's, or those the run split from its CSV.
//!
//! `stepscope predict CHECKPOINT --inputs FILE [--out FILE]`: the network's
//! outputs for the rows of a CSV, from the CPU reference forward pass, as
//! CSV with exact decimals (what the PyTorch check compares against).

use stepscope_core::checkpoint::load_checkpoint;
use stepscope_core::data::{csv_header, CsvRows};
use stepscope_core::engine::predict as predict_outputs;
use stepscope_core::export::{pytorch_script, training_csv};
use stepscope_core::input::{MAX_CHECKPOINT_BYTES, MAX_CSV_BYTES};
use stepscope_core::model::Layout;
use stepscope_core::{Error, TrainState};

use crate::args::TrainArgs;
use crate::train::{load_data, Heartbeat};
use crate::{files, say, Failure};

pub(crate) fn read_checkpoint(path: &str) -> Result<TrainState, Failure> {
    let bytes = files::read_checkpoint(path, "checkpoint", MAX_CHECKPOINT_BYTES)?;
    load_checkpoint(&bytes).map_err(|e| Failure::usage(format!("`{path}`: {e}")))
}

pub fn export_pytorch(
    path: &str,
    out: Option<String>,
    data_out: Option<String>,
    data: Option<String>,
) -> Result<(), Failure> {
    let outputs: Vec<(&str, &str)> = [("--out", &out), ("--data-out", &data_out)]
        .into_iter()
        .filter_map(|(f, p)| Some((f, p.as_deref()?)))
        .collect();
    let mut inputs = vec![("checkpoint", path)];
    inputs.extend(data.as_deref().map(|d| ("--data", d)));
    files::distinct(&outputs, &inputs, &[])?;
    for (flag, out) in &outputs {
        files::check_writable(out, flag)?;
    }
    let state = read_checkpoint(path)?;
    let e = &state.experiment;
    // Everything is computed before anything is written. The training rows
    // are the run's: generated for a built-in, split from --data for a CSV.
    let rows = match &data_out {
        None => None,
        Some(out) => {
            let dataset = load_data(&TrainArgs { data, ..TrainArgs::default() }, e)?;
            Some((out, training_csv(&dataset.train)))
        }
    };
    let script = pytorch_script(e);
    match &out {
        Some(out) => {
            files::write_atomic(out, script.as_bytes())?;
            say!("script written to {out} (continues step {} of `{path}`)", state.step());
        }
        None => say!("{}", script.trim_end()),
    }
    if let Some((out, csv)) = rows {
        files::write_atomic(out, csv.as_bytes())?;
        say!("training rows written to {out}");
    }
    Ok(())
}

/// Inputs of a CSV: its `x…` columns in order; other columns (targets) are
/// ignored, so a training CSV can be given as it is.
fn read_inputs(path: &str, width: usize) -> Result<Vec<f32>, Failure> {
    let text = files::read_text(path, "--inputs file", MAX_CSV_BYTES)?;
    let bad = |msg: String| Failure::usage(format!("--inputs `{path}`: {msg}"));
    let header = csv_header(&text).map_err(|e| bad(e.to_string()))?;
    let columns: Vec<bool> = header.iter().map(|n| n.starts_with('x') && n.len() > 1).collect();
    let found = columns.iter().filter(|&&x| x).count();
    if found != width {
        return Err(bad(format!("line 1: {found} input columns (x…) but the model takes {width}")));
    }
    let mut inputs = Vec::new();
    let mut rows = CsvRows::new(text.as_bytes());
    rows.next_row().map_err(|e| bad(e.to_string()))?; // the header
    let mut beat = Heartbeat::new();
    while let Some((line, fields)) = rows.next_row().map_err(|e| bad(e.to_string()))? {
        if fields.len() != columns.len() {
            return Err(bad(format!("line {line}: {} fields, but the header has {}", fields.len(), columns.len())));
        }
        for (c, field) in fields.iter().enumerate().filter(|(c, _)| columns[*c]) {
            match field.parse::<f32>() {
                Ok(v) if v.is_finite() => inputs.push(v),
                _ => return Err(bad(format!("line {line}, column {}: `{field}` is not a finite number", c + 1))),
            }
        }
        if beat.due() {
            let (done, total) = rows.progress();
            eprintln!(
                "reading {path}: {:.0}% ({} rows)",
                100.0 * done as f64 / total.max(1) as f64,
                inputs.len() / width.max(1)
            );
        }
    }
    Ok(inputs)
}

pub fn predict(path: &str, inputs_path: &str, out: Option<String>) -> Result<(), Failure> {
    if let Some(out) = &out {
        files::distinct(&[("--out", out)], &[("checkpoint", path), ("--inputs", inputs_path)], &[])?;
        files::check_writable(out, "--out")?;
    }
    let state = read_checkpoint(path)?;
    let e = &state.experiment;
    if e.gpt().is_some() {
        return Err(Failure::usage(format!(
            "`{path}` is a gpt model's checkpoint: predict reads an MLP's; `stepscope sample` writes a gpt model's text"
        )));
    }
    let inputs = read_inputs(inputs_path, e.model.inputs)?; // (N, I)
    let layout = Layout::new(e);
    let predicted = predict_outputs(&state.params, &layout, e, &inputs)
        .map_err(|layer| Error::NonFinite(format!("first NaN/Inf in layer {layer} during forward")))?;
    let outputs = e.outputs();
    let mut csv = (0..outputs).map(|o| format!("y{o}")).collect::<Vec<_>>().join(",") + "\n";
    for row in predicted.chunks_exact(outputs) {
        // f64 of each f32: its exact value, shortest decimal.
        csv += &row.iter().map(|&v| f64::from(v).to_string()).collect::<Vec<_>>().join(",");
        csv.push('\n');
    }
    match &out {
        Some(out) => files::write_atomic(out, csv.as_bytes()),
        None => {
            say!("{}", csv.trim_end());
            Ok(())
        }
    }
}
