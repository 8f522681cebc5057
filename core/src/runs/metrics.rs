//! Metrics logs: one JSON object per line, as `stepscope train --metrics`
//! and the exported script write them.

use serde_json::Value;

use super::trace::tally;
use super::{bad, OpenedStep, RankRun, MAX_MS, MAX_RANKS, MAX_RUN_STEPS};
use crate::error::{Error, Result};

/// The fields of a line that are read, each as it is written (`null`
/// included, so that it is refused by name); the rest is skipped unread.
/// A line is held to `json::unique_keys` first, so no field is given twice.
#[derive(serde::Deserialize)]
struct Line {
    #[serde(default, deserialize_with = "given")]
    step: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    rank: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    data_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    forward_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    backward_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    optimizer_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    communication_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    checkpoint_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    logging_ms: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    loss: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    grad_norm: Option<Value>,
    #[serde(default, deserialize_with = "given")]
    lr: Option<Value>,
}

/// A field that is present, whatever its value (`null` too).
fn given<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

fn ms_field(value: &Option<Value>, key: &str, at: &dyn Fn() -> String) -> Result<f64> {
    match value {
        None => Ok(0.0),
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && (0.0..=MAX_MS).contains(&ms) => Ok(ms),
            _ => bad(&at(), format!("{key} is {v}, not a duration in milliseconds")),
        },
    }
}

/// A metrics log: one JSON object per line with `step` and the phases'
/// milliseconds (`data_ms`, `forward_ms`, …, `communication_ms` from the
/// exported script); `rank` where the writer gave one, else the file's
/// position. Steps must go up.
pub fn read_metrics_log(name: &str, text: &str, default_rank: u32) -> Result<RankRun> {
    let mut steps: Vec<OpenedStep> = Vec::new();
    let mut rank = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        // Written only when something is wrong: a million lines read
        // without a million messages made.
        let at = || format!("{name} line {}", i + 1);
        tally(1);
        // Strict (`json::unique_keys`): `"forward_ms": 1, "forward_ms": 90`
        // is refused, not read as its last.
        match crate::json::unique_keys(line) {
            Ok(()) => {}
            Err(crate::json::Refused::Repeated { path, column, .. }) => {
                return bad(&at(), format!("{path} appears twice (column {column})"))
            }
            Err(crate::json::Refused::NotJson(e)) => return bad(&at(), format!("not JSON ({e})")),
        }
        if !line.trim_start().starts_with('{') {
            return bad(&at(), "not a JSON object".into());
        }
        let fields: Line = serde_json::from_str(line).map_err(|e| Error::Other(format!("{}: {e}", at())))?;
        let Some(step) = fields.step.as_ref().and_then(|s| s.as_u64()) else {
            return bad(&at(), "no whole-number `step`".into());
        };
        if let Some(last) = steps.last() {
            if step <= last.step {
                return bad(
                    &at(),
                    format!("step {step} after step {}: steps go backwards (two runs in one file?)", last.step),
                );
            }
        }
        if steps.len() >= MAX_RUN_STEPS {
            return bad(&at(), format!("more than {MAX_RUN_STEPS} steps"));
        }
        let line_rank = match &fields.rank {
            None => None,
            Some(r) => match r.as_u64().filter(|&r| r < MAX_RANKS as u64) {
                Some(r) => Some(r as u32),
                None => return bad(&at(), format!("rank {r} is not a rank")),
            },
        };
        if rank.is_some() && line_rank != rank {
            return bad(&at(), "the rank changes within the file".into());
        }
        rank = rank.or(line_rank);
        let mut phases = Vec::new();
        for (value, key, phase) in [
            (&fields.data_ms, "data_ms", "data"),
            (&fields.forward_ms, "forward_ms", "forward"),
            (&fields.backward_ms, "backward_ms", "backward"),
            (&fields.optimizer_ms, "optimizer_ms", "optimizer"),
            (&fields.communication_ms, "communication_ms", "communication"),
            (&fields.checkpoint_ms, "checkpoint_ms", "checkpoint"),
            (&fields.logging_ms, "logging_ms", "logging"),
        ] {
            let ms = ms_field(value, key, &at)?;
            if ms > 0.0 {
                phases.push((phase, ms));
            }
        }
        if phases.is_empty() {
            return bad(&at(), "no phase times (data_ms, forward_ms, …)".into());
        }
        let figure = |v: &Option<Value>| v.as_ref().and_then(|v| v.as_f64()).filter(|v| v.is_finite());
        steps.push(OpenedStep {
            step,
            wall_ms: phases.iter().map(|(_, ms)| ms).sum(),
            phases,
            loss: figure(&fields.loss),
            grad_norm: figure(&fields.grad_norm),
            lr: figure(&fields.lr),
        });
    }
    if steps.is_empty() {
        return bad(name, "no steps".into());
    }
    Ok(RankRun { rank: rank.unwrap_or(default_rank), steps, gpu: None })
}
