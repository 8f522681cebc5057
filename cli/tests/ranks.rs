//! `stepscope train --threads N` on a sharded experiment: the same metrics,
//! step for step, on any number of threads; the closing line names each
//! rank's compute and wait and the slowest; the all-reduce is a phase of
//! the metrics log and of the trace.

mod common;

use common::{stepscope, temp_dir, CONFIG};

fn losses(log: &str) -> Vec<(String, String)> {
    log.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["loss"].to_string(), v["grad_norm"].to_string())
        })
        .collect()
}

#[test]
fn threads_change_the_speed_not_the_numbers() {
    let dir = temp_dir("ranks");
    let sharded = CONFIG.replace("\"batch_size\": 16,", "\"batch_size\": 16, \"shards\": 4,");
    std::fs::write(dir.join("sharded.json"), sharded).unwrap();
    let mut logs = Vec::new();
    for threads in ["1", "2", "3", "4"] {
        let metrics = format!("m{threads}.jsonl");
        let mut args = vec!["train", "--config", "sharded.json", "--steps", "25", "--threads", threads];
        args.extend(["--metrics", &metrics]);
        let trace = format!("t{threads}.json");
        if threads == "2" {
            args.extend(["--trace", &trace]);
        }
        let out = stepscope(&dir, &args);
        let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("4 shards of 4 rows each per micro-batch"), "{said}");
        assert!(said.contains(&format!("on {threads} rank")), "{said}");
        assert!(said.contains("ranks, ms a step: rank 0 "), "{said}");
        assert!(said.contains("slowest: rank "), "{said}");
        logs.push(std::fs::read_to_string(dir.join(&metrics)).unwrap());
    }
    let first = losses(&logs[0]);
    assert_eq!(first.len(), 25);
    for (i, log) in logs.iter().enumerate().skip(1) {
        assert_eq!(losses(log), first, "{} threads against 1", i + 1);
    }
    // Every step has its all-reduce and each rank's part.
    for line in logs[1].lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["communication_ms"].as_f64().is_some_and(|ms| ms >= 0.0), "{line}");
        assert_eq!(v["ranks"].as_array().map(Vec::len), Some(2), "{line}");
    }
    // One trace per rank, as torchrun's, that `open` reads as two ranks.
    let trace = std::fs::read_to_string(dir.join("t2.json")).unwrap();
    assert!(trace.contains("\"communication\""), "the trace has the all-reduce");
    assert!(trace.contains(r#""rank": 0, "world_size": 2"#), "{}", &trace[..300]);
    let other = std::fs::read_to_string(dir.join("t2.rank1.json")).unwrap();
    assert!(other.contains(r#""rank": 1, "world_size": 2"#), "{}", &other[..300]);
    let out = stepscope(&dir, &["open", "t2.json", "t2.rank1.json"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(said.starts_with("stepscope-trace: 2 ranks, 50 steps"), "{said}");
    assert!(said.contains("rank 1    median step ") && said.contains("before the all-reduce"), "{said}");
    // An unsharded run names no ranks.
    let out = stepscope(&dir, &["train", "--config", "config.json", "--steps", "3", "--threads", "4"]);
    let said = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("ranks, ms a step"), "{said}");
}
