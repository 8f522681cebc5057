//! Long work on the command line: progress lines while a run goes, inside
//! a long step, and while a large file is read; Ctrl-C inside a step; a
//! large CSV read in linear time. Waits are the harness's own deadlines
//! (generous, for a loaded machine), never assertions on the clock.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use common::{temp_dir, CIRCLE, CONFIG};
use stepscope_core::checkpoint::load_checkpoint;

/// Starts `stepscope` with its standard output read line by line.
fn spawn(dir: &std::path::Path, args: &[&str]) -> (Child, Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_stepscope"))
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (send, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if send.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// The first line of `lines` that `wanted` accepts, within the harness's
/// deadline; the lines before it.
fn wait_for(lines: &Receiver<String>, wanted: impl Fn(&str) -> bool, what: &str) -> (String, Vec<String>) {
    let mut seen = Vec::new();
    loop {
        match lines.recv_timeout(Duration::from_secs(120)) {
            Ok(line) if wanted(&line) => return (line, seen),
            Ok(line) => seen.push(line),
            Err(_) => panic!("no {what} within the harness's deadline; lines so far: {seen:#?}"),
        }
    }
}

fn interrupt(child: Child) -> (Option<i32>, String) {
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `--steps 10¹²`: the tenth-of-the-run report would come after years, so
/// progress lines come on the clock, with steps/s; Ctrl-C stops the run.
#[cfg(unix)]
#[test]
fn a_run_of_a_trillion_steps_reports_progress_and_stops() {
    let dir = temp_dir("trillion");
    let (child, lines) =
        spawn(&dir, &["train", "--config", "config.json", "--steps", "1000000000000", "--out", "o.safetensors"]);
    let (first, _) = wait_for(&lines, |l| l.starts_with("training "), "start line");
    assert!(first.contains("1000000000000 steps"), "{first}");
    let (progress, _) = wait_for(&lines, |l| l.contains("steps/s"), "progress line");
    assert!(progress.contains(" of 1000000000000") && progress.contains("loss"), "{progress}");
    let (code, stderr) = interrupt(child);
    assert_eq!(code, Some(130), "{stderr}");
    let state = load_checkpoint(&std::fs::read(dir.join("o.safetensors")).unwrap()).unwrap();
    assert!(state.step() > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One step of 1,024 micro-batches of 65,536 rows takes minutes: progress
/// comes from inside it, and Ctrl-C stops it between micro-batches. The
/// checkpoint written is that of the last finished step (here the start),
/// with the data where that step left it.
#[cfg(unix)]
#[test]
fn ctrl_c_inside_a_long_step_keeps_the_last_finished_step() {
    let dir = temp_dir("long-step");
    let config = CONFIG
        .replace("\"batch_size\": 16, \"grad_accumulation\": 2", "\"batch_size\": 65536, \"grad_accumulation\": 1024");
    assert_ne!(config, CONFIG);
    std::fs::write(dir.join("long.json"), config).unwrap();
    let (child, lines) = spawn(&dir, &["train", "--config", "long.json", "--steps", "3", "--out", "o.safetensors"]);
    let (under_way, seen) = wait_for(&lines, |l| l.contains("under way"), "progress line inside the step");
    assert!(under_way.starts_with("step 1 of 3 under way"), "{under_way}");
    assert!(seen.iter().all(|l| !l.starts_with("step ")), "no step finished: {seen:?}");
    let (code, stderr) = interrupt(child);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupted at step 0; the checkpoint of step 0 was written"), "{stderr}");
    let state = load_checkpoint(&std::fs::read(dir.join("o.safetensors")).unwrap()).unwrap();
    assert_eq!(state.step(), 0);
    assert_eq!(state.data_position.rows_consumed, 0, "the dropped step's rows are not counted");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A million-row CSV is read and trained on (linear reading; the quadratic
/// reader took minutes at this size), with the figures of the run.
#[test]
fn a_million_row_csv_trains() {
    let dir = temp_dir("million");
    std::fs::write(dir.join("csv.json"), CONFIG.replace(CIRCLE, "\"source\": \"csv\", \"train_fraction\": 0.9"))
        .unwrap();
    let mut csv = String::with_capacity(20_000_000);
    csv += "x1,x2,y\n";
    for i in 0..1_000_000u32 {
        let (a, b) = ((i as f32 * 0.37).sin(), (i as f32 * 0.91).cos());
        csv += &format!("{a:.3},{b:.3},{}\n", u8::from(a * b > 0.0));
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stepscope"))
        .args(["train", "--config", "csv.json", "--data", "d.csv", "--steps", "20"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("900000 train / 100000 test rows"), "{stdout}");
    assert!(stdout.contains("test: loss"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
