//! The `stepscope` binary end to end: training, metrics, resume, CSV data,
//! the GPU backend, export and predict, Ctrl-C, help. Hostile input has its
//! own file (hostile_input.rs).

mod common;

use std::process::Command;

use common::{files_in, stepscope, temp_dir, CIRCLE, CONFIG};
use stepscope_core::checkpoint::load_checkpoint;

#[test]
fn train_writes_metrics_and_a_checkpoint_that_resumes_exactly() {
    let dir = temp_dir("resume");
    let out = stepscope(
        &dir,
        &["train", "--config", "config.json", "--steps", "30", "--out", "straight.safetensors", "--metrics", "m.jsonl"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("m.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 30);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["step"], i);
        for key in [
            "loss",
            "grad_norm",
            "lr",
            "data_ms",
            "forward_ms",
            "backward_ms",
            "optimizer_ms",
            "checkpoint_ms",
            "logging_ms",
        ] {
            assert!(line[key].as_f64().is_some_and(f64::is_finite), "step {i} {key}");
        }
    }
    assert!((lines[0]["lr"].as_f64().unwrap() - 0.02 / 3.0).abs() < 1e-12, "warmup lr");

    // 12 steps, then resume for 18 more, with periodic checkpoints.
    let out = stepscope(
        &dir,
        &["train", "--config", "config.json", "--steps", "12", "--out", "first.safetensors", "--checkpoint-every", "5"],
    );
    assert!(out.status.success());
    let out = stepscope(
        &dir,
        &[
            "train",
            "--init",
            "first.safetensors",
            "--steps",
            "18",
            "--out",
            "resumed.safetensors",
            "--metrics",
            "r.jsonl",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let read = |name: &str| load_checkpoint(&std::fs::read(dir.join(name)).unwrap()).unwrap();
    assert_eq!(read("resumed.safetensors"), read("straight.safetensors"));
    let resumed: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("r.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(resumed[0]["step"], 12);
    assert_eq!(resumed[17]["loss"], lines[29]["loss"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn csv_data_trains() {
    let dir = temp_dir("csv");
    std::fs::write(
        dir.join("csv.json"),
        CONFIG.replace(
            "\"source\": \"circle\", \"samples\": 120, \"noise\": 0.05, \"train_fraction\": 0.75",
            "\"source\": \"csv\"",
        ),
    )
    .unwrap();
    let mut csv = String::from("x1,x2,y\n");
    for i in 0..64 {
        let (a, b) = ((i as f32 * 0.37).sin() * 3.0, (i as f32 * 0.91).cos() * 3.0);
        csv += &format!("{a},{b},{}\n", u8::from(a * b > 0.0));
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let out = stepscope(&dir, &["train", "--config", "csv.json", "--data", "d.csv", "--steps", "5"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("64 train / 0 test rows"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--backend gpu` reproduces the CPU engine's run: same steps, losses and
/// gradient norms to 1e-5 relative (GPU sums in another order; see
/// core/tests/gpu_training.rs), and a checkpoint that resumes on the CPU.
#[test]
fn gpu_backend_reproduces_the_cpu_run() {
    let dir = temp_dir("gpu");
    let run = |backend: &str, out: &str, metrics: &str| {
        let o = stepscope(
            &dir,
            &[
                "train",
                "--config",
                "config.json",
                "--steps",
                "25",
                "--backend",
                backend,
                "--out",
                out,
                "--metrics",
                metrics,
            ],
        );
        assert!(o.status.success(), "{backend}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let stdout = run("gpu", "g.safetensors", "g.jsonl");
    assert!(stdout.contains("backend gpu: "), "{stdout}");
    run("cpu", "c.safetensors", "c.jsonl");
    let read = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(name)).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let (g, c) = (read("g.jsonl"), read("c.jsonl"));
    assert_eq!(g.len(), 25);
    for (g, c) in g.iter().zip(&c) {
        assert_eq!(g["step"], c["step"]);
        for key in ["loss", "grad_norm"] {
            let (x, y) = (g[key].as_f64().unwrap(), c[key].as_f64().unwrap());
            assert!((x - y).abs() <= 1e-5 * y.abs() + 1e-7, "step {}: {key} gpu {x} cpu {y}", c["step"]);
        }
        assert!(g["timing"] == "gpu_timestamps" || g["timing"] == "gpu_coarse", "{}", g["timing"]);
    }
    let o = stepscope(&dir, &["train", "--init", "g.safetensors", "--steps", "3"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `export-pytorch` writes the script for the checkpoint's experiment (and
/// the training rows of a built-in dataset); `predict` prints the outputs
/// the CPU forward pass gives. Running the script with PyTorch is
/// scripts/check_pytorch_export.py's part.
#[test]
fn export_pytorch_and_predict() {
    let dir = temp_dir("export");
    let out = stepscope(&dir, &["train", "--config", "config.json", "--steps", "4", "--out", "ck.safetensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = stepscope(&dir, &["export-pytorch", "ck.safetensors", "--out", "s.py", "--data-out", "train.csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script = std::fs::read_to_string(dir.join("s.py")).unwrap();
    assert!(script.contains("torch.optim.Adam(") && script.contains("max_norm=1.0"));
    assert!(script.contains("GRAD_ACCUMULATION = 2"));
    // Without --out the script goes to stdout, unchanged.
    let stdout = stepscope(&dir, &["export-pytorch", "ck.safetensors"]).stdout;
    assert_eq!(String::from_utf8_lossy(&stdout), script);

    // The training rows: 90 of the circle's 120 points, as Stepscope serves them.
    let csv = std::fs::read_to_string(dir.join("train.csv")).unwrap();
    assert!(csv.starts_with("x1,x2,y\n"));
    assert_eq!(csv.lines().count(), 1 + 90);

    let out = stepscope(&dir, &["predict", "ck.safetensors", "--inputs", "train.csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let predicted = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(predicted.starts_with("y0\n"));
    assert_eq!(predicted.lines().count(), 1 + 90);
    assert!(predicted.lines().skip(1).all(|l| l.parse::<f32>().is_ok_and(f32::is_finite)));
    let out = stepscope(&dir, &["predict", "ck.safetensors", "--inputs", "train.csv", "--out", "p.csv"]);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(dir.join("p.csv")).unwrap().trim_end(), predicted.trim_end());

    // A CSV experiment's training rows come from its file: --data-out needs
    // --data, and is refused without it before anything is written.
    std::fs::write(dir.join("csv.json"), CONFIG.replace(CIRCLE, "\"source\": \"csv\"")).unwrap();
    std::fs::write(dir.join("d.csv"), "x1,x2,y\n1,2,0\n3,4,1\n-1,0.5,1\n").unwrap();
    let out = stepscope(
        &dir,
        &["train", "--config", "csv.json", "--data", "d.csv", "--steps", "2", "--out", "csv.safetensors"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = files_in(&dir);
    let out = stepscope(&dir, &["export-pytorch", "csv.safetensors", "--out", "t.py", "--data-out", "t.csv"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give the file with --data"));
    let out = stepscope(&dir, &["export-pytorch", "csv.safetensors", "--data", "d.csv"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data-out <DATA_OUT>"));
    let out = stepscope(&dir, &["export-pytorch", "csv.safetensors", "--data-out", "d.csv", "--data", "d.csv"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data-out `d.csv` is the same file as --data"));
    std::fs::write(dir.join("three.csv"), "x1,x2,x3\n1,2,3\n").unwrap();
    let out = stepscope(&dir, &["predict", "csv.safetensors", "--inputs", "three.csv"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("3 input columns (x…) but the model takes 2"));
    std::fs::write(dir.join("nan.csv"), "x1,y,x2\n1,0,2\n1,0,nan\n").unwrap();
    let out = stepscope(&dir, &["predict", "csv.safetensors", "--inputs", "nan.csv"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3, column 3: `nan` is not a finite number"));
    let _ = std::fs::remove_file(dir.join("three.csv"));
    let _ = std::fs::remove_file(dir.join("nan.csv"));
    assert_eq!(files_in(&dir), before);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The metrics log grows while the run goes (`tail -f` follows it); Ctrl-C
/// stops at a step boundary, writes the checkpoint of that step, keeps the
/// metrics of every step taken and exits with 130.
#[cfg(unix)]
#[test]
fn ctrl_c_stops_at_a_step_boundary_with_a_checkpoint() {
    let dir = temp_dir("interrupt");
    std::fs::write(dir.join("long.json"), CONFIG.replace("\"total_steps\": 40", "\"total_steps\": 100000000")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_stepscope"))
        .args([
            "train",
            "--config",
            "long.json",
            "--steps",
            "100000000",
            "--out",
            "o.safetensors",
            "--metrics",
            "m.jsonl",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = || std::fs::read_to_string(dir.join("m.jsonl")).map(|t| t.lines().count()).unwrap_or(0);
    let waited = std::time::Instant::now();
    while lines() < 20 {
        assert!(waited.elapsed().as_secs() < 120, "the metrics log did not grow during the run");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!dir.join("o.safetensors").exists(), "no checkpoint before the end");
    let killed = Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted at step") && stderr.contains("written to o.safetensors"), "{stderr}");
    let state = load_checkpoint(&std::fs::read(dir.join("o.safetensors")).unwrap()).unwrap();
    assert_eq!(state.step() as usize, lines(), "one metrics line per step the checkpoint holds");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--help` on every subcommand, `--version`, no arguments, and `--flag=value`.
#[test]
fn help_version_and_flag_equals_value() {
    let dir = temp_dir("help");
    for command in ["train", "inspect", "verify", "export-pytorch", "predict", "bench"] {
        let out = stepscope(&dir, &[command, "--help"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{command} --help");
        assert!(stdout.contains(&format!("Usage: stepscope {command}")), "{command}: {stdout}");
    }
    assert!(String::from_utf8_lossy(&stepscope(&dir, &["train", "--help"]).stdout).contains("--memory-budget <MIB>"));
    // No subcommand: the usage is an error, on standard error, as every other.
    let bare = stepscope(&dir, &[]);
    assert_eq!(bare.status.code(), Some(2));
    assert!(bare.stdout.is_empty(), "{}", String::from_utf8_lossy(&bare.stdout));
    assert!(String::from_utf8_lossy(&bare.stderr).contains("Usage: stepscope"));
    let version = stepscope(&dir, &["--version"]);
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), format!("stepscope {}", env!("CARGO_PKG_VERSION")));
    let out = stepscope(&dir, &["train", "--config=config.json", "--steps=2", "--out=o.safetensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let state = load_checkpoint(&std::fs::read(dir.join("o.safetensors")).unwrap()).unwrap();
    assert_eq!(state.step(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--trace`: a ProfilerStep#N per step, its phases inside it one after
/// another on one track, adding up to it (gzip for a `.gz` name).
#[test]
fn trace_steps_hold_their_phases_end_to_end() {
    use std::io::Read;
    let dir = temp_dir("trace");
    let out = stepscope(&dir, &["train", "--config", "config.json", "--steps", "4", "--trace", "t.json.gz"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(dir.join("t.json.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    assert!(text.contains(r#""distributedInfo": {"backend": "none", "rank": 0"#), "HTA's rank pattern");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events: Vec<&serde_json::Value> =
        json["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").collect();
    let f = |e: &serde_json::Value, k: &str| e[k].as_f64().unwrap();
    let steps: Vec<_> = events.iter().filter(|e| e["name"].as_str().unwrap().starts_with("ProfilerStep#")).collect();
    assert_eq!(steps.len(), 4);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["name"], format!("ProfilerStep#{i}"));
        let (start, end) = (f(s, "ts"), f(s, "ts") + f(s, "dur"));
        let inside: Vec<_> = events
            .iter()
            .filter(|e| e["cat"] == "cpu_op" && f(e, "ts") >= start - 5e-3 && f(e, "ts") + f(e, "dur") <= end + 5e-3)
            .collect();
        let names: Vec<&str> = inside.iter().map(|e| e["name"].as_str().unwrap()).collect();
        // Two micro-batches: data and forward, backward, data and forward, backward.
        assert_eq!(
            names,
            [
                "enumerate(DataLoader)#Stepscope.__next__",
                "forward",
                "backward",
                "enumerate(DataLoader)#Stepscope.__next__",
                "forward",
                "backward",
                "optimizer",
                "logging"
            ],
            "step {i}"
        );
        for pair in inside.windows(2) {
            assert!((f(pair[0], "ts") + f(pair[0], "dur") - f(pair[1], "ts")).abs() < 2e-3, "contiguous");
        }
        let total: f64 = inside.iter().map(|e| f(e, "dur")).sum();
        assert!((total - f(s, "dur")).abs() < 1e-2, "step {i}: {total} of {}", f(s, "dur"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `open`: two ranks' metrics logs as one run's anatomy, a straggler
/// named; a bad file refused with one line.
#[test]
fn open_reads_a_run_from_outside() {
    let dir = temp_dir("open");
    let log = |data: f64| -> String {
        (0..4).map(|s| format!("{{\"step\": {s}, \"data_ms\": {data}, \"forward_ms\": 2, \"backward_ms\": 4, \"optimizer_ms\": 1}}\n")).collect()
    };
    std::fs::write(dir.join("rank0.jsonl"), log(1.0)).unwrap();
    std::fs::write(dir.join("rank1.jsonl"), log(7.0)).unwrap();
    let out = stepscope(&dir, &["open", "rank0.jsonl", "rank1.jsonl"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.starts_with("metrics: 2 ranks, 8 steps"), "{stdout}");
    // Steps of 8 and 14 ms, 1 and 7 of them waiting for data: 32 of 88 ms.
    assert!(stdout.contains("waiting for data: 36.4 % of step time (the data loader is the bottleneck"), "{stdout}");
    // Before the all-reduce: 7 and 13 ms, their median 10 ms.
    assert!(
        stdout.contains("rank 1    median step 14.000 ms, before the all-reduce 13.000 ms (1.30× the median), communication 0.0 %  straggler"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "rank 0    median step 8.000 ms, before the all-reduce 7.000 ms (0.70× the median), communication 0.0 %\n"
        ),
        "{stdout}"
    );
    std::fs::write(dir.join("bad.jsonl"), "{\"step\": 2, \"forward_ms\": 1}\n{\"step\": 1, \"forward_ms\": 1}\n")
        .unwrap();
    let out = stepscope(&dir, &["open", "bad.jsonl"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("bad.jsonl line 2: step 1 after step 2: steps go backwards"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
