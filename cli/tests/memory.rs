//! A run the memory budget allows (`--memory-budget` raised far past the
//! machine) but the machine cannot hold: one line naming the buffer, exit
//! status 2, no abort, and no output file created.

mod common;

use common::{files_in, stepscope, temp_dir};

/// The transformer on the built-in text with 65,536 windows of 4,096
/// tokens a batch: its attention probabilities alone are B·H·T² =
/// 2¹⁶·64·2²⁴ floats, 256 TiB in one buffer, past the 128 TiB a 64-bit
/// Linux process can address at all, so the allocation is refused at once
/// whatever the overcommit setting (nothing is touched before: the
/// engine's buffers are allocated zeroed, lazily). Its parameters are a
/// few hundred thousand.
const HUGE_GPT: &str = r#"{"seed": 1,
  "model": {"kind": "gpt", "vocab_size": 65, "context": 4096, "embed": 64, "heads": 64, "blocks": 1},
  "loss": "cross_entropy", "optimizer": {"kind": "adamw"}, "batch_size": 65536,
  "data": {"source": "shakespeare"}}"#;

#[test]
fn a_run_past_the_machines_memory_fails_in_one_line_and_writes_nothing() {
    let dir = temp_dir("memory");
    std::fs::write(dir.join("huge.json"), HUGE_GPT).unwrap();
    let before = files_in(&dir);
    let out = stepscope(
        &dir,
        &[
            "train",
            "--config",
            "huge.json",
            "--steps",
            "1",
            "--memory-budget",
            "1000000000000",
            "--out",
            "run.safetensors",
            "--metrics",
            "run.jsonl",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].contains("out of memory: cannot allocate"), "{stderr}");
    assert!(
        ["the activations", "the attention probabilities", "backward's buffers"].iter().any(|w| lines[0].contains(w)),
        "the line names the buffer: {stderr}"
    );
    assert!(!stderr.contains("panicked") && !stderr.contains("memory allocation of"), "{stderr}");
    assert_eq!(files_in(&dir), before, "a refused run creates no file");
}
