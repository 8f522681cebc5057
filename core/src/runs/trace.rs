//! Traces: Stepscope's and PyTorch's profiler's (Kineto) Trace Event JSON,
//! read as steps with their phases, and the GPU's time split as Holistic
//! Trace Analysis splits it.

use super::{bad, phase_of, GpuTime, OpenedStep, RankRun, RunKind, MAX_MS, MAX_RANKS, MAX_RUN_STEPS};
use crate::error::{Error, Result};

/// Writers round times to the nanosecond: a few of those either way (µs).
const TOL: f64 = 5e-3;

// The trace is read into these types and nothing else: a key they name
// that appears twice in one object is refused (serde's `duplicate field`),
// while what they do not name, the free-form `args` other tools write
// among them, is skipped unread, repeats and all (ARCHITECTURE.md: why a
// trace is not held to `json::unique_keys` as a whole).
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
    args: Option<Args>,
}

/// A counter's value, under its own name (`{"loss": 0.5}`).
#[derive(serde::Deserialize)]
struct Args {
    #[serde(default)]
    loss: Option<serde_json::Value>,
    #[serde(default)]
    grad_norm: Option<serde_json::Value>,
    #[serde(default)]
    lr: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct DistributedInfo {
    #[serde(default)]
    rank: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct TraceFile {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Event>,
    #[serde(rename = "distributedInfo", default)]
    distributed_info: Option<DistributedInfo>,
    #[serde(rename = "traceName", default)]
    trace_name: Option<String>,
}

/// A complete event (`ph: "X"`): its name, category and start and end, µs.
struct Span {
    name: String,
    cat: Option<String>,
    start: f64,
    end: f64,
}

impl Span {
    fn on_gpu(&self) -> bool {
        matches!(self.cat.as_deref(), Some("kernel" | "gpu_memcpy" | "gpu_memset"))
    }
}

/// One `ProfilerStep#N`: its number, start and end, µs.
type Step = (u64, f64, f64);

/// A trace: its `ProfilerStep#N` spans (which must not overlap), the
/// phases inside each (named as Stepscope and the exported script name
/// them, or PyTorch's DataLoader and `Optimizer.step#…`), `other` for the
/// rest; GPU events (`kernel`, `gpu_memcpy`, `gpu_memset`) give the GPU's
/// busy time and span. Every stage is a sort and a sweep, so the reading
/// is linear in the events after n log n sorts, whatever the shape (steps
/// of zero length, all at one instant; `tests/linear.rs` counts it).
pub(super) fn read_trace(name: &str, text: &str) -> Result<(RunKind, RankRun)> {
    let file: TraceFile = serde_json::from_str(text).map_err(|e| Error::Other(format!("{name}: not a trace ({e})")))?;
    let kind =
        if file.trace_name.as_deref() == Some("stepscope") { RunKind::StepscopeTrace } else { RunKind::TorchTrace };
    let rank = match file.distributed_info.and_then(|d| d.rank) {
        None => 0,
        Some(r) => match r.as_u64().filter(|&r| r < MAX_RANKS as u64) {
            Some(r) => r as u32,
            None => return bad(name, format!("distributedInfo.rank {r} is not a rank")),
        },
    };
    let mut spans: Vec<Span> = Vec::new();
    // Counters (`ph: "C"`) of the loss, gradient norm and learning rate:
    // (name, ts, value).
    let mut counters: Vec<(&'static str, f64, f64)> = Vec::new();
    tally(file.trace_events.len() as u64);
    for (i, e) in file.trace_events.into_iter().enumerate() {
        if e.ph == "C" {
            let value = |args: Args| match e.name.as_str() {
                "loss" => args.loss.map(|v| ("loss", v)),
                "grad_norm" => args.grad_norm.map(|v| ("grad_norm", v)),
                "lr" => args.lr.map(|v| ("lr", v)),
                _ => None,
            };
            if let (Some((c, v)), Some(ts)) = (e.args.and_then(value), e.ts) {
                if let Some(v) = v.as_f64().filter(|v| v.is_finite() && ts.is_finite()) {
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
        spans.push(Span { name: e.name, cat: e.cat, start: ts, end: ts + dur });
    }
    let mut steps: Vec<Step> = spans
        .iter()
        // Kineto draws each step on the GPU's track too (gpu_user_annotation).
        .filter(|s| s.cat.as_deref() != Some("gpu_user_annotation"))
        .filter_map(|s| {
            s.name.strip_prefix("ProfilerStep#").and_then(|k| k.trim().parse().ok()).map(|k| (k, s.start, s.end))
        })
        .collect();
    if steps.is_empty() {
        return bad(name, "no ProfilerStep#N events: not a trace of training steps".into());
    }
    if steps.len() > MAX_RUN_STEPS {
        return bad(name, format!("more than {MAX_RUN_STEPS} steps"));
    }
    steps.sort_by(|a, b| counted(a.1.total_cmp(&b.1)));
    for pair in steps.windows(2) {
        if pair[1].1 < pair[0].2 - TOL {
            return bad(name, format!("ProfilerStep#{} overlaps ProfilerStep#{}", pair[1].0, pair[0].0));
        }
    }
    // The CPU's events by start, each given to its one step.
    let mut cpu: Vec<&Span> =
        spans.iter().filter(|s| !s.on_gpu() && s.cat.as_deref() != Some("gpu_user_annotation")).collect();
    cpu.sort_by(|a, b| counted(a.start.total_cmp(&b.start)));
    let (first_of, order) = assign(&steps, &cpu);
    let mut in_step: Vec<&Span> = Vec::new();
    let mut opened: Vec<OpenedStep> = Vec::with_capacity(steps.len());
    for (k, &step) in steps.iter().enumerate() {
        in_step.clear();
        in_step.extend(order[first_of[k]..first_of[k + 1]].iter().map(|&i| cpu[i as usize]));
        opened.push(open_step(step, &in_step));
    }
    // Each counter belongs to the step it falls in (Stepscope writes them
    // at the step's start): counters and steps swept in order of time.
    counters.sort_by(|a, b| counted(a.1.total_cmp(&b.1)));
    let mut after = 0;
    for (counter, ts, value) in counters {
        while after < steps.len() && steps[after].1 <= ts + TOL {
            after += 1;
            tally(1);
        }
        tally(1);
        let Some(k) = after.checked_sub(1).filter(|&k| ts <= steps[k].2 + TOL) else { continue };
        let s = &mut opened[k];
        *match counter {
            "loss" => &mut s.loss,
            "grad_norm" => &mut s.grad_norm,
            _ => &mut s.lr,
        } = Some(value);
    }
    Ok((kind, RankRun { rank, steps: opened, gpu: gpu_time(&spans, &steps) }))
}

/// Gives each of `events` (sorted by start) to the one step it lies in,
/// the latest-starting step that holds it: one sweep, since both go in
/// order of start. Returns, for step k, its events as
/// `order[first_of[k]..first_of[k + 1]]` (indices into `events`, by start).
///
/// Steps do not overlap (by more than `TOL`), so an event lies in at most
/// the two latest steps that start before it, unless it is a few
/// nanoseconds long among zero-length steps, where it is left out and
/// loses nothing. An event that fits two steps (zero-length steps at one
/// instant, a zero-length event on the boundary of two) is counted once,
/// in the later, where reading every step's window would count it in each
/// and visit it once a step: n² for n zero-length steps at one instant.
fn assign(steps: &[Step], events: &[&Span]) -> (Vec<usize>, Vec<u32>) {
    let mut owner: Vec<u32> = Vec::with_capacity(events.len());
    let mut first_of = vec![0usize; steps.len() + 1];
    let mut started = 0;
    for e in events {
        while started < steps.len() && steps[started].1 - TOL <= e.start {
            started += 1;
            tally(1);
        }
        let holds = |k: usize| {
            tally(1);
            let (_, start, end) = steps[k];
            e.start >= start - TOL && e.end <= end + TOL
        };
        let k = (started.saturating_sub(2)..started).rev().find(|&k| holds(k));
        owner.push(k.map_or(u32::MAX, |k| k as u32));
        if let Some(k) = k {
            first_of[k + 1] += 1;
        }
    }
    for k in 0..steps.len() {
        first_of[k + 1] += first_of[k];
    }
    let mut next = first_of.clone();
    let mut order = vec![0u32; first_of[steps.len()]];
    for (i, &k) in owner.iter().enumerate().filter(|(_, &k)| k != u32::MAX) {
        order[next[k as usize]] = i as u32;
        next[k as usize] += 1;
    }
    tally(owner.len() as u64 + steps.len() as u64);
    (first_of, order)
}

/// One step from the CPU's events in it: the phases Stepscope and the
/// exported script annotate, PyTorch's own names where nobody annotated,
/// and `other` for the rest of its wall time.
fn open_step((step, start, end): Step, in_step: &[&Span]) -> OpenedStep {
    tally(in_step.len() as u64);
    let mut phases: Vec<(&'static str, f64, f64)> =
        in_step.iter().filter_map(|s| phase_of(&s.name).map(|p| (p, s.start, s.end))).collect();
    let has = |phases: &[(&'static str, f64, f64)], name: &str| phases.iter().any(|(p, _, _)| *p == name);
    if !has(&phases, "optimizer") {
        // PyTorch's own name for the optimizer's step, where nobody
        // annotated one.
        phases.extend(
            in_step.iter().filter(|s| s.name.starts_with("Optimizer.step#")).map(|s| ("optimizer", s.start, s.end)),
        );
    }
    if !has(&phases, "backward") {
        // Unannotated: autograd's own ops (on its thread) from the first
        // to the last are the backward, and the time from the data (or
        // the step's start) to the backward is the forward and the loss.
        let autograd = in_step.iter().filter(|s| s.name.starts_with("autograd::engine::evaluate_function"));
        let (from, to) = autograd.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), s| (a.min(s.start), b.max(s.end)));
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
    tally(4 * phases.len() as u64);
    phases.sort_by(|a, b| counted(a.1.total_cmp(&b.1)));
    // Phases nest in their step, not in each other: keep the outermost.
    let mut kept: Vec<(&'static str, f64, f64)> = Vec::new();
    for p in phases {
        if kept.last().is_some_and(|k| p.1 < k.2 - TOL) {
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
    OpenedStep { step, wall_ms, phases: out, loss: None, grad_norm: None, lr: None }
}

/// The GPU: its events' union against their span, split by kind. As HTA
/// does, the events from the last step's start on are left out where
/// there are several steps (the last may be cut short). None without GPU
/// events.
fn gpu_time(spans: &[Span], steps: &[Step]) -> Option<GpuTime> {
    let cut = if steps.len() > 1 { steps[steps.len() - 1].1 } else { f64::INFINITY };
    let gpu: Vec<(&str, f64, f64)> =
        spans.iter().filter(|s| s.on_gpu() && s.start < cut).map(|s| (s.name.as_str(), s.start, s.end)).collect();
    if gpu.is_empty() {
        return None;
    }
    tally(gpu.len() as u64);
    let union = |keep: &dyn Fn(&str) -> bool| {
        union_us(gpu.iter().filter(|(n, _, _)| keep(n)).map(|(_, s, e)| (*s, *e)).collect())
    };
    let first = gpu.iter().map(|g| g.1).fold(f64::INFINITY, f64::min);
    let last = gpu.iter().map(|g| g.2).fold(f64::NEG_INFINITY, f64::max);
    let (busy, longest_gap) = union(&|_| true);
    let (compute, _) = union(&is_computation);
    let (compute_or_communication, _) = union(&|n| is_computation(n) || is_communication(n));
    Some(GpuTime {
        busy_ms: busy / 1e3,
        span_ms: (last - first) / 1e3,
        compute_ms: compute / 1e3,
        communication_ms: (compute_or_communication - compute) / 1e3,
        memory_ms: (busy - compute_or_communication) / 1e3,
        longest_gap_ms: longest_gap / 1e3,
    })
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
    tally(spans.len() as u64);
    spans.sort_by(|a, b| counted(a.0.total_cmp(&b.0)));
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

#[cfg(test)]
thread_local! {
    static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts `n` operations of the reading (the tests' measure of its cost;
/// nothing outside them).
#[inline]
pub(super) fn tally(n: u64) {
    #[cfg(test)]
    WORK.with(|w| w.set(w.get() + n));
    #[cfg(not(test))]
    let _ = n;
}

/// A sort's comparison, tallied.
#[inline]
fn counted(order: std::cmp::Ordering) -> std::cmp::Ordering {
    tally(1);
    order
}

/// What `f` returns and the operations it tallied.
#[cfg(test)]
pub(super) fn work<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = WORK.with(|w| w.get());
    let out = f();
    (out, WORK.with(|w| w.get()) - before)
}
