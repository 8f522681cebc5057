//! The `stepscope` binary end to end: training, metrics, resume, and the
//! one-line errors with exit status 2 that leave no output behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use stepscope_core::checkpoint::load_checkpoint;

const CONFIG: &str = r#"{"seed": 11,
  "model": {"inputs": 2, "layers": [{"units": 8, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
  "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.02},
  "schedule": {"kind": "warmup_linear", "warmup_steps": 3, "total_steps": 40},
  "batch_size": 16, "grad_accumulation": 2, "clip_grad_norm": 1.0,
  "data": {"source": "circle", "samples": 120, "noise": 0.05, "train_fraction": 0.75}}"#;

const CIRCLE: &str = "\"source\": \"circle\", \"samples\": 120, \"noise\": 0.05, \"train_fraction\": 0.75";

fn stepscope(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stepscope")).args(args).current_dir(dir).output().expect("binary runs")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("stepscope-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), CONFIG).unwrap();
    dir
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

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
fn bad_arguments_and_files_fail_in_one_line_with_status_2_and_no_output() {
    let dir = temp_dir("errors");
    std::fs::write(dir.join("typo.json"), CONFIG.replace("\"seed\"", "\"sed\"")).unwrap();
    std::fs::write(dir.join("garbage.safetensors"), b"\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":").unwrap();
    std::fs::write(
        dir.join("csv.json"),
        CONFIG.replace(
            "\"source\": \"circle\", \"samples\": 120, \"noise\": 0.05, \"train_fraction\": 0.75",
            "\"source\": \"csv\"",
        ),
    )
    .unwrap();
    std::fs::write(dir.join("bad.csv"), "x1,x2,y\n1,2,0\n3,oops,1\n").unwrap();
    let big = CONFIG.replace("\"units\": 8", "\"units\": 2048").replace("\"batch_size\": 16", "\"batch_size\": 4096");
    std::fs::write(dir.join("big.json"), big).unwrap();
    // The largest model each field allows (16 layers of 4,096 units with
    // Adam): 3.8 GB of parameters, gradients and moments, refused by the
    // default budget before any of it is allocated.
    let widest = r#"{"units": 4096, "activation": "tanh"}, "#.repeat(15);
    let huge = CONFIG.replace(r#"{"units": 8, "activation": "tanh"}, "#, &widest);
    std::fs::write(dir.join("huge.json"), huge).unwrap();
    let before = files_in(&dir);
    let cases: &[(&[&str], &str)] = &[
        (&["train"], "the following required arguments were not provided: --config <CONFIG>"),
        (&["train", "--config"], "a value is required for '--config <CONFIG>' but none was supplied"),
        (&["train", "--config", "missing.json", "--out", "o.safetensors"], "cannot read config `missing.json`"),
        (&["train", "--config", "typo.json", "--out", "o.safetensors", "--metrics", "m.jsonl"], "unknown field `sed`"),
        (&["train", "--config", "config.json", "--steps", "0"], "invalid value '0' for '--steps <STEPS>': needs a whole number > 0"),
        (&["train", "--config", "config.json", "--backend", "tpu"], "invalid value 'tpu' for '--backend <BACKEND>' [possible values: cpu, gpu]"),
        (&["train", "--config", "config.json", "--frobnicate"], "unexpected argument '--frobnicate' found"),
        (&["train", "--config", "config.json", "--checkpoint-every", "5"], "required arguments were not provided: --out <OUT>"),
        (
            &["train", "--config", "config.json", "--init", "garbage.safetensors", "--out", "o.safetensors"],
            "--init `garbage.safetensors`",
        ),
        (&["train", "--config", "csv.json", "--out", "o.safetensors"], "give the file with --data"),
        (&["train", "--config", "csv.json", "--data", "bad.csv", "--metrics", "m.jsonl"], "line 3, column 2"),
        (&["train", "--config", "config.json", "--data", "bad.csv"], "--data is for"),
        (&["inspect", "garbage.safetensors"], "truncated"),
        (&["inspect"], "required arguments were not provided: <FILE>"),
        (&["export-pytorch"], "required arguments were not provided: <CHECKPOINT>"),
        (&["export-pytorch", "garbage.safetensors", "--out", "s.py"], "`garbage.safetensors`: checkpoint: truncated"),
        (&["export-pytorch", "missing.safetensors", "--out", "s.py"], "cannot read checkpoint"),
        (&["export-pytorch", "a.safetensors", "b.safetensors"], "unexpected argument 'b.safetensors' found"),
        (&["export-pytorch", "a.safetensors", "--out"], "a value is required for '--out <OUT>'"),
        (&["predict", "garbage.safetensors"], "required arguments were not provided: --inputs <INPUTS>"),
        (&["predict", "garbage.safetensors", "--inputs", "bad.csv"], "truncated"),
        (&["fly"], "unrecognized subcommand 'fly'"),
        (
            &["train", "--config", "config.json", "--out", "config.json"],
            "--out `config.json` is the same file as --config",
        ),
        (
            &["train", "--config", "config.json", "--out", "./m.jsonl", "--metrics", "m.jsonl"],
            "--metrics `m.jsonl` is the same file as --out",
        ),
        (&["train", "--config", "config.json", "--metrics", "config.json"], "is the same file as --config"),
        (
            &["train", "--config", "csv.json", "--data", "bad.csv", "--out", "bad.csv"],
            "--out `bad.csv` is the same file as --data",
        ),
        (
            &["train", "--config", "config.json", "--out", "no-such-dir/o.safetensors"],
            "--out: cannot write `no-such-dir/o.safetensors`",
        ),
        (&["train", "--config", "config.json", "--out", "."], "--out `.` is a directory"),
        (
            &["train", "--config", "big.json", "--memory-budget", "64", "--out", "o.safetensors"],
            "the run needs 130.0 MiB at its peak (parameters 0.0 MiB, gradients 0.0 MiB, optimizer state 0.1 MiB, activations 64.0 MiB",
        ),
        (&["train", "--config", "huge.json", "--out", "o.safetensors"], "more than the 2048.0 MiB budget (--memory-budget)"),
        (&["train", "--config", "config.json", "--memory-budget", "0"], "invalid value '0' for '--memory-budget <MIB>': needs a whole number > 0"),
    ];
    for (args, want) in cases {
        let out = stepscope(&dir, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr}");
        assert!(stderr.starts_with("stepscope: error: ") && stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(files_in(&dir), before, "{args:?} left files behind");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Checkpoints whose metadata is absurd but whose digest is right (as a
/// hostile file would be written): every command that reads a checkpoint
/// refuses each in one line with status 2, in well under a second, instead
/// of hanging, overflowing or training at lr 1e30.
#[test]
fn absurd_checkpoint_metadata_is_refused_by_every_command() {
    use stepscope_core::checkpoint::{load_checkpoint, serialize_unchecked};
    use stepscope_core::experiment::OptimizerSpec;
    let dir = temp_dir("absurd");
    let out = stepscope(&dir, &["train", "--config", "config.json", "--steps", "3", "--out", "good.safetensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let good = load_checkpoint(&std::fs::read(dir.join("good.safetensors")).unwrap()).unwrap();
    std::fs::write(dir.join("rows.csv"), "x1,x2\n0.5,0.5\n").unwrap();
    type Edit = fn(&mut stepscope_core::TrainState);
    let cases: [(&str, Edit, &str); 5] = [
        (
            "rows",
            |s| {
                s.experiment.data.shuffle = true;
                s.data_position.rows_consumed = 1_000_000_000_000_000_000;
            },
            "restoring would replay the shuffle",
        ),
        ("rows-max", |s| s.data_position.rows_consumed = u64::MAX, "rows_consumed 18446744073709551615 is beyond"),
        ("step-max", |s| s.optimizer.step = u64::MAX, "step count 18446744073709551615 is beyond"),
        ("moment", |s| s.optimizer.exp_avg_sq[1] = -1.0, "exp_avg_sq holds a negative value (-1)"),
        (
            "lr",
            |s| {
                if let OptimizerSpec::Adam { lr, .. } = &mut s.experiment.optimizer {
                    *lr = 1e30;
                }
            },
            "optimizer.lr must be a finite number in [0, 100]",
        ),
    ];
    for (name, edit, want) in cases {
        let mut state = good.clone();
        edit(&mut state);
        let file = format!("{name}.safetensors");
        std::fs::write(dir.join(&file), serialize_unchecked(&state).unwrap()).unwrap();
        let before = files_in(&dir);
        // Loading alone refuses all but the first, which only the data can
        // tell apart (a shuffled run that far into its epochs): the commands
        // that build an engine refuse it.
        let commands: Vec<Vec<&str>> = if name == "rows" {
            vec![vec!["train", "--init", &file, "--steps", "1", "--out", "o.safetensors"], vec!["verify", &file]]
        } else {
            vec![
                vec!["train", "--init", &file, "--steps", "1", "--out", "o.safetensors"],
                vec!["verify", &file],
                vec!["export-pytorch", &file, "--out", "s.py"],
                vec!["predict", &file, "--inputs", "rows.csv"],
            ]
        };
        for args in commands {
            let started = std::time::Instant::now();
            let out = stepscope(&dir, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr}");
            assert!(stderr.contains(want), "{args:?}: `{stderr}` lacks `{want}`");
            assert_eq!(files_in(&dir), before, "{args:?} left files behind");
            // Not a speed figure: a refusal that takes a minute is a hang.
            assert!(started.elapsed().as_secs() < 60, "{args:?} took {:?}", started.elapsed());
        }
    }
    // Without shuffling, a run 10^18 rows in is merely far along: it
    // resumes and steps (it used to spin through the epochs, a hang).
    let mut far = good.clone();
    far.data_position.rows_consumed = 1_000_000_000_000_000_000;
    far.data_position.epoch = far.data_position.rows_consumed / 90;
    std::fs::write(dir.join("far.safetensors"), serialize_unchecked(&far).unwrap()).unwrap();
    let out = stepscope(&dir, &["train", "--init", "far.safetensors", "--steps", "2", "--out", "far-next.safetensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
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

    // A CSV experiment's rows are the user's file: --data-out is refused,
    // before anything is written.
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
    assert!(String::from_utf8_lossy(&out.stderr).contains("--data-out is for built-in datasets"));
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

/// Arguments that are not UTF-8 get a message, not a panic.
#[cfg(unix)]
#[test]
fn non_utf8_arguments_are_refused() {
    use std::os::unix::ffi::OsStrExt;
    let dir = temp_dir("utf8");
    let out = Command::new(env!("CARGO_BIN_EXE_stepscope"))
        .args([
            std::ffi::OsStr::new("train"),
            std::ffi::OsStr::new("--config"),
            std::ffi::OsStr::from_bytes(b"\xff.json"),
        ])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.starts_with("stepscope: error: argument") && stderr.contains("not valid UTF-8"), "{stderr}");
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

/// `--help` on every subcommand, `--version`, and `--flag=value`.
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
    let version = stepscope(&dir, &["--version"]);
    assert_eq!(String::from_utf8_lossy(&version.stdout).trim(), format!("stepscope {}", env!("CARGO_PKG_VERSION")));
    let out = stepscope(&dir, &["train", "--config=config.json", "--steps=2", "--out=o.safetensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let state = load_checkpoint(&std::fs::read(dir.join("o.safetensors")).unwrap()).unwrap();
    assert_eq!(state.step(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}
