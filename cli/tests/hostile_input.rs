//! The `stepscope` binary against hostile input: bad arguments and files,
//! checkpoints with absurd metadata, non-UTF-8 arguments. Each gets a
//! one-line error with exit status 2 and leaves no output behind.

mod common;

use std::process::Command;

use common::{files_in, stepscope, temp_dir, CONFIG};

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
            "the run needs 98.1 MiB at its peak (parameters 0.0 MiB, gradients 0.0 MiB, optimizer state 0.1 MiB, activations 64.0 MiB",
        ),
        (&["train", "--config", "huge.json", "--out", "o.safetensors"], "more than the 2048.0 MiB budget (--memory-budget)"),
        (&["train", "--config", "config.json", "--memory-budget", "0"], "invalid value '0' for '--memory-budget <MIB>': needs a whole number > 0"),
        (&["train", "--config", "config.json", "--tensorboard", "config.json"], "--tensorboard `config.json` is the same file as --config"),
        (&["train", "--config", "config.json", "--tensorboard", "csv.json/tb"], "--tensorboard `csv.json/tb`: `csv.json` is not a directory"),
        (&["train", "--config", "config.json", "--histogram-every", "5"], "required arguments were not provided: --tensorboard <DIR>"),
        (&["train", "--config", "config.json", "--tensorboard", "tb", "--histogram-every", "0"], "invalid value '0' for '--histogram-every <HISTOGRAM_EVERY>'"),
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
/// refuses each in one line with status 2, instead of hanging, overflowing
/// or training at lr 1e30.
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
            let out = stepscope(&dir, &args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
            assert_eq!(stderr.lines().count(), 1, "{args:?}: one line, got {stderr}");
            assert!(stderr.contains(want), "{args:?}: `{stderr}` lacks `{want}`");
            assert_eq!(files_in(&dir), before, "{args:?} left files behind");
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
