use super::*;
use stepscope_core::engine::PhaseTimes;

fn step(i: u64, timing: Timing) -> StepMetrics {
    StepMetrics {
        step: i,
        loss: 0.1 + i as f32 / 3.0,
        grad_norm: 1.0 / 3.0,
        z_loss: None,
        lr: 0.02 * (1.0 + 1e-12),
        clipped: i == 1,
        phases: PhaseTimes {
            data_ms: 0.125,
            forward_ms: 1.0 / 7.0,
            backward_ms: 0.25,
            optimizer_ms: 0.5,
            communication_ms: 0.0,
            checkpoint_ms: 0.0,
            logging_ms: 0.0,
        },
        timing,
        gpu_ms: (timing != Timing::Cpu).then_some(2.5),
        ranks: Vec::new(),
    }
}

fn cells(line: &str) -> Vec<&str> {
    line.split(',').collect()
}

#[test]
fn header_rows_and_full_precision() {
    let mut log = MetricsLog::default();
    log.record_evaluation(0, Some(Evaluation { loss: 0.7, accuracy: Some(0.5) }), None);
    let frame = FrameShare { wall_ms: 10.0 / 3.0, checkpoint_ms: 0.0, logging_ms: 0.75 };
    log.record_steps(&[step(0, Timing::Cpu), step(1, Timing::Cpu), step(2, Timing::Cpu)], Some(frame));
    log.record_evaluation(
        3,
        Some(Evaluation { loss: 0.2, accuracy: Some(0.96) }),
        Some(Evaluation { loss: 0.25, accuracy: Some(0.9) }),
    );
    let csv = log.to_csv("spiral, 2-16-16-1");
    let lines: Vec<&str> = csv.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(csv.starts_with("# Stepscope metrics of the experiment spiral, 2-16-16-1\n"));
    assert_eq!(lines[0], COLUMNS.join(","));
    assert_eq!(lines.len(), 1 + 4, "the evaluation at 0 and three steps");
    let at0 = cells(lines[1]);
    assert_eq!(at0.len(), COLUMNS.len());
    assert_eq!((at0[0], at0[1], at0[2], at0[4]), ("0", "", "0.7", "0.5"));
    assert!(at0[5..].iter().all(|c| c.is_empty()), "step 0 measured no step: {at0:?}");
    let first = cells(lines[2]);
    assert_eq!(first[0], "1");
    // Full precision: each number reads back to the same bits.
    assert_eq!(first[1].parse::<f32>().unwrap(), 0.1f32);
    assert_eq!(first[6].parse::<f32>().unwrap(), 1.0f32 / 3.0);
    assert_eq!(first[7].parse::<f64>().unwrap(), 0.02 * (1.0 + 1e-12));
    assert_eq!(first[10].parse::<f64>().unwrap(), 1.0 / 7.0);
    assert_eq!(first[17].parse::<f64>().unwrap(), 10.0 / 3.0);
    assert_eq!(
        (first[8], first[9], first[13], first[15], first[16], first[18]),
        ("0", "0.125", "0", "0.75", "", "cpu")
    );
    assert_eq!(cells(lines[3])[8], "1", "clipped");
    assert_eq!(cells(lines[2])[2], "", "no evaluation after step 1");
    let last = cells(lines[4]);
    assert_eq!((last[0], last[2], last[3], last[4], last[5]), ("3", "0.2", "0.25", "0.96", "0.9"));
    assert!(!last[1].is_empty(), "the step's own numbers and the evaluation share a row");
}

#[test]
fn unsplit_gpu_phases_stay_empty() {
    let mut log = MetricsLog::default();
    log.record_steps(&[step(0, Timing::GpuFused), step(1, Timing::GpuCoarse)], None);
    let csv = log.to_csv("x");
    let lines: Vec<Vec<&str>> = csv.lines().filter(|l| !l.starts_with('#')).skip(1).map(cells).collect();
    assert_eq!(&lines[0][9..19], ["0.125", "", "", "", "", "", "", "2.5", "", "gpu_fused"]);
    assert_eq!(lines[1][16].parse::<f64>().unwrap(), 1.0 / 7.0, "coarse: the submit's wall time per step");
    assert_eq!(lines[1][10], "");
}

#[test]
fn going_back_forgets_what_came_after_and_the_log_stays_bounded() {
    let mut log = MetricsLog::default();
    let steps: Vec<StepMetrics> = (0..10).map(|i| step(i, Timing::Cpu)).collect();
    log.record_steps(&steps, None);
    log.record_steps(&steps[4..6], None);
    assert_eq!(log.rows().iter().map(|r| r.step).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    log.forget_from(3);
    assert_eq!(log.rows().len(), 2);

    // A frame's views can arrive before its steps are recorded.
    let mut log = MetricsLog::default();
    log.record_steps(&steps[..2], None);
    log.record_evaluation(5, Some(Evaluation { loss: 1.0, accuracy: None }), None);
    log.record_steps(&steps[2..6], None);
    assert_eq!(log.rows().iter().map(|r| r.step).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 6]);
    assert!(log.rows()[4].metrics.is_some() && log.rows()[4].train.is_some(), "step 5 and its evaluation share a row");

    let mut log = MetricsLog::default();
    let many: Vec<StepMetrics> = (0..3 * MAX_ROWS as u64).map(|i| step(i, Timing::Cpu)).collect();
    log.record_steps(&many[..7], None);
    log.record_evaluation(7, Some(Evaluation { loss: 1.0, accuracy: None }), None);
    log.record_steps(&many[7..], None);
    assert!(log.rows().len() <= MAX_ROWS);
    assert!(log.rows().windows(2).all(|w| w[0].step < w[1].step), "steps increase");
    assert!(log.rows().iter().any(|r| r.step == 7 && r.train.is_some()), "evaluations are kept");
    assert!(log.to_csv("x").contains("every 4th step"), "the header names the stride");
    assert!(log.rows().iter().filter(|r| r.step != 7).all(|r| r.step % 4 == 0));

    let mut log = MetricsLog::default();
    for s in 0..2 * MAX_ROWS as u64 {
        log.record_evaluation(s, Some(Evaluation { loss: 1.0, accuracy: None }), None);
    }
    assert!(log.rows().len() <= MAX_ROWS && log.rows().iter().all(Row::evaluated));
    assert!(log.to_csv("x").contains("let go"), "the header says evaluations were thinned");
}

/// The event file has a record per step and per evaluation, each
/// framed with its CRCs, with the CLI's tags and 0-based steps.
#[test]
fn the_log_as_tensorboard_events() {
    let mut log = MetricsLog::default();
    let share = FrameShare { wall_ms: 4.0, checkpoint_ms: 0.5, logging_ms: 0.25 };
    log.record_evaluation(0, None, Some(Evaluation { loss: 0.7, accuracy: Some(0.5) }));
    log.record_steps(&[step(0, Timing::Cpu), step(1, Timing::Cpu)], Some(share));
    log.record_evaluation(2, Some(Evaluation { loss: 0.4, accuracy: None }), None);
    // The layers' statistics after step 2 (of step index 1), one layer.
    let stats = [stepscope_core::stats::tensor_stats(&[1.0, 2.0, 3.0]); 4];
    let file = log.to_tensorboard(100.0, &[(2, &[stats][..])]);
    let mut records = Vec::new();
    let mut rest = &file[..];
    while !rest.is_empty() {
        let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        let data = &rest[12..12 + len];
        assert_eq!(rest[12 + len..16 + len], stepscope_core::export::tensorboard::masked_crc(data).to_le_bytes());
        records.push(data.to_vec());
        rest = &rest[16 + len..];
    }
    // The version, the evaluation before training, two steps, the
    // evaluation after them, then the four histograms of the layer.
    assert_eq!(records.len(), 9);
    let has = |r: &[u8], tag: &str| r.windows(tag.len()).any(|w| w == tag.as_bytes());
    for (r, tag) in
        records[5..].iter().zip(["activations/layer0", "gradients/layer0", "weights/layer0", "updates/layer0"])
    {
        assert!(has(r, tag), "{tag}");
    }
    assert!(has(&records[1], "loss/test") && has(&records[1], "accuracy/test"));
    assert!(has(&records[2], "loss/train") && has(&records[2], "phase/wall_ms") && !has(&records[2], "phase/gpu_ms"));
    assert!(has(&records[4], "loss/train_set") && !has(&records[4], "accuracy/train_set"));
    // Wall times go back from the end by the steps' frame shares:
    // 100 s at step 2, 4 ms earlier at step 1, 8 ms earlier at step 0.
    let wall = |r: &[u8]| f64::from_le_bytes(r[1..9].try_into().unwrap());
    assert_eq!((wall(&records[2]), wall(&records[3]), wall(&records[4])), (100.0 - 0.004, 100.0, 100.0));
}

/// The trace: a step per recorded step, its phases tiling its share
/// of the frame, the rest as `page`; counters for its metrics.
#[test]
fn the_log_as_a_trace() {
    let mut log = MetricsLog::default();
    let share = FrameShare { wall_ms: 4.0, checkpoint_ms: 0.5, logging_ms: 0.25 };
    log.record_evaluation(0, None, Some(Evaluation { loss: 0.7, accuracy: Some(0.5) }));
    log.record_steps(&[step(0, Timing::Cpu), step(1, Timing::Cpu)], Some(share));
    let json: serde_json::Value = serde_json::from_str(&log.to_traces(100.0, None)[0].1).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let spans: Vec<(&str, f64, f64)> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    let names: Vec<&str> = spans.iter().map(|s| s.0).collect();
    let one = [
        "enumerate(DataLoader)#Stepscope.__next__",
        "forward",
        "backward",
        "optimizer",
        "checkpoint",
        "logging",
        "page",
    ];
    assert_eq!(names[0], "ProfilerStep#0");
    assert_eq!(names[1..8], one);
    assert_eq!(names[8], "ProfilerStep#1");
    // Each step is its 4 ms share, its phases tile it, the second
    // ends at the download.
    for at in [0, 8] {
        assert!((spans[at].2 - 4000.0).abs() < 1e-6);
        let total: f64 = spans[at + 1..at + 8].iter().map(|s| s.2).sum();
        assert!((total - 4000.0).abs() < 1e-3, "{total}");
    }
    assert!((spans[8].1 + spans[8].2 - spans[0].1 - 8000.0).abs() < 1e-3);
    assert!((spans[1..8].iter().find(|s| s.0 == "backward").unwrap().2 - 250.0).abs() < 1e-6);
    assert_eq!(events.iter().filter(|e| e["ph"] == "C" && e["name"] == "loss").count(), 2);
    // A step longer than its share of the frame (a checkpoint written
    // in it) pushes the next one later: steps never overlap.
    let mut log = MetricsLog::default();
    log.record_steps(&[step(0, Timing::Cpu)], Some(FrameShare { wall_ms: 1.0, checkpoint_ms: 5.0, logging_ms: 0.0 }));
    log.record_steps(&[step(1, Timing::Cpu)], Some(share));
    let json: serde_json::Value = serde_json::from_str(&log.to_traces(100.0, None)[0].1).unwrap();
    let steps: Vec<(f64, f64)> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("ProfilerStep#")))
        .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    assert_eq!(steps.len(), 2);
    assert!(steps[0].0 + steps[0].1 <= steps[1].0 + 1e-6, "{steps:?}");
}

/// The GPU's timed passes go on the GPU's track as kernels, as far apart
/// as its clock put them, the last ending with its step, never before the
/// passes of the step before; a step without passes has none.
#[test]
fn gpu_passes_are_kernels_on_the_gpu_track() {
    use stepscope_core::gpu::{PassKind, StepPass};
    let mut log = MetricsLog::default();
    let share = FrameShare { wall_ms: 4.0, checkpoint_ms: 0.0, logging_ms: 0.0 };
    log.record_steps(&[step(0, Timing::GpuTimestamps), step(1, Timing::GpuTimestamps)], Some(share));
    let pass = |step, kind, start_ms, end_ms| StepPass { step, kind, start_ms, end_ms };
    log.record_gpu_passes(&[
        pass(0, PassKind::Forward, 10.0, 11.0),
        pass(0, PassKind::Backward, 11.5, 13.5),
        // A 6 ms pass outlasts its 4 ms step: it starts with the step and
        // after the passes before it.
        pass(1, PassKind::Forward, 20.0, 26.0),
        pass(7, PassKind::Forward, 0.0, 1.0),
    ]);
    let json: serde_json::Value = serde_json::from_str(&log.to_traces(100.0, None)[0].1).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let kernels: Vec<(&str, f64, f64)> = events
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| (e["name"].as_str().unwrap(), e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    let step_spans: Vec<(f64, f64)> = events
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("ProfilerStep#")))
        .map(|e| (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()))
        .collect();
    assert_eq!(kernels.iter().map(|k| k.0).collect::<Vec<_>>(), ["forward", "backward", "forward"]);
    let end0 = step_spans[0].0 + step_spans[0].1;
    assert!((kernels[1].1 + kernels[1].2 - end0).abs() < 1e-3, "the last pass ends with its step");
    assert!((kernels[1].1 - kernels[0].1 - 1500.0).abs() < 1e-3, "as far apart as the GPU's clock");
    assert!((kernels[2].1 - step_spans[1].0).abs() < 1e-3 && (kernels[2].2 - 6000.0).abs() < 1e-3);
    assert!(kernels[2].1 >= kernels[1].1 + kernels[1].2 - 1e-3);
    assert_eq!(events.iter().filter(|e| e["cat"] == "cuda_runtime").count(), 3, "each linked to a launch");
}
