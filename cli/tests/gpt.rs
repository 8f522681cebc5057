//! The transformer from the command line, at a tiny size: train with
//! tokens/s, z-loss and the validation loss in the metrics; resume exactly;
//! sample the same text for the same seed; verify; and bad text or configs
//! refused with one line, exit 2.

mod common;

use common::{stepscope, temp_dir};
use stepscope_core::checkpoint::load_checkpoint;

const TEXT: &str = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n\
First Citizen:\nYou are all resolved rather to die than to famish?\n";

/// The distinct characters of `TEXT`.
fn vocabulary() -> usize {
    let mut chars: Vec<char> = TEXT.chars().collect();
    chars.sort_unstable();
    chars.dedup();
    chars.len()
}

fn config(extra: &str) -> String {
    format!(
        r#"{{"seed": 3, "model": {{"kind": "gpt", "vocab_size": {}, "context": 8, "embed": 8, "heads": 2, "blocks": 1}},
          "loss": "cross_entropy", "optimizer": {{"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99]}},
          "schedule": {{"kind": "warmup_cosine", "warmup_steps": 2, "total_steps": 12}},
          "batch_size": 3, "clip_grad_norm": 1.0, "z_loss": 0.0001{extra},
          "data": {{"source": "text", "train_fraction": 0.8}}}}"#,
        vocabulary()
    )
}

fn lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn a_gpt_trains_resumes_samples_and_verifies() {
    let dir = temp_dir("gpt");
    std::fs::write(dir.join("gpt.json"), config("")).unwrap();
    std::fs::write(dir.join("text.txt"), TEXT).unwrap();
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--data", "text.txt", "--eval-every", "4"];
        args.extend_from_slice(extra);
        let out = stepscope(&dir, &args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let stdout = train(&[
        "--config",
        "gpt.json",
        "--out",
        "straight.safetensors",
        "--metrics",
        "m.jsonl",
        "--tensorboard",
        "tb",
    ]);
    // TensorBoard's tags for a transformer (the records' framing is the
    // MLP's, read back by TensorBoard itself in scripts/check_tensorboard.py).
    let events = std::fs::read_dir(dir.join("tb")).unwrap().next().unwrap().unwrap().path();
    let events = String::from_utf8_lossy(&std::fs::read(events).unwrap()).into_owned();
    for tag in ["speed/tokens_per_second", "loss/val", "loss/z_loss", "weights/transformer.h.0.attn.c_attn.weight"] {
        assert!(events.contains(tag), "{tag}");
    }
    assert!(stdout.contains("gpt (1 blocks × 2 heads × embed 8, context 8"), "{stdout}");
    assert!(stdout.contains("tokens/s") && stdout.contains("val_loss"), "{stdout}");
    let m = lines(&dir.join("m.jsonl"));
    assert_eq!(m.len(), 12);
    for line in &m {
        for key in ["loss", "z_loss", "tokens_per_second", "grad_norm"] {
            assert!(line[key].as_f64().is_some_and(f64::is_finite), "{key} in {line}");
        }
    }
    // The validation loss at the evaluation cadence (steps 4, 8) and the end.
    let evaluated: Vec<u64> =
        m.iter().filter(|l| l["val_loss"].is_f64()).map(|l| l["step"].as_u64().unwrap()).collect();
    assert_eq!(evaluated, [3, 7, 11]);

    train(&["--config", "gpt.json", "--steps", "5", "--out", "first.safetensors"]);
    train(&["--init", "first.safetensors", "--out", "resumed.safetensors"]);
    let read = |name: &str| load_checkpoint(&std::fs::read(dir.join(name)).unwrap()).unwrap();
    assert_eq!(read("resumed.safetensors"), read("straight.safetensors"));

    let sample = |seed: &str| {
        let out = stepscope(
            &dir,
            &["sample", "straight.safetensors", "--prompt", "First", "--tokens", "40", "--seed", seed, "--top-k", "5"],
        );
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let a = sample("7");
    assert!(a.starts_with("First") && a.trim_end().chars().count() >= 40, "{a:?}");
    assert_eq!(a, sample("7"));
    assert_ne!(a, sample("8"));
    // On the GPU engine's forward: the same text, checked by the CPU's
    // forward wherever a draw fell within the logits' tolerance of an edge,
    // and said so.
    let out = stepscope(
        &dir,
        &[
            "sample",
            "straight.safetensors",
            "--prompt",
            "First",
            "--tokens",
            "40",
            "--seed",
            "7",
            "--top-k",
            "5",
            "--backend",
            "gpu",
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("the CPU engine writes the same text"), "{said}");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), a, "{said}");

    let out = stepscope(&dir, &["verify", "straight.safetensors", "--data", "text.txt", "--steps", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_text_and_bad_sampling_get_one_line() {
    let dir = temp_dir("gpt-bad");
    std::fs::write(dir.join("gpt.json"), config("")).unwrap();
    std::fs::write(dir.join("text.txt"), TEXT).unwrap();
    let mut bad_utf8 = TEXT.as_bytes().to_vec();
    bad_utf8.insert(10, 0xff);
    std::fs::write(dir.join("bad.txt"), &bad_utf8).unwrap();
    std::fs::write(dir.join("short.txt"), "First").unwrap();
    std::fs::write(dir.join("other.txt"), "abcdefghijklmnopqrstuvwxyz").unwrap();
    std::fs::write(dir.join("empty.txt"), "").unwrap();
    std::fs::write(dir.join("heads.json"), config("").replace("\"heads\": 2", "\"heads\": 3")).unwrap();
    let refused = |args: &[&str], want: &str| {
        let out = stepscope(&dir, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: `{stderr}` lacks `{want}`");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    };
    fn train(data: &str) -> Vec<&str> {
        vec!["train", "--config", "gpt.json", "--steps", "1", "--data", data]
    }
    refused(&train("bad.txt"), "not UTF-8: the bytes from offset 10 are not a character");
    refused(&train("short.txt"), "the text has 5 characters; a context of 8 needs at least 9");
    refused(&train("empty.txt"), "the text is empty");
    refused(&train("other.txt"), &format!("model.vocab_size is {} but the text has 26", vocabulary()));
    refused(&["train", "--config", "gpt.json", "--steps", "1"], "data.source is \"text\": give the file with --data");
    refused(
        &["train", "--config", "heads.json", "--data", "text.txt"],
        "model.embed (8) must be a multiple of model.heads (3)",
    );
    let out = stepscope(
        &dir,
        &["train", "--config", "gpt.json", "--steps", "2", "--data", "text.txt", "--out", "g.safetensors"],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    refused(
        &["sample", "g.safetensors", "--prompt", "Zebra"],
        "--prompt: the character 'Z' is not in the model's vocabulary",
    );
    refused(&["sample", "g.safetensors", "--temperature", "0"], "--temperature must be a finite number > 0");
    refused(&["sample", "g.safetensors", "--top-k", "0"], "--top-k must be at least 1");
    refused(&["predict", "g.safetensors", "--inputs", "text.txt"], "predict reads an MLP's; `stepscope sample`");
    let _ = std::fs::remove_dir_all(&dir);
}
