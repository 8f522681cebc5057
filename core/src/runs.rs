//! Runs from outside, opened read-only: metrics logs (JSON Lines from
//! `stepscope train --metrics` or the exported PyTorch script, one file per
//! rank), Stepscope traces (`--trace`, `download-trace`) and PyTorch
//! profiler traces (Kineto's Trace Event JSON, `.json` or `.json.gz`). Each
//! becomes steps with their phases in milliseconds, so the step anatomy can
//! be drawn for a run that happened elsewhere: the share of time spent
//! waiting for data, the GPU's idle share, and each rank's step time.
//!
//! Everything here is hostile until checked: sizes are bounded before
//! anything is decompressed or parsed, a gzip stream stops at its limit (a
//! gzip bomb is refused, not inflated), JSON nesting is bounded by the
//! parser, and a log whose steps go backwards or a trace whose steps
//! overlap is refused with a message naming the line or event.

use std::io::Read;

use crate::error::{Error, Result};

/// Largest file read (compressed or not).
pub const MAX_RUN_FILE_BYTES: usize = 256 << 20;
/// Largest trace once decompressed.
pub const MAX_TRACE_JSON_BYTES: usize = 512 << 20;

/// How much one opening may read: the command line's limits, or the
/// page's smaller ones (its worker's WebAssembly memory holds the files,
/// their text and the parsed events at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// All files together, as given (compressed or not).
    pub total_bytes: usize,
    /// Each file once decompressed.
    pub json_bytes: usize,
}

impl RunLimits {
    pub const CLI: RunLimits = RunLimits { total_bytes: MAX_RUN_FILE_BYTES * 4, json_bytes: MAX_TRACE_JSON_BYTES };
    pub const PAGE: RunLimits = RunLimits { total_bytes: 64 << 20, json_bytes: 128 << 20 };
}
/// Most steps a file may hold.
pub const MAX_RUN_STEPS: usize = 1_000_000;
/// Most ranks opened at once.
pub const MAX_RANKS: usize = 1024;
/// Longest duration believed, in ms (a day): longer is a broken clock.
const MAX_MS: f64 = 86_400_000.0;

/// Where waiting for data starts to matter, and where it dominates (the
/// shares of step time the slow-loader lesson teaches).
pub const DATA_NOTICEABLE: f64 = 0.05;
pub const DATA_BOTTLENECK: f64 = 0.2;
/// A rank this much slower than the median rank is a straggler.
pub const STRAGGLER: f64 = 1.1;

/// What a share of step time spent waiting for data means.
pub fn data_verdict(share: f64) -> &'static str {
    if share >= DATA_BOTTLENECK {
        "the data loader is the bottleneck: the step waits for its rows; load ahead (prefetch, more workers)"
    } else if share >= DATA_NOTICEABLE {
        "noticeable: loading ahead would win some of it back"
    } else {
        "the data loader keeps up"
    }
}

/// One rank against the others.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankRow {
    pub rank: u32,
    /// Its median step, ms, and that against the median over ranks.
    pub step_ms: f64,
    pub ratio: f64,
    pub straggler: bool,
    /// Its share of step time in communication.
    pub communication_share: f64,
}

/// What a file held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Metrics,
    StepscopeTrace,
    TorchTrace,
}

impl RunKind {
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Metrics => "metrics",
            RunKind::StepscopeTrace => "stepscope-trace",
            RunKind::TorchTrace => "torch-trace",
        }
    }
}

/// One step: its wall time and the phases measured in it, in the order
/// they ran (`data`, `forward`, `backward`, `optimizer`, `communication`,
/// `checkpoint`, `logging`, and `other` for the rest of a traced step).
#[derive(Clone, Debug, PartialEq)]
pub struct OpenedStep {
    pub step: u64,
    pub wall_ms: f64,
    pub phases: Vec<(&'static str, f64)>,
    /// The step's loss, gradient norm and learning rate, where the file
    /// has them (a metrics log's fields, a Stepscope trace's counters).
    pub loss: Option<f64>,
    pub grad_norm: Option<f64>,
    pub lr: Option<f64>,
}

impl OpenedStep {
    pub fn phase_ms(&self, name: &str) -> f64 {
        // From +0.0: an empty sum of f64 is −0.0, which prints as "-0.0".
        self.phases.iter().filter(|(n, _)| *n == name).fold(0.0, |sum, (_, ms)| sum + ms)
    }
}

/// One rank's steps, and its GPU's busy and spanned time where the file
/// has GPU events.
#[derive(Clone, Debug, PartialEq)]
pub struct RankRun {
    pub rank: u32,
    pub steps: Vec<OpenedStep>,
    pub gpu: Option<GpuTime>,
}

/// The GPU's time as Holistic Trace Analysis's temporal breakdown splits
/// it (over the steps before the last, where there are several): the span from its first event to its last; busy, the union of its
/// events; of that, compute (the union of computation kernels), then
/// communication (NCCL kernels) and memory (copies, sets, syncs) where no
/// computation ran. Idle is the span less busy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTime {
    pub busy_ms: f64,
    pub span_ms: f64,
    pub compute_ms: f64,
    pub communication_ms: f64,
    pub memory_ms: f64,
    /// The longest stretch with nothing on the GPU.
    pub longest_gap_ms: f64,
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

#[derive(Clone, Debug, PartialEq)]
pub struct OpenedRun {
    pub kind: RunKind,
    pub ranks: Vec<RankRun>,
}

fn bad<T>(what: &str, why: String) -> Result<T> {
    Err(Error::Other(format!("{what}: {why}")))
}

/// The names a step's phases go by in the files, and what they are.
fn phase_of(name: &str) -> Option<&'static str> {
    Some(match name {
        _ if name.starts_with("enumerate(DataLoader)") => "data",
        "forward" => "forward",
        "backward" => "backward",
        "optimizer" => "optimizer",
        "communication" => "communication",
        "checkpoint" => "checkpoint",
        "logging" => "logging",
        "submit and wait for the GPU" => "gpu wait",
        "page" => "page",
        _ => return None,
    })
}

/// Opens `files` (name, bytes) as one run: one metrics log per rank, or
/// traces (each its rank from `distributedInfo`). Mixed kinds are refused.
pub fn open_run(files: &[(&str, &[u8])]) -> Result<OpenedRun> {
    open_run_within(files, RunLimits::CLI)
}

/// `open_run` within `limits`: past them, refused with the limit named.
pub fn open_run_within(files: &[(&str, &[u8])], limits: RunLimits) -> Result<OpenedRun> {
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    if total > limits.total_bytes {
        return bad("open", format!("{total} bytes in all; at most {} are opened at once here", limits.total_bytes));
    }
    if files.is_empty() {
        return bad("open", "no file given".into());
    }
    if files.len() > MAX_RANKS {
        return bad("open", format!("{} files; at most {MAX_RANKS} ranks are opened at once", files.len()));
    }
    let mut kind: Option<RunKind> = None;
    let mut ranks = Vec::new();
    for (i, (name, bytes)) in files.iter().enumerate() {
        if bytes.len() > MAX_RUN_FILE_BYTES {
            return bad(name, format!("{} bytes; at most {MAX_RUN_FILE_BYTES} are read", bytes.len()));
        }
        let (this, rank) = open_file(name, bytes, i as u32, limits.json_bytes)?;
        if let Some(k) = kind.filter(|&k| k != this) {
            return bad(
                name,
                format!("a {} file among {} files: open one run's files together", this.name(), k.name()),
            );
        }
        kind = Some(this);
        if ranks.iter().any(|r: &RankRun| r.rank == rank.rank) {
            return bad(name, format!("rank {} appears in two files", rank.rank));
        }
        ranks.push(rank);
    }
    ranks.sort_by_key(|r| r.rank);
    Ok(OpenedRun { kind: kind.expect("at least one file"), ranks })
}

fn open_file(name: &str, bytes: &[u8], index: u32, json_limit: usize) -> Result<(RunKind, RankRun)> {
    let json = if bytes.starts_with(&[0x1f, 0x8b]) { gunzip_limited(name, bytes, json_limit)? } else { bytes.to_vec() };
    let first = json.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return bad(name, "neither a metrics log (JSON Lines) nor a trace (a JSON object)".into());
    }
    // A trace is one object holding `traceEvents`; a metrics log is one
    // object per line.
    let text = std::str::from_utf8(&json).map_err(|e| Error::Other(format!("{name}: not UTF-8 text: {e}")))?;
    if text.contains("\"traceEvents\"") {
        let (kind, rank) = read_trace(name, text)?;
        Ok((kind, rank))
    } else {
        Ok((RunKind::Metrics, read_metrics_log(name, text, index)?))
    }
}

/// Inflates at most `limit` bytes: a larger stream is refused.
fn gunzip_limited(name: &str, bytes: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut limited = flate2::read::GzDecoder::new(bytes).take(limit as u64 + 1);
    limited.read_to_end(&mut out).map_err(|e| Error::Other(format!("{name}: not a readable gzip stream ({e})")))?;
    if out.len() > limit {
        return bad(name, format!("inflates past {limit} bytes: refused"));
    }
    Ok(out)
}

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
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| Error::Other(format!("{at}: not JSON ({e})")))?;
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
fn read_trace(name: &str, text: &str) -> Result<(RunKind, RankRun)> {
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
    let mut opened = Vec::with_capacity(steps.len());
    for &(step, start, end) in &steps {
        // Writers round times to the nanosecond: a few of those either way.
        let inside = |s: f64, e: f64| s >= start - 5e-3 && e <= end + 5e-3;
        let mut phases: Vec<(&'static str, f64, f64)> = spans
            .iter()
            .filter(|(_, cat, s, e)| {
                !matches!(cat.as_deref(), Some("kernel" | "gpu_memcpy" | "gpu_memset" | "gpu_user_annotation"))
                    && inside(*s, *e)
            })
            .filter_map(|(n, _, s, e)| phase_of(n).map(|p| (p, *s, *e)))
            .collect();
        if !phases.iter().any(|(p, _, _)| *p == "optimizer") {
            // PyTorch's own name for the optimizer's step, where nobody
            // annotated one.
            phases.extend(
                spans
                    .iter()
                    .filter(|(n, _, s, e)| n.starts_with("Optimizer.step#") && inside(*s, *e))
                    .map(|(_, _, s, e)| ("optimizer", *s, *e)),
            );
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

impl OpenedRun {
    /// Steps over all ranks.
    pub fn steps(&self) -> usize {
        self.ranks.iter().map(|r| r.steps.len()).sum()
    }

    /// The share of step time spent in the data phase, over all ranks.
    pub fn data_share(&self) -> f64 {
        let (mut data, mut wall) = (0.0, 0.0);
        for s in self.ranks.iter().flat_map(|r| &r.steps) {
            data += s.phase_ms("data");
            wall += s.wall_ms;
        }
        if wall > 0.0 {
            data / wall
        } else {
            0.0
        }
    }

    /// The GPU's idle share of its span, over the ranks that have GPU
    /// events; None where none has.
    pub fn gpu_idle_share(&self) -> Option<f64> {
        self.gpu_breakdown().map(|[.., idle]| idle)
    }

    /// The GPU's time over the ranks that have GPU events, as shares of
    /// their spans: (compute, communication, memory, idle), adding up to 1.
    pub fn gpu_breakdown(&self) -> Option<[f64; 4]> {
        let sum = self.ranks.iter().filter_map(|r| r.gpu).fold(GpuTime::default(), |a, g| GpuTime {
            busy_ms: a.busy_ms + g.busy_ms,
            span_ms: a.span_ms + g.span_ms,
            compute_ms: a.compute_ms + g.compute_ms,
            communication_ms: a.communication_ms + g.communication_ms,
            memory_ms: a.memory_ms + g.memory_ms,
            longest_gap_ms: a.longest_gap_ms.max(g.longest_gap_ms),
        });
        (sum.span_ms > 0.0).then(|| {
            let share = |ms: f64| ms / sum.span_ms;
            [share(sum.compute_ms), share(sum.communication_ms), share(sum.memory_ms), share(sum.span_ms - sum.busy_ms)]
        })
    }

    /// The longest stretch with nothing on any rank's GPU, ms.
    pub fn gpu_longest_gap_ms(&self) -> Option<f64> {
        self.ranks.iter().filter_map(|r| r.gpu).map(|g| g.longest_gap_ms).reduce(f64::max)
    }

    /// Each rank's median step time, ms.
    pub fn rank_step_ms(&self) -> Vec<(u32, f64)> {
        self.ranks.iter().map(|r| (r.rank, median(r.steps.iter().map(|s| s.wall_ms).collect()))).collect()
    }

    /// Each rank's median step against the median over ranks, and its
    /// share of time in communication.
    pub fn rank_rows(&self) -> Vec<RankRow> {
        let per_rank = self.rank_step_ms();
        let median_ms = median(per_rank.iter().map(|r| r.1).collect());
        per_rank
            .into_iter()
            .zip(&self.ranks)
            .map(|((rank, step_ms), r)| {
                let ratio = step_ms / median_ms.max(f64::MIN_POSITIVE);
                let wall: f64 = r.steps.iter().map(|s| s.wall_ms).sum();
                let communication: f64 = r.steps.iter().map(|s| s.phase_ms("communication")).sum();
                RankRow {
                    rank,
                    step_ms,
                    ratio,
                    straggler: ratio >= STRAGGLER,
                    communication_share: if wall > 0.0 { communication / wall } else { 0.0 },
                }
            })
            .collect()
    }

    /// Mean milliseconds of each phase per step, over all ranks, in the
    /// order they first appear.
    pub fn mean_phases(&self) -> Vec<(&'static str, f64)> {
        let mut sums: Vec<(&'static str, f64)> = Vec::new();
        for s in self.ranks.iter().flat_map(|r| &r.steps) {
            for &(p, ms) in &s.phases {
                match sums.iter_mut().find(|(n, _)| *n == p) {
                    Some(entry) => entry.1 += ms,
                    None => sums.push((p, ms)),
                }
            }
        }
        let n = self.steps().max(1) as f64;
        sums.into_iter().map(|(p, ms)| (p, ms / n)).collect()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests;
