//! A run's steps as a trace in the Trace Event JSON that PyTorch's
//! profiler (Kineto) writes, so Perfetto, `chrome://tracing` and Holistic
//! Trace Analysis open it as they open a `torch.profiler` trace:
//!
//! - a `ProfilerStep#N` per step (`cat: "user_annotation"`), and nested
//!   inside it, one after another on the same track, the step's phases as
//!   `cpu_op` events: the data phase named
//!   `enumerate(DataLoader)#Stepscope.__next__` (where PyTorch's tools look
//!   for data-loader time), then `forward`, `backward`, `optimizer`,
//!   `checkpoint` and `logging` (the names the exported script's
//!   `record_function` annotations use);
//! - the GPU engine's passes as `kernel` events on the GPU's track (`pid` the
//!   device, `tid` and `args.stream` the queue), from its timestamp queries,
//!   each with its launch on the host (`cuda_runtime`, the submit) sharing
//!   its `args.correlation`, as Kineto links a kernel to its launch (HTA
//!   keeps only the kernels it can link so);
//! - counters (`ph: "C"`) for the loss, the gradient norm and the learning
//!   rate;
//! - `deviceProperties` and `distributedInfo` (`"rank"` and `"world_size"`,
//!   with the space HTA's rank pattern needs).
//!
//! A run on several ranks is one trace per rank, as torchrun's ranks each
//! write their own (`rank_traces`): rank 0's is the engine's step as it
//! lived it (it loads the rows, computes its shards, waits for the others
//! and reduces, then steps the optimizer); rank r's has the same
//! `ProfilerStep` spans, its own forward and backward from when rank 0's
//! forward began, and `communication` from its end until rank 0's
//! all-reduce ended (its wait for the slowest, then the reduce). Ranks past
//! the first do nothing else in a step (they are sent the parameters at
//! the next), so the rest of their step is empty track. HTA and `stepscope
//! open` read the files as a torchrun run's: the straggler is the rank the
//! others waited for.
//!
//! Times are microseconds from the trace's start on the host clock.

use std::fmt::Write;

use crate::engine::RankTimes;

/// One span of a track: [start, end) in µs.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub name: String,
    pub start_us: f64,
    pub end_us: f64,
}

/// One optimizer step.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceStep {
    pub step: u64,
    /// The step's span; `phases` lie inside it, in order, without overlap.
    pub start_us: f64,
    pub end_us: f64,
    pub phases: Vec<Span>,
    /// GPU passes, on the host clock.
    pub gpu: Vec<Span>,
    /// When the host submitted them.
    pub submit_us: Option<f64>,
    pub loss: f32,
    pub grad_norm: f32,
    pub lr: f64,
}

/// What the trace says of where it ran.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceInfo {
    /// The host process (`pid` of the CPU track).
    pub pid: u32,
    pub rank: u32,
    pub world_size: u32,
    /// The GPU adapter's name, for a GPU-engine run.
    pub device: Option<String>,
}

/// The data phase's event name, as PyTorch's tools recognise a DataLoader.
pub const DATA_EVENT: &str = "enumerate(DataLoader)#Stepscope.__next__";
/// The GPU track's stream id (`tid` and `args.stream`).
pub const GPU_STREAM: u32 = 7;
const CPU_TID: u32 = 1;
/// The span each pass's launch event is drawn with (the submit is one
/// call; its passes are launched within it).
const LAUNCH_US: f64 = 0.1;

/// The trace of `steps` as Trace Event JSON.
pub fn trace_json(info: &TraceInfo, steps: &[TraceStep]) -> String {
    let mut out = String::new();
    let devices = match &info.device {
        Some(name) => format!(r#"[{{"id": 0, "name": {}}}]"#, quoted(name)),
        None => "[]".to_string(),
    };
    write!(
        out,
        r#"{{"schemaVersion": 1, "traceName": "stepscope", "displayTimeUnit": "ms", "deviceProperties": {devices}, "distributedInfo": {{"backend": "none", "rank": {}, "world_size": {}}}, "traceEvents": ["#,
        info.rank, info.world_size
    )
    .expect("String");
    let pid = info.pid;
    let mut events: Vec<String> = vec![
        format!(r#"{{"ph": "M", "name": "process_name", "pid": {pid}, "tid": 0, "args": {{"name": "stepscope"}}}}"#),
        format!(
            r#"{{"ph": "M", "name": "thread_name", "pid": {pid}, "tid": {CPU_TID}, "args": {{"name": "training"}}}}"#
        ),
    ];
    if info.device.is_some() {
        events.push(r#"{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}}"#.into());
        events.push(format!(
            r#"{{"ph": "M", "name": "thread_name", "pid": 0, "tid": {GPU_STREAM}, "args": {{"name": "stream {GPU_STREAM}"}}}}"#
        ));
    }
    let mut correlation = 1u64;
    for s in steps {
        events.push(complete(
            "user_annotation",
            &format!("ProfilerStep#{}", s.step),
            pid,
            CPU_TID,
            s.start_us,
            s.end_us,
            "",
        ));
        for p in &s.phases {
            events.push(complete("cpu_op", &p.name, pid, CPU_TID, p.start_us, p.end_us, ""));
        }
        for (i, g) in s.gpu.iter().enumerate() {
            let args = format!(r#", "args": {{"device": 0, "stream": {GPU_STREAM}, "correlation": {correlation}}}"#);
            if let Some(at) = s.submit_us {
                let launch = at + i as f64 * LAUNCH_US;
                let host_args = format!(r#", "args": {{"correlation": {correlation}}}"#);
                events.push(complete(
                    "cuda_runtime",
                    "wgpu::Queue::submit",
                    pid,
                    CPU_TID,
                    launch,
                    launch + LAUNCH_US,
                    &host_args,
                ));
            }
            correlation += 1;
            events.push(complete("kernel", &g.name, 0, GPU_STREAM, g.start_us, g.end_us, &args));
        }
        for (name, value) in [("loss", f64::from(s.loss)), ("grad_norm", f64::from(s.grad_norm)), ("lr", s.lr)] {
            if value.is_finite() {
                events.push(format!(
                    r#"{{"ph": "C", "name": "{name}", "pid": {pid}, "tid": {CPU_TID}, "ts": {:.3}, "args": {{"{name}": {value}}}}}"#,
                    s.start_us
                ));
            }
        }
    }
    out.push_str(&events.join(",\n"));
    out.push_str("]}\n");
    out
}

/// A complete event. Times are written to the nanosecond (3 decimals of a
/// µs), the duration as the difference of the rounded start and end, so
/// that events which touch in the trace still touch once read back.
fn complete(cat: &str, name: &str, pid: u32, tid: u32, start: f64, end: f64, args: &str) -> String {
    let round = |t: f64| (t * 1e3).round() / 1e3;
    let (start, end) = (round(start), round(end.max(start)));
    format!(
        r#"{{"ph": "X", "cat": "{cat}", "name": {}, "pid": {pid}, "tid": {tid}, "ts": {start:.3}, "dur": {:.3}{args}}}"#,
        quoted(name),
        end - start
    )
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// Each rank's trace of `steps` (rank 0's, as the engine lived them),
/// `ranks[i]` the ranks' parts of `steps[i]` (`StepMetrics::ranks`, empty
/// for a step on one rank): (rank, its trace JSON), one per rank that any
/// step had, rank 0 first. `info.rank` and `info.world_size` are set per
/// trace; rank r's process id is `info.pid + r`.
pub fn rank_traces(info: &TraceInfo, steps: &[TraceStep], ranks: &[Vec<RankTimes>]) -> Vec<(u32, String)> {
    let world = ranks.iter().map(Vec::len).max().unwrap_or(0).max(1);
    (0..world)
        .map(|r| {
            let info = TraceInfo {
                pid: info.pid + r as u32,
                rank: r as u32,
                world_size: world as u32,
                device: if r == 0 { info.device.clone() } else { None },
            };
            let own: Vec<TraceStep> = if r == 0 {
                steps.to_vec()
            } else {
                steps.iter().zip(ranks).filter_map(|(s, parts)| rank_step(s, parts.get(r)?)).collect()
            };
            (r as u32, trace_json(&info, &own))
        })
        .collect()
}

/// Rank r's part of rank 0's step `s`: the same step span, its forward and
/// backward from where rank 0's forward began, then communication until
/// rank 0's ended (never past the step's end).
fn rank_step(s: &TraceStep, part: &RankTimes) -> Option<TraceStep> {
    let start = s.phases.iter().find(|p| p.name == "forward").map_or(s.start_us, |p| p.start_us);
    let reduced = s.phases.iter().rev().find(|p| p.name == "communication").map(|p| p.end_us)?;
    let forward_end = (start + part.forward_ms * 1e3).min(s.end_us);
    let backward_end = (forward_end + part.backward_ms * 1e3).min(s.end_us);
    let mut phases = vec![
        Span { name: "forward".into(), start_us: start, end_us: forward_end },
        Span { name: "backward".into(), start_us: forward_end, end_us: backward_end },
    ];
    if reduced > backward_end {
        phases.push(Span { name: "communication".into(), start_us: backward_end, end_us: reduced.min(s.end_us) });
    }
    phases.retain(|p| p.end_us > p.start_us);
    Some(TraceStep { phases, gpu: Vec::new(), submit_us: None, ..s.clone() })
}

/// A part of a step: its span (µs) and the phases measured inside it,
/// (name, ms), in the order they ran.
pub type Part = (f64, f64, Vec<(&'static str, f64)>);

/// Lays a step's phases out on its wall-clock span: `parts` are the
/// spans the engine ran (one per part of a step taken in parts, in order),
/// each with the milliseconds of each phase the engine measured inside
/// it, (name, ms) in the order they ran. Within a part the phases follow
/// one another with their measured lengths and the last takes the part's
/// rest, so the phases tile the part exactly and add up to it.
pub fn tile(parts: &[Part]) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for (start, end, phases) in parts {
        let mut at = *start;
        let phases: Vec<&(&str, f64)> = phases.iter().filter(|(_, ms)| *ms > 0.0).collect();
        for (i, (name, ms)) in phases.iter().enumerate() {
            let stop = if i + 1 == phases.len() { *end } else { (at + ms * 1e3).min(*end) };
            match spans.last_mut() {
                // A phase that goes on from the last part's (a layer at a
                // time): one span.
                Some(last) if last.name == *name && last.end_us == at => last.end_us = stop,
                _ => spans.push(Span { name: (*name).to_string(), start_us: at, end_us: stop }),
            }
            at = stop;
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_tile_their_parts_and_the_json_reads_back() {
        let parts = vec![
            (0.0, 100.0, vec![(DATA_EVENT, 0.01), ("forward", 0.05)]),
            (100.0, 180.0, vec![("forward", 0.07)]),
            (180.0, 400.0, vec![("backward", 0.2)]),
            (400.0, 420.0, vec![("optimizer", 0.015)]),
        ];
        let spans = tile(&parts);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, [DATA_EVENT, "forward", "backward", "optimizer"]);
        assert_eq!((spans[0].start_us, spans[0].end_us, spans[1].end_us), (0.0, 10.0, 180.0));
        for pair in spans.windows(2) {
            assert_eq!(pair[0].end_us, pair[1].start_us, "no gap, no overlap");
        }
        let step = TraceStep {
            step: 3,
            start_us: 0.0,
            end_us: 420.0,
            phases: spans,
            gpu: vec![Span { name: "forward".into(), start_us: 5.0, end_us: 50.0 }],
            submit_us: Some(2.0),
            loss: 0.5,
            grad_norm: f32::NAN,
            lr: 0.01,
        };
        let info = TraceInfo { pid: 42, rank: 0, world_size: 1, device: Some("a \"GPU\"".into()) };
        let text = trace_json(&info, &[step]);
        assert!(text.contains(r#""rank": 0"#), "HTA's pattern");
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let events = json["traceEvents"].as_array().unwrap();
        let names: Vec<&str> = events.iter().filter(|e| e["ph"] == "X").map(|e| e["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["ProfilerStep#3", DATA_EVENT, "forward", "backward", "optimizer", "wgpu::Queue::submit", "forward"]
        );
        let correlations: Vec<&serde_json::Value> =
            events.iter().filter_map(|e| e["args"].get("correlation")).collect();
        assert_eq!(correlations, [&serde_json::json!(1), &serde_json::json!(1)], "the kernel and its launch");
        assert_eq!(events.iter().filter(|e| e["cat"] == "kernel").count(), 1);
        assert_eq!(events.iter().filter(|e| e["ph"] == "C").count(), 2, "a NaN counter is left out");
        assert_eq!(json["deviceProperties"][0]["name"], "a \"GPU\"");
    }
}
