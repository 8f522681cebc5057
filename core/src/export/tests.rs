//! The generator's structure, variant by variant: that each experiment's
//! script builds what it should and nothing it should not. Whether the
//! Python runs, and matches Stepscope's numbers, is checked with real
//! PyTorch by scripts/check_pytorch_export.py.

use super::*;
use crate::data::parse_csv;
use crate::experiment::{Experiment, Schedule};
use crate::model::Layout;
use crate::optim::OptimizerState;

/// The test experiment with `patch` (a JSON fragment of top-level fields)
/// in place of the defaults.
fn experiment(patch: &str) -> Experiment {
    let mut base: serde_json::Value = serde_json::from_str(
        r#"{"seed": 5,
            "model": {"inputs": 2, "layers": [{"units": 6, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
            "loss": "bce_with_logits", "optimizer": {"kind": "adamw", "lr": 0.01}, "batch_size": 8,
            "data": {"source": "circle", "samples": 40}}"#,
    )
    .unwrap();
    let patch: serde_json::Value = serde_json::from_str(patch).unwrap();
    for (key, value) in patch.as_object().unwrap() {
        base[key] = value.clone();
    }
    Experiment::from_json(&base.to_string()).unwrap()
}

const OPTIMIZERS: [&str; 6] = [
    r#"{"kind": "sgd", "lr": 0.1}"#,
    r#"{"kind": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.001}"#,
    r#"{"kind": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": true}"#,
    r#"{"kind": "adam", "lr": 0.002, "betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.01}"#,
    r#"{"kind": "adamw"}"#,
    r#"{"kind": "lamb", "weight_decay": 0.05}"#,
];
const SCHEDULES: [&str; 3] = [
    r#"{"kind": "constant"}"#,
    r#"{"kind": "warmup_cosine", "warmup_steps": 4, "total_steps": 50, "min_lr": 0.001}"#,
    r#"{"kind": "warmup_linear", "total_steps": 30}"#,
];

/// Every optimizer × schedule gives a script that names its optimizer with
/// the experiment's hyperparameters, its schedule with its numbers, and
/// embeds the experiment it came from.
#[test]
fn every_optimizer_and_schedule_produces_its_script() {
    for opt in OPTIMIZERS {
        for sched in SCHEDULES {
            let e = experiment(&format!(r#"{{"optimizer": {opt}, "schedule": {sched}}}"#));
            let script = pytorch_script(&e);
            let context = format!("{opt} {sched}");
            let want_optimizer = match e.optimizer.name() {
                "sgd" => "torch.optim.SGD(",
                "adam" => "torch.optim.Adam(",
                "adamw" => "torch.optim.AdamW(",
                _ => "return Lamb(model.parameters()",
            };
            assert!(script.contains(want_optimizer), "{context}");
            assert_eq!(script.contains("class Lamb(torch.optim.Optimizer)"), e.optimizer.name() == "lamb", "{context}");
            assert_eq!(
                script.matches("foreach=False)").count(),
                usize::from(e.optimizer.name() != "lamb"),
                "{context}"
            );
            let json = script.split("EXPERIMENT_JSON = r\"\"\"").nth(1).unwrap().split("\"\"\"").next().unwrap();
            assert_eq!(Experiment::from_json(json).unwrap(), e, "{context}");
            assert!(script.contains("class Schedule(torch.optim.lr_scheduler.LRScheduler)"), "{context}");
            let schedule_line = match e.schedule {
                Schedule::Constant => "    return LR\n".to_string(),
                Schedule::WarmupCosine { warmup_steps, total_steps, min_lr }
                | Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => {
                    format!("    warmup, total, min_lr = {warmup_steps}, {total_steps}, {min_lr:?}\n")
                }
            };
            assert!(script.contains(&schedule_line), "{context}: {schedule_line}");
            assert_eq!(script.contains("math.cos(math.pi * progress)"), sched.contains("cosine"), "{context}");
            assert_eq!(script.contains("(1.0 - progress)"), sched.contains("linear"), "{context}");
            assert_well_formed(&script, &context);
        }
    }
}

#[test]
fn hyperparameters_are_written_as_given() {
    let sgd = pytorch_script(&experiment(&format!(r#"{{"optimizer": {}}}"#, OPTIMIZERS[1])));
    assert!(sgd.contains("lr=0.1, momentum=0.9, dampening=0.1,\n        nesterov=False, weight_decay=0.001"));
    let nesterov = pytorch_script(&experiment(&format!(r#"{{"optimizer": {}}}"#, OPTIMIZERS[2])));
    assert!(nesterov.contains("dampening=0.0,\n        nesterov=True, weight_decay=0.0"));
    let adam = pytorch_script(&experiment(&format!(r#"{{"optimizer": {}}}"#, OPTIMIZERS[3])));
    assert!(adam.contains("lr=0.002, betas=(0.8, 0.99), eps=1e-7,\n        weight_decay=0.01"));
    // AdamW's defaults are written out, not left to torch's (which agree today).
    let adamw = pytorch_script(&experiment(&format!(r#"{{"optimizer": {}}}"#, OPTIMIZERS[4])));
    assert!(adamw.contains("lr=0.001, betas=(0.9, 0.999), eps=1e-8,\n        weight_decay=0.01"));
    let lamb = pytorch_script(&experiment(&format!(r#"{{"optimizer": {}}}"#, OPTIMIZERS[5])));
    assert!(lamb.contains("Lamb(model.parameters(), lr=0.001, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.05)"));
    assert!(lamb.contains("LR = 0.001  #"));
}

/// The optimizer state the script loads is exactly the checkpoint's:
/// `optimizer.{name}.{suffix}` for each buffer `OptimizerState` keeps.
#[test]
fn loaded_optimizer_state_names_match_the_checkpoint() {
    for opt in OPTIMIZERS {
        let e = experiment(&format!(r#"{{"optimizer": {opt}}}"#));
        let script = pytorch_script(&e);
        let state = OptimizerState::new(&e.optimizer, Layout::new(&e).parameter_count);
        let mut stored: Vec<&str> = state.buffers().iter().map(|(suffix, _)| *suffix).collect();
        let mut loaded: Vec<&str> = script
            .match_indices("tensors[f\"optimizer.{name}.")
            .map(|(i, m)| script[i + m.len()..].split('"').next().unwrap())
            .collect();
        stored.sort_unstable();
        loaded.sort_unstable();
        assert_eq!(loaded, stored, "{opt}");
        // The checkpoint the script writes keeps the same buffers.
        let line = script.lines().find(|l| l.starts_with("OPTIMIZER_BUFFERS = (")).unwrap();
        let mut saved: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        saved.sort_unstable();
        assert_eq!(saved, stored, "{opt}: {line}");
        assert_eq!(
            script.contains("\"step\": torch.tensor(float(step))"),
            !stored.contains(&"momentum_buffer") && !stored.is_empty(),
            "{opt}"
        );
    }
}

/// The model is a `ModuleList` called `layers` (so its parameters are
/// named `layers.{i}.weight` / `.bias`, as `Layout::tensors`) with the
/// experiment's widths, and one activation module per layer.
#[test]
fn model_layers_and_activations_follow_the_experiment() {
    let e = experiment(
        r#"{"model": {"inputs": 3, "layers": [
            {"units": 4, "activation": "linear"}, {"units": 5, "activation": "relu"},
            {"units": 6, "activation": "leaky_relu"}, {"units": 7, "activation": "tanh"},
            {"units": 8, "activation": "sigmoid"}, {"units": 9, "activation": "gelu_tanh"},
            {"units": 3, "activation": "silu"}]},
            "loss": "cross_entropy", "data": {"source": "csv"}}"#,
    );
    let script = pytorch_script(&e);
    let linears = "self.layers = nn.ModuleList([nn.Linear(3, 4), nn.Linear(4, 5), nn.Linear(5, 6), \
                   nn.Linear(6, 7), nn.Linear(7, 8), nn.Linear(8, 9), nn.Linear(9, 3)])";
    assert!(script.contains(linears), "{script}");
    let activations = "self.activations = nn.ModuleList([nn.Identity(), nn.ReLU(), nn.LeakyReLU(0.01), \
                       nn.Tanh(), nn.Sigmoid(), nn.GELU(approximate=\"tanh\"), nn.SiLU()])";
    assert!(script.contains(activations), "{script}");
    assert!(script.contains("F.cross_entropy(outputs, targets[:, 0].long(), reduction=\"sum\") / rows"));
    // The checkpoint's parameter names are what a ModuleList `layers` gives.
    for t in Layout::new(&e).tensors() {
        assert!(t.name.starts_with("layers.") && (t.name.ends_with(".weight") || t.name.ends_with(".bias")));
    }
}

/// Loss, regularization, clipping, accumulation and shuffling each appear
/// exactly when the experiment has them.
#[test]
fn optional_parts_appear_only_when_used() {
    let plain = pytorch_script(&experiment(r#"{"data": {"source": "circle", "samples": 40, "shuffle": false}}"#));
    for absent in ["add_regularization_grad", "clip_grad_norm_", "Xoshiro256", "accumulation over"] {
        assert!(!plain.contains(absent), "{absent}");
    }
    assert!(plain.contains(
        "F.binary_cross_entropy_with_logits(outputs, targets, reduction=\"sum\") / (rows * outputs.shape[1])"
    ));
    assert!(plain.contains("row k is k mod N"));
    assert_well_formed(&plain, "plain");

    let full = pytorch_script(&experiment(
        r#"{"loss": "mse", "clip_grad_norm": 0.5, "grad_accumulation": 3,
            "regularization": {"kind": "l1", "rate": 0.002}}"#,
    ));
    assert!(full.contains("F.mse_loss(outputs, targets, reduction=\"sum\") / (rows * outputs.shape[1])"));
    assert!(full.contains("clip_grad_norm_(net.parameters(), max_norm=0.5)"));
    assert!(full.contains("GRAD_ACCUMULATION = 3"));
    assert!(full.contains("REGULARIZATION_RATE = 0.002"));
    assert!(full.contains("REGULARIZATION_RATE * torch.sign(layer.weight)"));
    assert!(full.contains("    add_regularization_grad(net)\n"));
    assert!(full.contains("class Xoshiro256"));
    assert_well_formed(&full, "full");

    assert!(plain.contains("AUGMENTER = None") && plain.contains("NUM_WORKERS = 0"));
    let augmented = pytorch_script(&experiment(
        r#"{"model": {"inputs": 64, "layers": [{"units": 10, "activation": "linear"}]}, "loss": "cross_entropy",
            "data": {"source": "digits", "shuffle": false, "num_workers": 3, "prefetch_factor": 4,
                     "augment": {"shift": 2, "elastic": {"alpha": 9.5, "sigma": 1.25}}}}"#,
    ));
    for part in [
        "NUM_WORKERS = 3",
        "PREFETCH_FACTOR = 4",
        "IMAGE = (1, 8, 8)",
        "SHIFT = 2",
        "ELASTIC = (9.5, 1.25)",
        "class Augmenter",
        "def seeded",
        "class Xoshiro256",
        "row k is k mod N",
    ] {
        assert!(augmented.contains(part), "{part}");
    }
    assert_well_formed(&augmented, "augmented");

    let l2 = pytorch_script(&experiment(r#"{"regularization": {"kind": "l2", "rate": 0.5}}"#));
    assert!(l2.contains("layer.weight.grad += REGULARIZATION_RATE * layer.weight\n"));
}

/// What a reader (and Python's parser) needs of the text: brackets that
/// balance, indentation in fours, no tabs or trailing spaces, no stray
/// `{{` from formatting.
fn assert_well_formed(script: &str, context: &str) {
    let mut depth = 0i32;
    for c in script.chars() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ => {}
        }
        assert!(depth >= 0, "{context}: a bracket closes before it opens");
    }
    assert_eq!(depth, 0, "{context}: unbalanced brackets");
    for (n, line) in script.lines().enumerate().filter(|(_, line)| !line.starts_with("EXPERIMENT_JSON = ")) {
        assert!(!line.contains("{{") && !line.contains("}}"), "{context}: line {}: unformatted braces", n + 1);
        let indent = line.len() - line.trim_start_matches(' ').len();
        assert!(!line.contains('\t') && !line.ends_with(' '), "{context}: line {}: {line:?}", n + 1);
        assert!(indent % 4 == 0, "{context}: line {} indented by {indent}", n + 1);
        assert!(line.len() <= 120, "{context}: line {} is {} long", n + 1, line.len());
    }
    assert!(script.ends_with("if __name__ == \"__main__\":\n    sys.exit(main())\n"));
}

/// The CSV reads back, through Stepscope's own parser, to the same bits.
#[test]
fn training_csv_round_trips_exactly() {
    let e = experiment(
        r#"{"loss": "mse", "model": {"inputs": 2, "layers": [{"units": 2, "activation": "linear"}]},
                           "data": {"source": "csv"}}"#,
    );
    let table = Table {
        inputs: vec![0.1, -0.0, 1e-30, 3.4e38, f32::MIN_POSITIVE / 8.0, 16_777_217.0],
        targets: vec![1.0 / 3.0, -2.5, 7e-8, 0.0, 123.456, -1e10],
        input_width: 2,
        target_width: 2,
    };
    let csv = training_csv(&table);
    assert!(csv.starts_with("x1,x2,y0,y1\n0.10000000149011612,-0,"), "{csv}");
    let back = parse_csv(&csv, &e).unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&back.inputs), bits(&table.inputs));
    assert_eq!(bits(&back.targets), bits(&table.targets));

    let one_target = Table { inputs: vec![1.0], targets: vec![0.0], input_width: 1, target_width: 1 };
    assert_eq!(training_csv(&one_target), "x1,y\n1,0\n");
}
