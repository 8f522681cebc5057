//! Every file from outside is bounded as it is read, whatever it is (a
//! device, a pipe written forever, files whose total passes `open`'s), and
//! every output is checked against every input and every other output
//! before anything is created: a refused run leaves every file as it was.
//!
//! The hostile reads run under an address-space limit (`ulimit -v`), so a
//! read without a bound fails fast (an allocation abort) instead of taking
//! the machine's memory.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use common::{stepscope, temp_dir};

/// Address space the binary may take for the hostile reads: room for a
/// 256 MiB read (its buffer doubles once) and the binary itself, far less
/// than reading without a bound would take.
const ADDRESS_SPACE_KIB: u64 = 1536 << 10;

/// The binary run in `dir` under `ADDRESS_SPACE_KIB`.
#[cfg(unix)]
fn stepscope_bounded(dir: &Path, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_stepscope"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("binary runs")
}

/// One line on stderr, status 2, containing `needle`.
fn refused(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "`{needle}` not in: {err}");
}

/// A transformer on a text file (`--data`).
const TEXT_CONFIG: &str = r#"{"seed": 3, "model": {"kind": "gpt", "vocab_size": 20, "context": 8, "embed": 8, "heads": 2, "blocks": 1},
  "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99]},
  "batch_size": 3, "data": {"source": "text", "train_fraction": 0.8}}"#;

#[cfg(unix)]
#[test]
fn a_device_is_read_no_further_than_its_limit() {
    let dir = temp_dir("inputs-device");
    std::fs::write(dir.join("text.json"), TEXT_CONFIG).unwrap();
    let run = |args: &[&str]| stepscope_bounded(&dir, args);
    refused(&run(&["train", "--config", "text.json", "--data", "/dev/zero"]), "larger than 256 MiB");
    refused(&run(&["train", "--config", "/dev/zero"]), "config `/dev/zero` is larger than 1 MiB");
    refused(&run(&["train", "--config", "config.json", "--init", "/dev/zero"]), "not a JSON object");
    refused(&run(&["inspect", "/dev/zero"]), "not a JSON object");
    refused(&run(&["open", "/dev/zero"]), "run file `/dev/zero` is larger than 256 MiB");
}

/// A named pipe written forever by a thread of this test; the reader's end
/// closing ends the writer (a write error).
#[cfg(unix)]
fn endless_fifo(path: &Path) {
    let made = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(made.success());
    let path = path.to_path_buf();
    std::thread::spawn(move || {
        use std::io::Write;
        let Ok(mut pipe) = std::fs::OpenOptions::new().write(true).open(&path) else { return };
        let block = vec![b'a'; 1 << 16];
        while pipe.write_all(&block).is_ok() {}
    });
}

#[cfg(unix)]
#[test]
fn a_pipe_that_never_ends_is_refused_at_the_limit() {
    let dir = temp_dir("inputs-fifo");
    std::fs::write(dir.join("text.json"), TEXT_CONFIG).unwrap();
    endless_fifo(&dir.join("run.fifo"));
    refused(&stepscope_bounded(&dir, &["open", "run.fifo"]), "run file `run.fifo` is larger than 256 MiB");
    endless_fifo(&dir.join("text.fifo"));
    refused(
        &stepscope_bounded(&dir, &["train", "--config", "text.json", "--data", "text.fifo"]),
        "--data file `text.fifo` is larger than 256 MiB",
    );
}

/// Sixteen files of 255 MiB (sparse: nothing on disk) pass `open`'s total
/// of 1 GiB at the fifth; the opening is refused there, before the later
/// files are read (the address-space limit holds less than two of them).
#[cfg(unix)]
#[test]
fn the_total_of_an_opening_is_checked_before_each_next_file() {
    let dir = temp_dir("inputs-total");
    let names: Vec<String> = (0..16).map(|k| format!("rank{k}.json")).collect();
    for name in &names {
        std::fs::File::create(dir.join(name)).unwrap().set_len(255 << 20).unwrap();
    }
    let mut args = vec!["open"];
    args.extend(names.iter().map(String::as_str));
    refused(
        &stepscope_bounded(&dir, &args),
        "run file `rank4.json`: 1336934400 bytes with the files before it, more than the 1 GiB opened at once",
    );
}

/// Every file in `dir` (recursively) with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            for (inner, bytes) in snapshot(&path) {
                files.insert(format!("{name}/{inner}"), bytes);
            }
            files.insert(format!("{name}/"), Vec::new());
        } else {
            files.insert(name, std::fs::read(&path).unwrap());
        }
    }
    files
}

#[test]
fn every_output_is_checked_against_every_input_and_output_before_anything_is_written() {
    let dir = temp_dir("inputs-collide");
    let run = |args: &[&str]| stepscope(&dir, args);
    let made = run(&["train", "--config", "config.json", "--steps", "2", "--out", "ck.safetensors"]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    std::fs::write(dir.join("old.jsonl"), "{\"step\": 0}\n").unwrap();
    std::fs::write(dir.join("rows.csv"), "x1,x2,y\n0,1,0\n").unwrap();
    let outputs = ["--out", "--metrics", "--trace", "--tensorboard"];
    let inputs = [("--init", "ck.safetensors"), ("--data", "rows.csv"), ("--config", "config.json")];
    let mut pairs: Vec<(&str, &str, &str)> = Vec::new();
    for out in outputs {
        for (input, path) in inputs {
            if (out, input) != ("--out", "--init") {
                pairs.push((out, input, path));
            }
        }
    }
    for (i, a) in outputs.iter().enumerate() {
        for b in &outputs[i + 1..] {
            pairs.push((a, b, "same"));
        }
    }
    for (first, second, path) in pairs {
        let before = snapshot(&dir);
        let mut args = vec!["train", "--steps", "2", first, path, second, path];
        if first != "--config" && second != "--config" {
            args.extend(["--config", "config.json"]);
        }
        refused(&run(&args), "is the same file as");
        assert_eq!(snapshot(&dir), before, "{first} and {second} both `{path}`: a file changed");
    }

    // A refused run neither truncates an existing log nor makes a folder:
    // --tensorboard naming a file, --tensorboard equal to --out.
    std::fs::write(dir.join("plain"), "not a folder").unwrap();
    let before = snapshot(&dir);
    let base = ["train", "--config", "config.json", "--steps", "2", "--metrics", "old.jsonl"];
    refused(&run(&[&base[..], &["--tensorboard", "plain"]].concat()), "is not a directory");
    refused(&run(&[&base[..], &["--tensorboard", "tb", "--out", "tb"]].concat()), "is the same file as");
    refused(&run(&[&base[..], &["--tensorboard", "new/tb", "--out", "new/tb"]].concat()), "is the same file as");
    assert_eq!(snapshot(&dir), before);

    // Resuming in place stays allowed.
    let resumed = run(&["train", "--init", "ck.safetensors", "--out", "ck.safetensors", "--steps", "2"]);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_ne!(snapshot(&dir)["ck.safetensors"], before["ck.safetensors"]);
    let step = run(&["inspect", "ck.safetensors"]);
    assert!(String::from_utf8_lossy(&step.stdout).contains("step:       4"));
}

/// `predict --out` and `export-pytorch`'s outputs against their inputs.
#[test]
fn other_commands_refuse_an_output_over_an_input() {
    let dir = temp_dir("inputs-commands");
    let run = |args: &[&str]| stepscope(&dir, args);
    let made = run(&["train", "--config", "config.json", "--steps", "2", "--out", "ck.safetensors"]);
    assert!(made.status.success());
    std::fs::write(dir.join("in.csv"), "x1,x2\n0.5,0.5\n").unwrap();
    let before = snapshot(&dir);
    refused(&run(&["predict", "ck.safetensors", "--inputs", "in.csv", "--out", "in.csv"]), "is the same file as");
    refused(
        &run(&["predict", "ck.safetensors", "--inputs", "in.csv", "--out", "ck.safetensors"]),
        "is the same file as",
    );
    refused(&run(&["export-pytorch", "ck.safetensors", "--out", "ck.safetensors"]), "is the same file as");
    refused(&run(&["export-pytorch", "ck.safetensors", "--out", "a.py", "--data-out", "a.py"]), "is the same file as");
    assert_eq!(snapshot(&dir), before);
}
