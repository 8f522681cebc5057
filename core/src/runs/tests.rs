use super::*;
use crate::export::trace::{rank_traces, tile, trace_json, Span, TraceInfo, TraceStep, DATA_EVENT};

fn gz(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn err(files: &[(&str, &[u8])]) -> String {
    open_run(files).unwrap_err().to_string()
}

/// Two ranks of the exported script's metrics (with its communication),
/// one of them slower: the per-rank step times and the data share.
#[test]
fn metrics_logs_open_one_per_rank() {
    let line = |step: u64, data: f64, comm: f64| {
        format!(
            r#"{{"step": {step}, "loss": 0.5, "grad_norm": 1.0, "lr": 0.01, "data_ms": {data}, "forward_ms": 2.0, "backward_ms": 4.0, "optimizer_ms": 1.0, "communication_ms": {comm}, "checkpoint_ms": 0.0, "logging_ms": 0.5, "timing": "cpu"}}"#
        )
    };
    let fast: String = (10..14).map(|s| line(s, 0.5, 1.0) + "\n").collect();
    let slow: String = (10..14).map(|s| line(s, 4.5, 1.0) + "\n").collect();
    let run = open_run(&[("rank0.jsonl", fast.as_bytes()), ("rank1.jsonl", slow.as_bytes())]).unwrap();
    assert_eq!((run.kind, run.ranks.len(), run.steps()), (RunKind::Metrics, 2, 8));
    assert_eq!(run.rank_step_ms(), [(0, 9.0), (1, 13.0)]);
    assert!((run.data_share() - 20.0 / 88.0).abs() < 1e-12);
    assert_eq!(run.ranks[0].steps[0].phases[4], ("communication", 1.0));
    assert_eq!(run.gpu_idle_share(), None);
}

/// A Stepscope trace reads back as it was written: its phases per step,
/// the rest as `other`, its GPU's busy time and span.
#[test]
fn a_stepscope_trace_reads_back() {
    let steps: Vec<TraceStep> = (0..3)
        .map(|k| {
            let t0 = 1000.0 * k as f64;
            TraceStep {
                step: k,
                start_us: t0,
                end_us: t0 + 1000.0,
                phases: tile(&[(t0, t0 + 900.0, vec![(DATA_EVENT, 0.1), ("forward", 0.3), ("backward", 0.5)])]),
                gpu: vec![Span { name: "forward".into(), start_us: t0 + 200.0, end_us: t0 + 600.0 }],
                submit_us: Some(t0 + 100.0),
                loss: 1.0 + k as f32,
                grad_norm: 2.0 + k as f32,
                lr: 0.1,
            }
        })
        .collect();
    let text = trace_json(&TraceInfo { pid: 1, rank: 3, world_size: 4, device: Some("gpu".into()) }, &steps);
    let run = open_run(&[("t.json.gz", &gz(text.as_bytes()))]).unwrap();
    assert_eq!((run.kind, run.ranks[0].rank, run.steps()), (RunKind::StepscopeTrace, 3, 3));
    let s = &run.ranks[0].steps[1];
    let names: Vec<&str> = s.phases.iter().map(|p| p.0).collect();
    assert_eq!(names, ["data", "forward", "backward", "other"]);
    assert!((s.wall_ms - 1.0).abs() < 1e-9 && (s.phase_ms("other") - 0.1).abs() < 1e-9);
    assert!((run.data_share() - 0.1).abs() < 1e-9);
    // The counters, each in the step it was written in.
    let figures: Vec<_> = run.ranks[0].steps.iter().map(|s| (s.step, s.loss, s.grad_norm, s.lr)).collect();
    let lr = Some(0.1);
    assert_eq!(figures, [(0, Some(1.0), Some(2.0), lr), (1, Some(2.0), Some(3.0), lr), (2, Some(3.0), Some(4.0), lr)]);
    // Busy 0.4 ms of each 1 ms; the span runs from the first pass to the
    // last before the last step (which HTA leaves out too).
    let gpu = run.ranks[0].gpu.unwrap();
    assert!((gpu.busy_ms - 0.8).abs() < 1e-9 && (gpu.span_ms - 1.4).abs() < 1e-9, "{gpu:?}");
}

/// A run on three ranks written as torchrun's are, one trace per rank
/// (`rank_traces`), opens as three ranks: every rank's step as long as
/// rank 0's, the slow rank named by its work before the all-reduce, and
/// the others' wait in communication.
#[test]
fn a_run_on_ranks_opens_with_its_straggler() {
    use crate::engine::RankTimes;
    let steps: Vec<TraceStep> = (0..4)
        .map(|k| {
            let t0 = 10_000.0 * k as f64;
            let parts = vec![
                (DATA_EVENT, 0.1),
                ("forward", 2.0),
                ("backward", 4.0),
                ("communication", 3.0),
                ("optimizer", 0.9),
            ];
            TraceStep {
                step: k,
                start_us: t0,
                end_us: t0 + 10_000.0,
                phases: tile(&[(t0, t0 + 10_000.0, parts)]),
                gpu: Vec::new(),
                submit_us: None,
                loss: 1.0,
                grad_norm: 1.0,
                lr: 0.1,
            }
        })
        .collect();
    let part = |f: f64, b: f64, w: f64| RankTimes { shards: 1, forward_ms: f, backward_ms: b, wait_ms: w };
    let ranks: Vec<Vec<RankTimes>> =
        (0..4).map(|_| vec![part(2.0, 4.0, 2.9), part(2.1, 3.9, 2.9), part(3.0, 5.9, 0.0)]).collect();
    let traces = rank_traces(&TraceInfo { pid: 10, rank: 0, world_size: 1, device: None }, &steps, &ranks);
    assert_eq!(traces.iter().map(|t| t.0).collect::<Vec<_>>(), [0, 1, 2]);
    for (r, text) in &traces {
        assert!(text.contains(&format!(r#""rank": {r}, "world_size": 3"#)), "HTA's pattern");
    }
    let files: Vec<(String, Vec<u8>)> =
        traces.iter().map(|(r, t)| (format!("t.rank{r}.json"), t.clone().into_bytes())).collect();
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), &b[..])).collect();
    let run = open_run(&files).unwrap();
    assert_eq!(run.ranks.len(), 3);
    let rows = run.rank_rows();
    for row in &rows {
        assert!((row.step_ms - 10.0).abs() < 1e-9, "synchronised steps: {row:?}");
    }
    let slow: Vec<u32> = rows.iter().filter(|r| r.straggler).map(|r| r.rank).collect();
    assert_eq!(slow, [2], "{rows:?}");
    // Rank 1 computed 6 ms from rank 0's forward (at 0.1 ms) and waited
    // until rank 0's all-reduce ended (at 9.1 ms).
    let one = &run.ranks[1].steps[0];
    assert!(
        (one.phase_ms("forward") - 2.1).abs() < 1e-9 && (one.phase_ms("communication") - 3.0).abs() < 1e-9,
        "{one:?}"
    );
    assert!(rows[2].communication_share < 0.05 && rows[1].communication_share > 0.25, "{rows:?}");
}

/// A real torch.profiler trace of the exported script on an H200
/// (core/tests/fixtures): its annotated phases, the GPU's idle share.
#[test]
fn a_pytorch_profiler_trace_opens() {
    let bytes =
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/h200-digits.pt.trace.json.gz")).unwrap();
    let run = open_run(&[("h200.pt.trace.json.gz", &bytes)]).unwrap();
    assert_eq!(run.kind, RunKind::TorchTrace);
    assert_eq!(run.ranks[0].steps.iter().map(|s| s.step).collect::<Vec<_>>(), [2, 3, 4]);
    for s in &run.ranks[0].steps {
        for phase in ["data", "forward", "backward", "optimizer"] {
            assert!(s.phase_ms(phase) > 0.0, "step {}: no {phase} in {:?}", s.step, s.phases);
        }
        let total: f64 = s.phases.iter().map(|p| p.1).sum();
        assert!((total - s.wall_ms).abs() < 1e-6, "{:?}", s.phases);
    }
    let idle = run.gpu_idle_share().unwrap();
    assert!(idle > 0.0 && idle < 1.0, "{idle}");
    let [compute, communication, memory, idle_too] = run.gpu_breakdown().unwrap();
    assert!(compute > 0.0 && communication == 0.0 && memory >= 0.0 && idle_too == idle);
    assert!((compute + communication + memory + idle - 1.0).abs() < 1e-12);
}

/// The GPU's time split as HTA's temporal breakdown splits it: compute
/// first, then communication where no computation ran, then memory.
#[test]
fn the_gpu_breakdown_follows_hta() {
    let kernel = |name: &str, ts: f64, dur: f64| {
        let cat = if name.starts_with("Memcpy") { "gpu_memcpy" } else { "kernel" };
        format!(r#"{{"ph": "X", "cat": "{cat}", "name": "{name}", "ts": {ts}, "dur": {dur}, "args": {{"stream": 7}}}}"#)
    };
    let events = [
        r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100}"#.to_string(),
        kernel("gemm", 0.0, 20.0),
        kernel("ncclDevKernel_AllReduce_Sum_f32", 10.0, 30.0),
        kernel("Memcpy HtoD (Pageable -> Device)", 50.0, 10.0),
        kernel("cudaStreamSync", 55.0, 10.0),
        kernel("elementwise", 80.0, 20.0),
    ];
    let text = format!(r#"{{"traceEvents": [{}]}}"#, events.join(","));
    let run = open_run(&[("t.json", text.as_bytes())]).unwrap();
    // Span 0..100; compute [0, 20) ∪ [80, 100) = 40; communication
    // [20, 40) = 20; memory [50, 65) = 15; idle 25.
    let gpu = run.ranks[0].gpu.unwrap();
    assert_eq!((gpu.span_ms, gpu.busy_ms), (0.1, 0.075));
    let shares = run.gpu_breakdown().unwrap().map(|s| (s * 100.0).round());
    assert_eq!(shares, [40.0, 20.0, 15.0, 25.0]);
    // Nothing ran from 40 to 50 and from 65 to 80.
    assert_eq!(run.gpu_longest_gap_ms(), Some(0.015));
}

#[test]
fn hostile_files_are_refused_by_name() {
    let line = |step: u64| format!(r#"{{"step": {step}, "forward_ms": 1.0}}"#);
    let backwards = format!("{}\n{}\n", line(5), line(4));
    assert!(
        err(&[("m.jsonl", backwards.as_bytes())]).contains("m.jsonl line 2: step 4 after step 5: steps go backwards")
    );
    assert!(err(&[("m.jsonl", b"{\"step\": 1, \"forward_ms\": -3}\n")]).contains("forward_ms is -3"));
    assert!(err(&[("m.jsonl", b"{\"step\": 1}\n")]).contains("no phase times"));
    assert!(err(&[("m.jsonl", b"{\"step\": 1, \"forward_ms\": 1.0\n")]).contains("line 1: not JSON"));
    assert!(err(&[("x.bin", b"\x00\x01garbage")]).contains("neither a metrics log"));
    assert!(err(&[("t.json", b"{\"traceEvents\": [")]).contains("t.json: not a trace"));
    let overlap = r#"{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 10},
        {"ph": "X", "name": "ProfilerStep#2", "ts": 5, "dur": 10}]}"#;
    assert!(err(&[("t.json", overlap.as_bytes())]).contains("ProfilerStep#2 overlaps ProfilerStep#1"));
    let negative = r#"{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": -10}]}"#;
    assert!(err(&[("t.json", negative.as_bytes())]).contains("event 0 (ProfilerStep#1) has ts 0 and dur -10"));
    let no_steps = r#"{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 0, "dur": 1}]}"#;
    assert!(err(&[("t.json", no_steps.as_bytes())]).contains("no ProfilerStep#N"));
    let deep = format!("{{\"traceEvents\": [{}{}]}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(err(&[("t.json", deep.as_bytes())]).contains("not a trace"));
    // A gzip bomb stops at the limit.
    let bomb = gz(&vec![b' '; 3 << 20]);
    assert!(gunzip_limited("b.gz", &bomb, 1 << 20).unwrap_err().to_string().contains("inflates past 1048576 bytes"));
    assert!(err(&[("t.gz", &bomb[..20])]).contains("not a readable gzip stream"));
    // Mixed kinds, the same rank twice.
    let metrics = format!("{}\n", line(1));
    let trace = r#"{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 10}]}"#;
    assert!(
        err(&[("m.jsonl", metrics.as_bytes()), ("t.json", trace.as_bytes())]).contains("open one run's files together")
    );
    assert!(err(&[("a.json", trace.as_bytes()), ("b.json", trace.as_bytes())]).contains("rank 0 appears in two files"));
    assert!(err(&[]).contains("no file given"));
    // The page's smaller budget, named.
    let big = vec![b' '; RunLimits::PAGE.total_bytes + 1];
    let refused = open_run_within(&[("big.json", &big)], RunLimits::PAGE).unwrap_err().to_string();
    assert!(refused.contains(&format!("at most {} are opened at once here", RunLimits::PAGE.total_bytes)), "{refused}");
}

/// A torch.profiler trace of a plain training loop, annotated by nobody:
/// the DataLoader and the optimizer by PyTorch's names, the backward from
/// autograd's ops, the forward from the data to the backward.
#[test]
fn an_unannotated_pytorch_loop_is_split_by_its_op_names() {
    let x = |name: &str, ts: f64, dur: f64| {
        format!(r#"{{"ph": "X", "cat": "cpu_op", "name": "{name}", "ts": {ts}, "dur": {dur}, "tid": 1}}"#)
    };
    let events = [
        r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#5", "ts": 0, "dur": 100}"#.to_string(),
        x("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 1.0, 9.0),
        x("aten::linear", 12.0, 18.0),
        x("autograd::engine::evaluate_function: AddmmBackward0", 40.0, 20.0),
        x("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 62.0, 8.0),
        x("Optimizer.step#AdamW.step", 75.0, 15.0),
    ];
    let text = format!(r#"{{"traceEvents": [{}]}}"#, events.join(","));
    let run = open_run(&[("loop.json", text.as_bytes())]).unwrap();
    let s = &run.ranks[0].steps[0];
    let phases: Vec<(&str, f64)> = s.phases.iter().map(|&(p, ms)| (p, (ms * 1e3).round())).collect();
    assert_eq!(
        phases,
        [("data", 9.0), ("forward", 30.0), ("backward", 30.0), ("optimizer", 15.0), ("other", 16.0)],
        "{:?}",
        s.phases
    );
}

/// A key given twice where the reader reads it is refused, named: in a
/// metrics log at any depth (Stepscope and its exported script write
/// them), in a trace where a field read is repeated. What a trace holds
/// for other tools (`args`' other fields, unknown fields) may repeat, as
/// Chrome's tracer writes them, and is skipped.
#[test]
fn repeated_keys_are_refused_where_they_are_read() {
    let refused = err(&[(
        "m.jsonl",
        b"{\"step\": 1, \"forward_ms\": 1.0}\n{\"step\": 2, \"forward_ms\": 1.0, \"forward_ms\": 90}\n",
    )]);
    assert!(refused.contains("m.jsonl line 2: forward_ms appears twice (column"), "{refused}");
    let nested = err(&[("m.jsonl", b"{\"step\": 1, \"forward_ms\": 1.0, \"extra\": [{\"a\": 1, \"a\": 2}]}\n")]);
    assert!(nested.contains("line 1: extra[0].a appears twice"), "{nested}");
    let step = r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10, "args": {"External id": 1, "External id": 1}, "tid": 1, "tid": 1}"#;
    let ok = format!(r#"{{"traceEvents": [{step}], "deviceProperties": [], "deviceProperties": []}}"#);
    assert_eq!(open_run(&[("t.json", ok.as_bytes())]).unwrap().steps(), 1);
    for (event, twice) in [
        (r#"{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "ts": 5, "dur": 10}"#, "ts"),
        (r#"{"ph": "X", "name": "ProfilerStep#1", "name": "forward", "ts": 0, "dur": 10}"#, "name"),
        (r#"{"ph": "C", "name": "loss", "ts": 0, "args": {"loss": 1, "loss": 2}}"#, "loss"),
    ] {
        let text = format!(r#"{{"traceEvents": [{step}, {event}]}}"#);
        let refused = err(&[("t.json", text.as_bytes())]);
        assert!(refused.contains(&format!("duplicate field `{twice}`")), "{refused}");
    }
    let rank = r#"{"traceEvents": [], "distributedInfo": {"rank": 0, "rank": 1}}"#;
    assert!(err(&[("t.json", rank.as_bytes())]).contains("duplicate field `rank`"));
    let events = format!(r#"{{"traceEvents": [{step}], "traceEvents": [{step}]}}"#);
    assert!(err(&[("t.json", events.as_bytes())]).contains("duplicate field `traceEvents`"));
}

/// The degenerate shapes read as what they are: zero-length steps at one
/// instant are steps of 0 ms, each event counted in one step only.
#[test]
fn zero_length_steps_at_one_instant_open() {
    let events: Vec<String> = (0..1000)
        .flat_map(|k| {
            [
                format!(r#"{{"ph": "X", "name": "ProfilerStep#{k}", "ts": 5, "dur": 0}}"#),
                r#"{"ph": "X", "name": "forward", "ts": 5, "dur": 0}"#.to_string(),
            ]
        })
        .collect();
    let text = format!(r#"{{"traceEvents": [{}]}}"#, events.join(","));
    let run = open_run(&[("t.json", text.as_bytes())]).unwrap();
    assert_eq!(run.steps(), 1000);
    assert!(run.ranks[0].steps.iter().all(|s| s.wall_ms == 0.0 && s.phase_ms("forward") == 0.0));
    let counted: usize = run.ranks[0].steps.iter().map(|s| s.phases.len()).sum();
    assert_eq!(counted, 1000, "each forward in one step");
    // Steps end to end: an event on the boundary of two is in the later.
    let text = r#"{"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 0, "dur": 10},
        {"ph": "X", "name": "ProfilerStep#2", "ts": 10, "dur": 10}, {"ph": "X", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ts": 10, "dur": 0},
        {"ph": "X", "name": "optimizer", "ts": 6, "dur": 4}, {"ph": "X", "name": "forward", "ts": 10, "dur": 3}]}"#;
    let run = open_run(&[("t.json", text.as_bytes())]).unwrap();
    let names: Vec<Vec<&str>> = run.ranks[0].steps.iter().map(|s| s.phases.iter().map(|p| p.0).collect()).collect();
    assert_eq!(names, [vec!["optimizer", "other"], vec!["data", "forward", "other"]]);
}

mod linear;

#[test]
fn an_opening_checks_its_total_before_each_next_file() {
    let limits = RunLimits { total_bytes: 10, json_bytes: 100 };
    assert_eq!(limits.read_next(&b"123456"[..], "`a`", 0).unwrap(), b"123456");
    // The second file is read only up to what the total leaves, plus one.
    let mut endless = std::io::repeat(0).take(1000);
    let err = limits.read_next(&mut endless, "`b`", 6).unwrap_err().to_string();
    assert_eq!(endless.limit(), 1000 - 5);
    assert!(err.contains("`b` is larger than the 4 bytes left of the 10 bytes opened at once here"), "{err}");
    assert_eq!(limits.read_next(&b"1234"[..], "`b`", 6).unwrap(), b"1234");
    // Sizes known before reading are refused before reading.
    assert!(limits.check_sizes([("a", 6), ("b", 4)]).is_ok());
    let err = limits.check_sizes([("a", 6), ("`b`", 5)]).unwrap_err().to_string();
    assert!(err.contains("`b`: 11 bytes with the files before it, more than the 10 bytes opened at once"), "{err}");
    let err = RunLimits::CLI.check_sizes([("`big`", MAX_RUN_FILE_BYTES as u64 + 1)]).unwrap_err().to_string();
    assert!(err.contains("`big` is 268435457 bytes, larger than 256 MiB"), "{err}");
}
