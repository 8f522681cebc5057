//! Leaving Stepscope: a PyTorch script that rebuilds an experiment's model,
//! loss, optimizer and schedule and continues a checkpoint's run
//! (`pytorch_script`), and the training rows it reads, as CSV
//! (`training_csv`). Pure functions of their inputs, no file access, so the
//! page (wasm32) and the CLI share them. What the export guarantees is in
//! docs/export.md.

mod pytorch;
mod pytorch_data;
mod pytorch_gpt;
mod pytorch_optim;
mod pytorch_run;
pub mod tensorboard;
pub mod trace;

pub use pytorch::pytorch_script;

use std::fmt::Write;

use crate::data::Table;

/// Python's spelling of a float: shortest round-trip, always with a point
/// or exponent (`{:?}` gives `1.0`, `0.01`, `1e-8`).
fn py(x: f64) -> String {
    format!("{x:?}")
}

/// `table` as the CSV Stepscope reads (docs/experiment.md, "Data"): columns
/// `x1`…`xI`, then `y` (or `y0`…`y{T-1}` for several targets), one line per
/// row in table order, which is the order the row counter of a run indexes.
/// Each f32 is written as the shortest decimal of its exact f64 value, so
/// Stepscope (parsing to f32) and Python (parsing to f64, then rounding to
/// float32) both read back exactly the same number.
pub fn training_csv(table: &Table) -> String {
    let inputs = (1..=table.input_width).map(|i| format!("x{i}"));
    let targets: Vec<String> = match table.target_width {
        1 => vec!["y".to_string()],
        t => (0..t).map(|j| format!("y{j}")).collect(),
    };
    let header: Vec<String> = inputs.chain(targets).collect();
    let mut csv = header.join(",");
    csv.push('\n');
    let (i, t) = (table.input_width, table.target_width);
    for row in 0..table.rows() {
        let values = table.inputs[row * i..(row + 1) * i].iter().chain(&table.targets[row * t..(row + 1) * t]);
        for (c, v) in values.enumerate() {
            let sep = if c == 0 { "" } else { "," };
            write!(csv, "{sep}{}", f64::from(*v)).expect("writing to a String cannot fail");
        }
        csv.push('\n');
    }
    csv
}

#[cfg(test)]
mod tests;
