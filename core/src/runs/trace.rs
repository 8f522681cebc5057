//! Traces: Stepscope's and PyTorch's profiler's (Kineto) Trace Event JSON,
//! read as steps with their phases, and the GPU's time split as Holistic
//! Trace Analysis splits it.

use super::{bad, phase_of, GpuTime, OpenedStep, RankRun, RunKind, MAX_MS, MAX_RANKS, MAX_RUN_STEPS};
use crate::error::{Error, Result};

#[derive(serde::Deserialize)]
struct Event {
    #[serde(default)]
    ph: String,
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    ts: Option<f64>,
    #[serde(default)]
    dur: Option<f64>,
    #[serde(default)]
    args: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct TraceFile {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
    #[serde(rename = "distributedInfo", default)]
    distributed_info: Option<serde_json::Value>,
    #[serde(rename = "traceName", default)]
    trace_name: Option<String>,
}

/// A trace: its `ProfilerStep#N` spans (which must not overlap), the
/// phases inside each (named as Stepscope and the exported script name
/// them, or PyTorch's DataLoader and `Optimizer.step#…`), `other` for the
/// rest; GPU events (`kernel`, `gpu_memcpy`, `gpu_memset`) give the GPU's
/// busy time and span.
pub(super) fn read_trace(name: &str, text: &str) -> Result<(RunKind, RankRun)> {
    let file: TraceFile = serde_json::from_str(text).map_err(|e| Error::Other(format!("{name}: not a trace ({e})")))?;
    let kind =
        if file.trace_name.as_deref() == Some("stepscope") { RunKind::StepscopeTrace } else { RunKind::TorchTrace };
    let rank = match file.distributed_info.as_ref().and_then(|d| d.get("rank")) {
        None => 0,
        Some(r) => match r.as_u64().filter(|&r| r < MAX_RANKS as u64) {
            Some(r) => r as u32,
            None => return bad(name, format!("distributedInfo.rank {r} is not a rank")),
        },
    };
    let mut spans: Vec<(String, Option<String>, f64, f64)> = Vec::new();
    // Counters (`ph: "C"`) of the loss, gradient norm and learning rate:
    // (name, ts, value).
    let mut counters: Vec<(&'static str, f64, f64)> = Vec::new();
    for (i, e) in file.trace_events.into_iter().enumerate() {
        if e.ph == "C" {
            let counter = ["loss", "grad_norm", "lr"].into_iter().find(|c| *c == e.name);
            let value = e.args.as_ref().and_then(|a| a.get(&e.name)).and_then(|v| v.as_f64());
            if let (Some(c), Some(ts), Some(v)) = (counter, e.ts, value) {
                if ts.is_finite() && v.is_finite() {
                    counters.push((c, ts, v));
                }
            }
            continue;
        }
        if e.ph != "X" {
            continue;
        }
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            return bad(name, format!("event {i} ({}) has no ts or dur", e.name));
        };
        if !ts.is_finite() || !dur.is_finite() || dur < 0.0 || dur / 1e3 > MAX_MS {
            return bad(name, format!("event {i} ({}) has ts {ts} and dur {dur}: not a time span", e.name));
        }
        spans.push((e.name, e.cat, ts, ts + dur));
    }
    let mut steps: Vec<(u64, f64, f64)> = spans
        .iter()
        // Kineto draws each step on the GPU's track too (gpu_user_annotation).
        .filter(|(_, cat, _, _)| cat.as_deref() != Some("gpu_user_annotation"))
        .filter_map(|(n, _, s, e)| {
            n.strip_prefix("ProfilerStep#").and_then(|k| k.trim().parse().ok()).map(|k| (k, *s, *e))
        })
        .collect();
    if steps.is_empty() {
        return bad(name, "no ProfilerStep#N events: not a trace of training steps".into());
    }
    if steps.len() > MAX_RUN_STEPS {
        return bad(name, format!("more than {MAX_RUN_STEPS} steps"));
    }
    steps.sort_by(|a, b| a.1.total_cmp(&b.1));
    for pair in steps.windows(2) {
        if pair[1].1 < pair[0].2 - 5e-3 {
            return bad(name, format!("ProfilerStep#{} overlaps ProfilerStep#{}", pair[1].0, pair[0].0));
        }
    }
    // The events by start: each step reads only those that start in it.
    let mut by_start: Vec<&(String, Option<String>, f64, f64)> = spans.iter().collect();
    by_start.sort_by(|a, b| a.2.total_cmp(&b.2));
    let mut opened = Vec::with_capacity(steps.len());
    for &(step, start, end) in &steps {
        // Writers round times to the nanosecond: a few of those either way.
        let inside = |s: f64, e: f64| s >= start - 5e-3 && e <= end + 5e-3;
        let first = by_start.partition_point(|e| e.2 < start - 5e-3);
        let in_step: Vec<&(String, Option<String>, f64, f64)> = by_start[first..]
            .iter()
            .take_while(|e| e.2 <= end + 5e-3)
            .filter(|(_, cat, s, e)| {
                !matches!(cat.as_deref(), Some("kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation"))
                    && inside(*s, *e)
            })
            .copied()
            .collect();
        let mut phases: Vec<(&'static str, f64, f64)> =
            in_step.iter().filter_map(|(n, _, s, e)| phase_of(n).map(|p| (p, *s, *e))).collect();
        let has = |phases: &[(&'static str, f64, f64)], name: &str| phases.iter().any(|(p, _, _)| *p == name);
        if !has(&phases, "optimizer") {
            // PyTorch's own name for the optimizer's step, where nobody
            // annotated one.
            phases.extend(
                in_step
                    .iter()
                    .filter(|(n, ..)| n.starts_with("Optimizer.step#"))
                    .map(|(_, _, s, e)| ("optimizer", *s, *e)),
            );
        }
        if !has(&phases, "backward") {
            // Unannotated: autograd's own ops (on its thread) from the first
            // to the last are the backward, and the time from the data (or
            // the step's start) to the backward is the forward and the loss.
            let autograd = in_step.iter().filter(|(n, ..)| n.starts_with("autograd::engine::evaluate_function"));
            let (from, to) =
                autograd.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, _, s, e)| (a.min(*s), b.max(*e)));
            if from < to {
                let data_end =
                    phases.iter().filter(|(p, _, e)| *p == "data" && *e <= from).map(|p| p.2).fold(start, f64::max);
                let optimizer_start =
                    phases.iter().filter(|(p, s, _)| *p == "optimizer" && *s >= from).map(|p| p.1).fold(end, f64::min);
                phases.push(("backward", from, to.min(optimizer_start)));
                if !has(&phases, "forward") && from > data_end {
                    phases.push(("forward", data_end, from));
                }
            }
        }
        phases.sort_by(|a, b| a.1.total_cmp(&b.1));
        // Phases nest in their step, not in each other: keep the outermost.
        let mut kept: Vec<(&'static str, f64, f64)> = Vec::new();
        for p in phases {
            if kept.last().is_some_and(|k| p.1 < k.2 - 5e-3) {
                continue;
            }
            kept.push(p);
        }
        let wall_ms = (end - start) / 1e3;
        let mut out: Vec<(&'static str, f64)> = kept.iter().map(|(p, s, e)| (*p, (e - s) / 1e3)).collect();
        let measured: f64 = out.iter().map(|(_, ms)| ms).sum();
        if wall_ms - measured > 1e-6 {
            out.push(("other", wall_ms - measured));
        }
        opened.push(OpenedStep { step, wall_ms, phases: out, loss: None, grad_norm: None, lr: None });
    }
    // Each counter belongs to the step it falls in (Stepscope writes them
    // at the step's start).
    for (counter, ts, value) in counters {
        let after = steps.partition_point(|s| s.1 <= ts + 5e-3);
        let Some(k) = after.checked_sub(1).filter(|&k| ts <= steps[k].2 + 5e-3) else { continue };
        let s = &mut opened[k];
        *match counter {
            "loss" => &mut s.loss,
            "grad_norm" => &mut s.grad_norm,
            _ => &mut s.lr,
        } = Some(value);
    }
    // The GPU: its events' union against their span, split by kind. As
    // HTA does, the events from the last step's start on are left out
    // where there are several steps (the last may be cut short).
    let cut = if steps.len() > 1 { steps[steps.len() - 1].1 } else { f64::INFINITY };
    let gpu: Vec<(&str, f64, f64)> = spans
        .iter()
        .filter(|(_, cat, s, _)| matches!(cat.as_deref(), Some("kernel" | "gpu_memcpy" | "gpu_memset")) && *s < cut)
        .map(|(n, _, s, e)| (n.as_str(), *s, *e))
        .collect();
    let gpu = (!gpu.is_empty()).then(|| {
        let union = |keep: &dyn Fn(&str) -> bool| {
            union_us(gpu.iter().filter(|(n, _, _)| keep(n)).map(|(_, s, e)| (*s, *e)).collect())
        };
        let first = gpu.iter().map(|g| g.1).fold(f64::INFINITY, f64::min);
        let last = gpu.iter().map(|g| g.2).fold(f64::NEG_INFINITY, f64::max);
        let (busy, longest_gap) = union(&|_| true);
        let (compute, _) = union(&is_computation);
        let (compute_or_communication, _) = union(&|n| is_computation(n) || is_communication(n));
        GpuTime {
            busy_ms: busy / 1e3,
            span_ms: (last - first) / 1e3,
            compute_ms: compute / 1e3,
            communication_ms: (compute_or_communication - compute) / 1e3,
            memory_ms: (busy - compute_or_communication) / 1e3,
            longest_gap_ms: longest_gap / 1e3,
        }
    });
    Ok((kind, RankRun { rank, steps: opened, gpu }))
}

/// HTA's kernel types, by name: `nccl…Kernel` communicates; a copy, a set
/// or a sync moves memory; the rest computes.
fn is_communication(name: &str) -> bool {
    name.strip_prefix("nccl").is_some_and(|rest| rest.contains("Kernel"))
}

fn is_computation(name: &str) -> bool {
    !(is_communication(name) || name.contains("Memcpy") || name.starts_with("Memset") || name.contains("Sync"))
}

/// Total length of the union of `spans`, and its longest gap (µs).
fn union_us(mut spans: Vec<(f64, f64)>) -> (f64, f64) {
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut total, mut gap) = (0.0, 0.0f64);
    let mut current: Option<(f64, f64)> = None;
    for (s, e) in spans {
        match current {
            Some((cs, ce)) if s <= ce => current = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                gap = gap.max(s - ce);
                current = Some((s, e));
            }
            None => current = Some((s, e)),
        }
    }
    (total + current.map_or(0.0, |(s, e)| e - s), gap)
}
