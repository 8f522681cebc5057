//! What the CLI's integration tests share: a small config, the binary,
//! a fresh directory per test.

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const CONFIG: &str = r#"{"seed": 11,
  "model": {"inputs": 2, "layers": [{"units": 8, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
  "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.02},
  "schedule": {"kind": "warmup_linear", "warmup_steps": 3, "total_steps": 40},
  "batch_size": 16, "grad_accumulation": 2, "clip_grad_norm": 1.0,
  "data": {"source": "circle", "samples": 120, "noise": 0.05, "train_fraction": 0.75}}"#;

pub const CIRCLE: &str = "\"source\": \"circle\", \"samples\": 120, \"noise\": 0.05, \"train_fraction\": 0.75";

pub fn stepscope(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepscope")).args(args).current_dir(dir).output().expect("binary runs")
}

pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stepscope-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), CONFIG).unwrap();
    dir
}

pub fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}
