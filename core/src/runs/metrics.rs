//! Metrics logs: one JSON object per line, as `stepscope train --metrics`
//! and the exported script write them.

use super::trace::tally;
use super::{bad, OpenedStep, RankRun, MAX_MS, MAX_RANKS, MAX_RUN_STEPS};
use crate::error::{Error, Result};

fn ms_field(line: &serde_json::Map<String, serde_json::Value>, key: &str, at: &str) -> Result<f64> {
    match line.get(key) {
        None => Ok(0.0),
        Some(v) => match v.as_f64() {
            Some(ms) if ms.is_finite() && (0.0..=MAX_MS).contains(&ms) => Ok(ms),
            _ => bad(at, format!("{key} is {v}, not a duration in milliseconds")),
        },
    }
}

/// A metrics log: one JSON object per line with `step` and the phases'
/// milliseconds (`data_ms`, `forward_ms`, …, `communication_ms` from the
/// exported script); `rank` where the writer gave one, else the file's
/// position. Steps must go up.
pub fn read_metrics_log(name: &str, text: &str, default_rank: u32) -> Result<RankRun> {
    const PHASES: [(&str, &str); 7] = [
        ("data_ms", "data"),
        ("forward_ms", "forward"),
        ("backward_ms", "backward"),
        ("optimizer_ms", "optimizer"),
        ("communication_ms", "communication"),
        ("checkpoint_ms", "checkpoint"),
        ("logging_ms", "logging"),
    ];
    let mut steps: Vec<OpenedStep> = Vec::new();
    let mut rank = None;
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let at = format!("{name} line {}", i + 1);
        tally(1);
        // Strict (`json::unique_keys`): `"forward_ms": 1, "forward_ms": 90`
        // is refused, not read as its last.
        let value: serde_json::Value = match crate::json::unique_keys(line) {
            Ok(()) => serde_json::from_str(line).map_err(|e| Error::Other(format!("{at}: not JSON ({e})")))?,
            Err(crate::json::Refused::Repeated { path, column, .. }) => {
                return bad(&at, format!("{path} appears twice (column {column})"))
            }
            Err(crate::json::Refused::NotJson(e)) => return bad(&at, format!("not JSON ({e})")),
        };
        let Some(fields) = value.as_object() else { return bad(&at, "not a JSON object".into()) };
        let Some(step) = fields.get("step").and_then(|s| s.as_u64()) else {
            return bad(&at, "no whole-number `step`".into());
        };
        if let Some(last) = steps.last() {
            if step <= last.step {
                return bad(
                    &at,
                    format!("step {step} after step {}: steps go backwards (two runs in one file?)", last.step),
                );
            }
        }
        if steps.len() >= MAX_RUN_STEPS {
            return bad(&at, format!("more than {MAX_RUN_STEPS} steps"));
        }
        let line_rank = match fields.get("rank") {
            None => None,
            Some(r) => match r.as_u64().filter(|&r| r < MAX_RANKS as u64) {
                Some(r) => Some(r as u32),
                None => return bad(&at, format!("rank {r} is not a rank")),
            },
        };
        if rank.is_some() && line_rank != rank {
            return bad(&at, "the rank changes within the file".into());
        }
        rank = rank.or(line_rank);
        let mut phases = Vec::new();
        for (key, phase) in PHASES {
            let ms = ms_field(fields, key, &at)?;
            if ms > 0.0 {
                phases.push((phase, ms));
            }
        }
        if phases.is_empty() {
            return bad(&at, "no phase times (data_ms, forward_ms, …)".into());
        }
        let figure = |key: &str| fields.get(key).and_then(|v| v.as_f64()).filter(|v| v.is_finite());
        steps.push(OpenedStep {
            step,
            wall_ms: phases.iter().map(|(_, ms)| ms).sum(),
            phases,
            loss: figure("loss"),
            grad_norm: figure("grad_norm"),
            lr: figure("lr"),
        });
    }
    if steps.is_empty() {
        return bad(name, "no steps".into());
    }
    Ok(RankRun { rank: rank.unwrap_or(default_rank), steps, gpu: None })
}
