//! CSV data: a header row, then one row per sample. Columns named `x…` are
//! inputs in the order they appear; `y` (or `y0`, `y1`, …) are targets.
//! For `cross_entropy`, the single `y` column holds a class index.
//! Every error names the line (1-based, header = line 1) and the column.

use super::Table;
use crate::error::{Error, Result};
use crate::experiment::{Experiment, Loss};

/// Largest CSV accepted, in rows.
pub const MAX_CSV_ROWS: usize = 1_000_000;

enum Column {
    Input,
    Target,
}

/// The CSV reader every CSV goes through (the `csv` crate): a UTF-8
/// byte-order mark (what spreadsheet programs write), quoted fields and CRLF
/// line ends are accepted; fields are trimmed; rows may differ in length
/// (checked with our own message).
fn reader(text: &str) -> ::csv::Reader<&[u8]> {
    ::csv::ReaderBuilder::new().has_headers(false).flexible(true).trim(::csv::Trim::All).from_reader(text.as_bytes())
}

/// Every non-blank row of `text`, header included, with its 1-based line.
pub fn csv_rows(text: &str) -> impl Iterator<Item = Result<(usize, ::csv::StringRecord)>> + '_ {
    // Lines from byte offsets: a record's position is where the reader
    // began looking for it, before the line ends and blank lines it skipped.
    let line_at = move |byte: u64| {
        let bytes = text.as_bytes();
        let mut start = (byte as usize).min(bytes.len());
        while start < bytes.len() && matches!(bytes[start], b'\r' | b'\n') {
            start += 1;
        }
        1 + bytes[..start].iter().filter(|&&b| b == b'\n').count()
    };
    reader(text).into_records().filter_map(move |record| match record {
        Ok(r) if r.iter().all(str::is_empty) => None,
        Ok(r) => Some(Ok((r.position().map_or(0, |p| line_at(p.byte())), r))),
        Err(e) => {
            let line = e.position().map_or(String::new(), |p| format!("line {}: ", line_at(p.byte())));
            Some(Err(Error::Csv(format!("{line}not readable as CSV ({e})"))))
        }
    })
}

/// The header's column names, each named once.
pub fn csv_header(text: &str) -> Result<Vec<String>> {
    let Some(first) = csv_rows(text).next() else {
        return Err(Error::Csv("the file is empty: expected a header row such as `x1,x2,y`".into()));
    };
    let (_, record) = first?;
    let names: Vec<String> = record.iter().map(|n| n.trim_start_matches('\u{feff}').to_string()).collect();
    for (c, name) in names.iter().enumerate() {
        if let Some(first) = names[..c].iter().position(|n| n == name) {
            return Err(Error::Csv(format!(
                "line 1, column {}: header `{name}` appears twice (first in column {})",
                c + 1,
                first + 1
            )));
        }
    }
    Ok(names)
}

pub fn parse_csv(text: &str, experiment: &Experiment) -> Result<Table> {
    let err = |msg: String| Err(Error::Csv(msg));
    let header = csv_header(text)?;
    let mut columns = Vec::new();
    for (c, name) in header.iter().enumerate() {
        let column = if name.starts_with('x') && name.len() > 1 {
            Column::Input
        } else if name == "y" || (name.starts_with('y') && name[1..].parse::<u32>().is_ok()) {
            Column::Target
        } else {
            return err(format!(
                "line 1, column {}: header `{name}` is neither an input (x…) nor a target (y, y0, y1, …)",
                c + 1
            ));
        };
        columns.push(column);
    }
    let input_width = columns.iter().filter(|c| matches!(c, Column::Input)).count();
    let target_width = columns.len() - input_width;
    let outputs = experiment.outputs();
    if input_width != experiment.model.inputs {
        return err(format!(
            "line 1: the header has {input_width} input columns (x…) but model.inputs is {}",
            experiment.model.inputs
        ));
    }
    let wanted_targets = match experiment.loss {
        Loss::CrossEntropy => 1,
        _ => outputs,
    };
    if target_width != wanted_targets {
        return err(format!(
            "line 1: the header has {target_width} target columns (y…) but loss {:?} with {outputs} outputs needs {wanted_targets}",
            experiment.loss
        ));
    }
    let mut table = Table { input_width, target_width, ..Table::default() };
    for row in csv_rows(text).skip(1) {
        let (line_no, fields) = row?;
        if table.rows() >= MAX_CSV_ROWS {
            return err(format!("more than {MAX_CSV_ROWS} rows"));
        }
        if fields.len() != columns.len() {
            return err(format!(
                "line {line_no}: {} fields, but the header has {} columns",
                fields.len(),
                columns.len()
            ));
        }
        let row_start = table.targets.len();
        for (c, (field, column)) in fields.iter().zip(&columns).enumerate() {
            let value: f32 = match field.parse() {
                Ok(v) if f32::is_finite(v) => v,
                _ => return err(format!("line {line_no}, column {}: `{field}` is not a finite number", c + 1)),
            };
            match column {
                Column::Input => table.inputs.push(value),
                Column::Target => {
                    check_target(experiment.loss, outputs, value)
                        .map_err(|why| Error::Csv(format!("line {line_no}, column {}: {why}", c + 1)))?;
                    table.targets.push(value);
                }
            }
        }
        debug_assert_eq!(table.targets.len() - row_start, target_width);
    }
    if table.rows() == 0 {
        return err("the file has a header but no data rows".into());
    }
    Ok(table)
}

fn check_target(loss: Loss, outputs: usize, value: f32) -> std::result::Result<(), String> {
    match loss {
        Loss::Mse => Ok(()),
        Loss::BceWithLogits if (0.0..=1.0).contains(&value) => Ok(()),
        Loss::BceWithLogits => Err(format!("target {value} is outside [0, 1], as bce_with_logits needs")),
        Loss::CrossEntropy if value.fract() == 0.0 && value >= 0.0 && (value as usize) < outputs => Ok(()),
        Loss::CrossEntropy => {
            Err(format!("class `{value}` must be an integer in 0..{outputs} (the output layer's units)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(loss: &str, outputs: usize) -> Experiment {
        Experiment::from_json(&format!(
            r#"{{"model": {{"inputs": 2, "layers": [{{"units": {outputs}, "activation": "linear"}}]}},
                "loss": "{loss}", "optimizer": {{"kind": "sgd", "lr": 0.1}}, "batch_size": 4,
                "data": {{"source": "csv"}}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn parses_inputs_and_targets_in_order() {
        let e = experiment("mse", 2);
        let t = parse_csv("x1,y0,x2,y1\n1,2,3,4\r\n5,6,7,8\n\n", &e).unwrap();
        assert_eq!(t.inputs, vec![1.0, 3.0, 5.0, 7.0]);
        assert_eq!(t.targets, vec![2.0, 4.0, 6.0, 8.0]);
        assert_eq!(t.rows(), 2);
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = experiment("cross_entropy", 3);
        let cases = [
            ("", "empty"),
            ("x1,x2,z\n", "line 1, column 3"),
            ("x1,y\n1,2\n", "1 input columns"),
            ("x1,x2,y\n1,2,0\n1,abc,1\n", "line 3, column 2: `abc`"),
            ("x1,x2,y\n1,2\n", "line 2: 2 fields"),
            ("x1,x2,y\n1,2,3\n", "line 2, column 3: class `3`"),
            ("x1,x2,y\n1,2,0.5\n", "class `0.5`"),
            ("x1,x2,y\n1,NaN,0\n", "line 2, column 2"),
            ("x1,x2,y\n", "no data rows"),
        ];
        for (text, want) in cases {
            let msg = parse_csv(text, &e).unwrap_err().to_string();
            assert!(msg.contains(want), "{text:?}: {msg}");
        }
        let bce = experiment("bce_with_logits", 1);
        let msg = parse_csv("x1,x2,y\n1,2,2\n", &bce).unwrap_err().to_string();
        assert!(msg.contains("outside [0, 1]"), "{msg}");
        let msg = parse_csv("x1,x2,x1,y\n1,2,3,0\n", &e).unwrap_err().to_string();
        assert!(msg.contains("line 1, column 3: header `x1` appears twice (first in column 1)"), "{msg}");
    }

    /// What spreadsheet programs write: a byte-order mark, quoted fields,
    /// CRLF line ends, blank lines.
    #[test]
    fn spreadsheet_csv_reads_as_plain_csv() {
        let e = experiment("mse", 2);
        let plain = parse_csv("x1,x2,y0,y1\n1,2,3,4\n5,6,7,8\n", &e).unwrap();
        for text in [
            "\u{feff}x1,x2,y0,y1\r\n1,2,3,4\r\n5,6,7,8\r\n",
            "\"x1\",\"x2\",\"y0\",\"y1\"\n\"1\",2,\" 3 \",4\n\n5,6,7,\"8\"\n",
            "x1, x2 ,y0,y1\n\n1,2,3,4\n   \n5,6,7,8",
        ] {
            assert_eq!(parse_csv(text, &e).unwrap(), plain, "{text:?}");
        }
        // Line numbers count the lines of the file, blank ones included.
        let msg = parse_csv("\u{feff}x1,x2,y0,y1\r\n\r\n1,2,3,4\r\n5,x,7,8\r\n", &e).unwrap_err().to_string();
        assert!(msg.contains("line 4, column 2: `x`"), "{msg}");
    }
}
