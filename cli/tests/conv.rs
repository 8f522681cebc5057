//! The conv net from the command line (issue 41): ConvNetJS's MNIST net
//! (examples/mnist_convnet.json) on a CSV of 28 × 28 images trains, and its
//! checkpoint inspects, verifies, predicts and exports as a newcomer would
//! use them; a malformed conv layer is one line naming the field.

mod common;

use common::{stepscope, temp_dir};

/// 40 images of 28 × 28: a vertical bar whose column is the class.
fn bars_csv() -> String {
    let mut csv = (0..784).map(|i| format!("x{i}")).collect::<Vec<_>>().join(",") + ",y\n";
    for n in 0..40 {
        let class = n % 10;
        let pixels: Vec<&str> =
            (0..784).map(|i| if (2 + 2 * class..4 + 2 * class).contains(&(i % 28)) { "1" } else { "0" }).collect();
        csv += &format!("{},{class}\n", pixels.join(","));
    }
    csv
}

#[test]
fn convnetjs_mnist_net_trains_and_its_checkpoint_is_used_as_any_other() {
    let dir = temp_dir("conv");
    std::fs::write(dir.join("bars.csv"), bars_csv()).unwrap();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mnist_convnet.json");
    let out = stepscope(
        &dir,
        &[
            "train",
            "--config",
            config,
            "--data",
            "bars.csv",
            "--steps",
            "6",
            "--out",
            "ck.safetensors",
            "--metrics",
            "m.jsonl",
            "--tensorboard",
            "tb",
            "--trace",
            "t.json",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The header names each layer and what it makes; the end shows where
    // the steps went, layer by layer, and forward : backward against FLOPs.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("training 1×28×28 → conv2d 8×5×5 pad 2 → 8×28×28 → max_pool2d 2 → 8×14×14"), "{text}");
    assert!(text.contains("where a step went, layer by layer (mean of 5 steps"), "{text}");
    assert!(text.contains("  2 conv2d 16×5×5 pad 2") && text.contains("  3 max_pool2d 3"), "{text}");
    assert!(text.contains("MFLOP") && text.contains("25.09"), "conv 2's forward MFLOP for 20 rows: {text}");
    let share: f64 = text
        .lines()
        .skip_while(|l| !l.starts_with("where a step went"))
        .skip(2)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split('%').next()?.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    assert!((share - 100.0).abs() < 1.0, "the rows add up to the step: {share} % in {text}");
    assert!(text.contains("1 : 1.80 in FLOPs"), "{text}");
    let metrics = std::fs::read_to_string(dir.join("m.jsonl")).unwrap();
    assert!(metrics.lines().filter(|l| l.contains("\"loss\"")).count() >= 6);
    // Its TensorBoard events, trace and metrics log open as any run's.
    let events = std::fs::read_dir(dir.join("tb")).unwrap().count();
    assert_eq!(events, 1, "one event file");
    for file in ["m.jsonl", "t.json"] {
        let out = stepscope(&dir, &["open", file]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("1 rank, 6 steps") && text.contains("backward"), "{text}");
    }

    let out = stepscope(&dir, &["inspect", "ck.safetensors"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("layers.0.weight") && text.contains("[8, 1, 5, 5]"), "{text}");
    assert!(text.contains("layers.2.weight") && text.contains("[16, 8, 5, 5]"), "{text}");
    assert!(text.contains("layers.4.weight") && text.contains("[10, 256]"), "{text}");
    assert!(!text.contains("layers.1."), "a pool layer holds no tensors: {text}");

    let out = stepscope(&dir, &["verify", "ck.safetensors", "--data", "bars.csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Restore verified"));

    let out = stepscope(&dir, &["predict", "ck.safetensors", "--inputs", "bars.csv"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let predicted = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(predicted.lines().count(), 1 + 40);
    assert!(predicted.starts_with("y0,y1,"));

    let out = stepscope(&dir, &["export-pytorch", "ck.safetensors", "--out", "s.py"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script = std::fs::read_to_string(dir.join("s.py")).unwrap();
    for module in [
        "nn.Conv2d(1, 8, 5, stride=1, padding=2)",
        "nn.MaxPool2d(2, stride=2)",
        "nn.Conv2d(8, 16, 5, stride=1, padding=2)",
        "nn.MaxPool2d(3, stride=3)",
        "nn.Linear(256, 10)",
        "x.view(-1, 1, 28, 28)",
        "torch.flatten(x, 1)",
    ] {
        assert!(script.contains(module), "{module} in the exported script");
    }

    // A malformed conv layer: one line naming the field, exit 2, nothing written.
    let bad = std::fs::read_to_string(config).unwrap().replace("\"padding\": 2", "\"padding\": 5");
    std::fs::write(dir.join("bad.json"), bad).unwrap();
    let out = stepscope(&dir, &["train", "--config", "bad.json", "--data", "bars.csv", "--out", "bad.safetensors"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model.layers[0].padding must be less than the kernel (5), got 5"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!dir.join("bad.safetensors").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The built-in MNIST (`examples/mnist.json`): no file to give; the data's
/// 5,000 images are split 4,000 / 1,000 and the run reports its test
/// accuracy on the held-out ones.
#[test]
fn the_built_in_mnist_trains_with_no_file() {
    let dir = temp_dir("mnist");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mnist.json");
    let out = stepscope(&dir, &["train", "--config", config, "--steps", "2", "--eval-every", "2"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("dense → 10 on mnist (4000 train / 1000 test rows), 5994 parameters"), "{text}");
    assert!(text.contains("test misclassified:") && text.contains("of 1000 rows"), "{text}");
}

/// Loader threads (`data.num_workers`) make the augmented batches beside
/// the loop: the losses are the loop's own, bit for bit, with 0, 1 or 3
/// threads and any prefetch; the line says what makes the batches.
#[test]
fn loader_threads_make_the_loops_augmented_batches() {
    let dir = temp_dir("loaders");
    let run = |workers: usize, prefetch: usize| {
        let config = serde_json::json!({
            "seed": 9,
            "model": {"input_shape": [1, 8, 8], "layers": [
                {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
                {"kind": "max_pool2d", "kernel": 2},
                {"units": 10, "activation": "linear"}]},
            "loss": "cross_entropy", "optimizer": {"kind": "adam", "lr": 0.01}, "batch_size": 16,
            "grad_accumulation": 2,
            "data": {"source": "digits", "num_workers": workers, "prefetch_factor": prefetch,
                     "augment": {"shift": 1, "elastic": {"alpha": 3.0, "sigma": 1.5}}}
        });
        let name = format!("c{workers}.json");
        std::fs::write(dir.join(&name), config.to_string()).unwrap();
        let metrics = format!("m{workers}.jsonl");
        let out = stepscope(&dir, &["train", "--config", &name, "--steps", "12", "--metrics", &metrics]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let losses: Vec<String> = std::fs::read_to_string(dir.join(&metrics))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].to_string())
            .collect();
        (losses, text)
    };
    let (inline, _) = run(0, 2);
    let (one, text) = run(1, 1);
    assert!(
        text.contains("1 loader thread (prefetch factor 1), augmentation: shift ±1 px, elastic α 3 σ 1.5"),
        "{text}"
    );
    assert_eq!(one, inline);
    assert_eq!(run(3, 4).0, inline);
    assert_eq!(inline.len(), 12);
}

/// A CSV whose experiment gives its rows a shape is images as the built-in
/// ones are: augmentation changes what trains (and the same seed makes the
/// same images again); without the shape, augmentation is refused by name.
#[test]
fn a_csv_of_images_is_augmented_as_the_built_in_images_are() {
    let dir = temp_dir("csv-augment");
    std::fs::write(dir.join("bars.csv"), bars_csv()).unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/mnist_convnet.json");
    let base: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(example).unwrap()).unwrap();
    let run = |name: &str, config: &serde_json::Value| {
        std::fs::write(dir.join(format!("{name}.json")), config.to_string()).unwrap();
        let metrics = format!("{name}.jsonl");
        let out = stepscope(
            &dir,
            &[
                "train",
                "--config",
                &format!("{name}.json"),
                "--data",
                "bars.csv",
                "--steps",
                "4",
                "--metrics",
                &metrics,
            ],
        );
        let losses: Vec<String> = std::fs::read_to_string(dir.join(&metrics))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["loss"].to_string())
            .collect();
        (out, losses)
    };
    let (out, plain) = run("plain", &base);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut augmented = base.clone();
    augmented["data"]["augment"] = serde_json::json!({"shift": 3});
    let (out, shifted) = run("shifted", &augmented);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(shifted.len(), 4);
    assert_ne!(shifted[1..], plain[1..], "the shifted bars train otherwise");
    assert_eq!(run("again", &augmented).1, shifted, "the seed makes the same images");

    let mut flat = augmented.clone();
    flat["model"] = serde_json::json!({"inputs": 784, "layers": [{"units": 10, "activation": "linear"}]});
    let (out, _) = run("flat", &flat);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("data.augment applies to images") && err.contains("model.input_shape"), "{err}");
}
