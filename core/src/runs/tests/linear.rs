//! Opening a run costs work in proportion to its input, whatever its shape:
//! 10× the steps may cost at most 15× the operations (`trace::tally`
//! counts the events and steps each stage visits, the comparisons of its
//! sorts and searches, and the metrics lines and ranks read). A count, not
//! a time, so a loaded machine cannot make it pass or fail.

use super::super::trace::work;
use super::super::*;

fn x(name: &str, ts: f64, dur: f64) -> String {
    format!(r#"{{"ph": "X", "cat": "cpu_op", "name": "{name}", "ts": {ts}, "dur": {dur}}}"#)
}

fn step(k: usize, ts: f64, dur: f64) -> String {
    format!(r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{k}", "ts": {ts}, "dur": {dur}}}"#)
}

fn counter(name: &str, ts: f64, value: f64) -> String {
    format!(r#"{{"ph": "C", "name": "{name}", "ts": {ts}, "args": {{"{name}": {value}}}}}"#)
}

fn kernel(ts: f64, dur: f64) -> String {
    format!(r#"{{"ph": "X", "cat": "kernel", "name": "gemm", "ts": {ts}, "dur": {dur}}}"#)
}

fn trace(events: Vec<String>) -> Vec<(String, Vec<u8>)> {
    vec![("t.json".into(), format!(r#"{{"traceEvents": [{}]}}"#, events.join(",\n")).into_bytes())]
}

/// The degenerate shapes, each with `n` steps (or ranks).
fn shape(name: &str, n: usize) -> Vec<(String, Vec<u8>)> {
    let each = |f: &dyn Fn(usize) -> Vec<String>| trace((0..n).flat_map(f).collect());
    match name {
        // Zero-length steps, all at one instant, with their phases and
        // counters there too.
        "one instant" => each(&|k| {
            vec![step(k, 1000.0, 0.0), x("forward", 1000.0, 0.0), counter("loss", 1000.0, 1.0), kernel(1000.0, 0.0)]
        }),
        // Zero-length steps, one a microsecond.
        "zero-length steps" => each(&|k| vec![step(k, k as f64, 0.0), x("backward", k as f64, 0.0)]),
        // Steps end to end, each holding events nested at its own start
        // and end: every event fits its step and touches the next.
        "nested at equal timestamps" => each(&|k| {
            let t = 10.0 * k as f64;
            vec![
                step(k, t, 10.0),
                x("forward", t, 10.0),
                x("backward", t, 10.0),
                x("autograd::engine::evaluate_function: MmBackward0", t, 10.0),
                x("Optimizer.step#SGD.step", t, 10.0),
                counter("lr", t + 10.0, 0.1),
                kernel(t, 10.0),
            ]
        }),
        // One step holding everything, all at one instant.
        "one step, n events" => trace(
            std::iter::once(step(0, 0.0, 0.0))
                .chain((0..n).flat_map(|_| [x("data", 0.0, 0.0), x("forward", 0.0, 0.0), kernel(0.0, 0.0)]))
                .collect(),
        ),
        // A metrics log whose every line names the same rank.
        "one rank repeated" => {
            let lines: String = (0..n)
                .map(|k| format!("{{\"step\": {k}, \"rank\": 3, \"forward_ms\": 1.0, \"data_ms\": 0.5}}\n"))
                .collect();
            vec![("m.jsonl".into(), lines.into_bytes())]
        }
        // As many ranks as files, one step each.
        "many ranks" => (0..n)
            .map(|r| {
                (format!("r{r}.jsonl"), format!("{{\"step\": 1, \"rank\": {r}, \"forward_ms\": 1.0}}\n").into_bytes())
            })
            .collect(),
        _ => unreachable!(),
    }
}

fn cost(files: &[(String, Vec<u8>)]) -> u64 {
    let files: Vec<(&str, &[u8])> = files.iter().map(|(n, b)| (n.as_str(), b.as_slice())).collect();
    let (run, work) = work(|| open_run(&files));
    let run = run.unwrap();
    assert!(run.steps() > 0);
    work
}

#[test]
fn ten_times_the_input_costs_at_most_fifteen_times_the_work() {
    let mut wrong = Vec::new();
    for (name, n) in [
        ("one instant", 400),
        ("zero-length steps", 400),
        ("nested at equal timestamps", 400),
        ("one step, n events", 400),
        ("one rank repeated", 400),
        ("many ranks", 100),
    ] {
        let (small, large) = (cost(&shape(name, n)), cost(&shape(name, 10 * n)));
        eprintln!("{name}: {n} -> {small} operations, {} -> {large}", 10 * n);
        if large > 15 * small {
            wrong.push(format!("{name}: {large} operations at {} against {small} at {n}", 10 * n));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
