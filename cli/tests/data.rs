//! The `stepscope` binary on the data sources beyond the two-class plane:
//! the digits and the three-class spiral of `examples/`, a CSV with a test
//! split (training, resuming and exporting its training rows), and losses
//! that do not fit the data.

mod common;

use std::path::Path;

use common::{files_in, stepscope, temp_dir, CIRCLE, CONFIG};
use stepscope_core::checkpoint::load_checkpoint;

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples").join(name).to_string_lossy().into_owned()
}

/// The percentage after `prefix` on the line that starts with it.
fn percent(stdout: &str, prefix: &str) -> f64 {
    let line = stdout.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no `{prefix}` in {stdout}"));
    let at = line.find("accuracy ").expect("an accuracy") + "accuracy ".len();
    line[at..].trim_end_matches('%').parse().unwrap()
}

#[test]
fn digits_train_well_above_chance_and_report_each_class() {
    let dir = temp_dir("digits");
    let out =
        stepscope(&dir, &["train", "--config", &example("digits.json"), "--steps", "150", "--out", "d.safetensors"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("training 64-64-10 on digits (1437 train / 360 test rows)"), "{stdout}");
    // Ten classes: chance is 10 %.
    assert!(percent(&stdout, "test: ") > 80.0, "{stdout}");
    let by_class = stdout.lines().find(|l| l.starts_with("test accuracy by class: ")).expect("per-class line");
    for k in 0..10 {
        assert!(by_class.contains(&format!("{k} ")), "{by_class}");
    }
    let counts: u64 =
        by_class.split(" of ").skip(1).map(|s| s.split(',').next().unwrap().parse::<u64>().unwrap()).sum();
    assert_eq!(counts, 360, "{by_class}");
    assert!(stdout.contains("test misclassified: "), "{stdout}");
    // The export writes the 1,437 training rows: 64 pixel columns and the class.
    let out = stepscope(&dir, &["export-pytorch", "d.safetensors", "--out", "d.py", "--data-out", "rows.csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows = std::fs::read_to_string(dir.join("rows.csv")).unwrap();
    assert!(rows.starts_with("x1,x2,") && rows.lines().next().unwrap().ends_with(",x64,y"));
    assert_eq!(rows.lines().count(), 1 + 1437);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn spiral3_trains_with_three_classes() {
    let dir = temp_dir("spiral3");
    let out = stepscope(&dir, &["train", "--config", &example("spiral3.json"), "--steps", "300"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("on spiral3 (480 train / 120 test rows)"), "{stdout}");
    assert!(percent(&stdout, "test: ") > 60.0, "{stdout}");
    assert!(stdout.contains("test accuracy by class: 0 ") && stdout.contains(", 2 "), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A CSV with `train_fraction` trains on its share of the rows, resumes
/// exactly, and exports those rows (not the whole file) for PyTorch.
#[test]
fn a_split_csv_trains_resumes_and_exports_its_training_rows() {
    let dir = temp_dir("csv-split");
    let config = CONFIG.replace(CIRCLE, "\"source\": \"csv\", \"train_fraction\": 0.75");
    std::fs::write(dir.join("split.json"), config).unwrap();
    let mut csv = String::from("x1,x2,y\n");
    for i in 0..64 {
        csv += &format!("{i},{},{}\n", (i as f32 * 0.91).cos() * 3.0, i % 2);
    }
    std::fs::write(dir.join("d.csv"), csv).unwrap();
    let train = |args: &[&str]| {
        let out = stepscope(&dir, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let stdout =
        train(&["train", "--config", "split.json", "--data", "d.csv", "--steps", "10", "--out", "s.safetensors"]);
    assert!(stdout.contains("48 train / 16 test rows"), "{stdout}");
    assert!(stdout.contains("test: loss") && stdout.contains("test accuracy by class: "), "{stdout}");
    train(&["train", "--config", "split.json", "--data", "d.csv", "--steps", "4", "--out", "a.safetensors"]);
    train(&["train", "--init", "a.safetensors", "--data", "d.csv", "--steps", "6", "--out", "b.safetensors"]);
    let read = |name: &str| load_checkpoint(&std::fs::read(dir.join(name)).unwrap()).unwrap();
    assert_eq!(read("b.safetensors"), read("s.safetensors"));

    train(&["export-pytorch", "s.safetensors", "--out", "s.py", "--data-out", "rows.csv", "--data", "d.csv"]);
    let rows = std::fs::read_to_string(dir.join("rows.csv")).unwrap();
    let ids: Vec<usize> = rows.lines().skip(1).map(|l| l.split(',').next().unwrap().parse().unwrap()).collect();
    assert_eq!(ids.len(), 48);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "file order: {ids:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn losses_that_do_not_fit_the_data_are_refused() {
    let dir = temp_dir("misfit");
    let digits = std::fs::read_to_string(example("digits.json")).unwrap();
    std::fs::write(dir.join("mse.json"), digits.replace("\"cross_entropy\"", "\"mse\"")).unwrap();
    std::fs::write(
        dir.join("noise.json"),
        digits.replace("\"source\": \"digits\"", "\"source\": \"digits\", \"noise\": 0.1"),
    )
    .unwrap();
    let before = files_in(&dir);
    for (config, want) in [
        ("mse.json", "digits has 10 classes: the loss must be cross_entropy with 10 output units, not mse"),
        ("noise.json", "data.noise does not apply to \"source\": \"digits\""),
    ] {
        let out = stepscope(&dir, &["train", "--config", config, "--out", "o.safetensors"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(want), "{stderr}");
    }
    assert_eq!(files_in(&dir), before);
    let _ = std::fs::remove_dir_all(&dir);
}
