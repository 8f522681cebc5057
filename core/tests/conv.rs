//! Conv nets through the whole core (issue 41): the format, its checks,
//! the layout PyTorch names, the whole network's gradient against finite
//! differences, checkpointed and sharded steps with the same bits, and a
//! run that learns the 8×8 digits.

mod common;

use serde_json::json;
use stepscope_core::experiment::LayerKind;
use stepscope_core::{CpuEngine, Experiment};

/// A small conv net on the 8×8 digits: conv 3×3×4 pad 1, max pool 2,
/// conv 3×3×6 (stride 1, no padding), avg pool 2 (stride 1), dense 10.
fn digits_net(extra: serde_json::Value) -> serde_json::Value {
    let mut e = json!({
        "seed": 3,
        "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 6, "kernel": 3, "activation": "tanh"},
            {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy",
        "optimizer": {"kind": "adam", "lr": 0.01},
        "batch_size": 16,
        "data": {"source": "digits"}
    });
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

fn parse(v: serde_json::Value) -> Result<Experiment, String> {
    Experiment::from_json(&v.to_string()).map_err(|e| e.to_string())
}

#[test]
fn the_format_round_trips_and_names_the_layers_as_pytorch() {
    let e = parse(digits_net(json!({}))).unwrap();
    assert_eq!(e.model.inputs, 64);
    assert_eq!(e.widths(), [64, 4 * 8 * 8, 4 * 4 * 4, 6 * 2 * 2, 6, 10]);
    let again = Experiment::from_json(&serde_json::to_string(&e).unwrap()).unwrap();
    assert_eq!(again, e);
    let layout = stepscope_core::model::Layout::new(&e);
    let tensors: Vec<(String, Vec<usize>)> = layout.tensors().into_iter().map(|t| (t.name, t.shape)).collect();
    assert_eq!(
        tensors,
        [
            ("layers.0.weight".into(), vec![4, 1, 3, 3]),
            ("layers.0.bias".into(), vec![4]),
            ("layers.2.weight".into(), vec![6, 4, 3, 3]),
            ("layers.2.bias".into(), vec![6]),
            ("layers.4.weight".into(), vec![10, 6]),
            ("layers.4.bias".into(), vec![10]),
        ]
    );
    // A dense layer is written as before (no kind), so MLP links keep their text.
    let mlp = parse(json!({"model": {"inputs": 2, "layers": [{"units": 1, "activation": "linear"}]},
        "loss": "mse", "optimizer": {"kind": "sgd", "lr": 0.1}, "batch_size": 4, "data": {"source": "xor"}}))
    .unwrap();
    assert!(serde_json::to_string(&mlp.model).unwrap().contains(r#""layers":[{"units":1,"activation":"linear"}]"#));
}

/// ConvNetJS's MNIST net: 5,994 parameters (its own count). The model
/// alone (read without the data checks: its data is a CSV of 784 pixels).
#[test]
fn convnetjs_mnist_net_has_its_parameter_count() {
    let mut v = digits_net(json!({}));
    v["model"] = json!({"input_shape": [1, 28, 28], "layers": [
        {"kind": "conv2d", "filters": 8, "kernel": 5, "padding": 2, "activation": "relu"},
        {"kind": "max_pool2d", "kernel": 2},
        {"kind": "conv2d", "filters": 16, "kernel": 5, "padding": 2, "activation": "relu"},
        {"kind": "max_pool2d", "kernel": 3},
        {"units": 10, "activation": "linear"}]});
    let e: Experiment = serde_json::from_value(v).unwrap();
    assert_eq!(stepscope_core::model::Layout::new(&e).parameter_count, 5994);
    assert_eq!(e.widths(), [784, 8 * 28 * 28, 8 * 14 * 14, 16 * 14 * 14, 16 * 4 * 4, 10]);
    // The anatomy's FLOPs: multiply-adds a row 8·25·784 + 16·200·196 +
    // 256·10 = 786,560 forward; backward twice that less the first conv's
    // ∂x (156,800), which nothing needs: 1 : 1.80.
    let (forward, backward) = e.step_flops();
    let rows = e.batch_size as f64;
    assert_eq!(forward, rows * 2.0 * 786_560.0);
    assert_eq!(backward, rows * 2.0 * (2.0 * 786_560.0 - 156_800.0));
}

#[test]
fn malformed_conv_layers_are_refused_by_name() {
    let model = |layers: serde_json::Value, shape: serde_json::Value| {
        let mut v = digits_net(json!({}));
        v["model"] = json!({"input_shape": shape, "layers": layers});
        parse(v).unwrap_err()
    };
    let conv = json!({"kind": "conv2d", "filters": 4, "kernel": 3, "activation": "relu"});
    let dense = json!({"units": 10, "activation": "linear"});
    for (err, want) in [
        (model(json!([conv, dense]), json!(null)), "model: missing field `inputs`"),
        (
            model(json!([dense, conv, dense]), json!([1, 8, 8])),
            "model.layers[1] is conv2d after the dense model.layers[0]",
        ),
        (model(json!([conv]), json!([1, 8, 8])), "model.layers[0]: the last layer must be dense"),
        (
            model(
                json!([{"kind": "max_pool2d", "kernel": 3}, {"kind": "max_pool2d", "kernel": 3}, dense]),
                json!([1, 8, 8]),
            ),
            "model.layers[1] (max_pool2d, kernel 3) needs an input of at least 3 × 3, got 2 × 2",
        ),
        (
            model(
                json!([{"kind": "conv2d", "filters": 0, "kernel": 3, "activation": "relu"}, dense]),
                json!([1, 8, 8]),
            ),
            "model.layers[0].filters must be in 1..=256, got 0",
        ),
        (
            model(
                json!([{"kind": "conv2d", "filters": 2, "kernel": 3, "padding": 3, "activation": "relu"}, dense]),
                json!([1, 8, 8]),
            ),
            "model.layers[0].padding must be less than the kernel (3), got 3",
        ),
        (
            model(
                json!([{"kind": "conv2d", "filters": 2, "kernel": 3, "activation": "relu", "units": 4}, dense]),
                json!([1, 8, 8]),
            ),
            "a conv2d layer: unknown field `units`",
        ),
        (
            model(json!([{"kind": "max_pool2d", "kernel": 2, "activation": "relu"}, dense]), json!([1, 8, 8])),
            "a max_pool2d layer: unknown field `activation`",
        ),
        (model(json!([{"kind": "conv3d", "kernel": 2}, dense]), json!([1, 8, 8])), "unknown layer kind `conv3d`"),
        (model(json!([conv, dense]), json!([0, 8, 8])), "model.input_shape must be [C, H, W] with C in 1..=64"),
    ] {
        assert!(err.contains(want), "{err}\n  wanted: {want}");
    }
    let mut v = digits_net(json!({}));
    v["model"]["inputs"] = json!(63);
    assert!(parse(v).unwrap_err().contains("model.inputs is 63 but model.input_shape [1, 8, 8] holds C·H·W = 64"));
    // A key given twice inside a layer is refused too.
    let text = digits_net(json!({})).to_string().replacen(r#""filters":4"#, r#""filters":4,"filters":5"#, 1);
    assert!(Experiment::from_json(&text).unwrap_err().to_string().contains("filters"));
}

/// Central differences of the whole network's loss on 16 digits, against
/// the engine's gradient (plain and with activation checkpointing): conv,
/// both pools, relu and tanh between them. Accepted as gradient_check.rs:
/// |analytic − numeric| ≤ 1e-3 + 2 %·|numeric| (h = 1e-3; the relu and the
/// max pool have kinks a step of h may cross: the few parameters where the
/// two one-sided quotients disagree are skipped, and counted).
#[test]
fn whole_conv_net_gradient_matches_finite_differences() {
    for checkpointing in [false, true] {
        let e = parse(digits_net(
            json!({"optimizer": {"kind": "sgd", "lr": 0.0}, "data": {"source": "digits", "shuffle": false}}),
        ))
        .unwrap();
        let mut engine = common::engine(&e);
        engine.set_activation_checkpointing(checkpointing).unwrap();
        let start = engine.state();
        engine.step().unwrap();
        let (params, analytic) = (engine.params().to_vec(), engine.grads().to_vec());
        // The loss of the step's 16 rows at other parameters: the same
        // first step (at lr 0) from them.
        let loss = |p: &[f32]| {
            let mut state = start.clone();
            state.params = p.to_vec();
            let mut probe = CpuEngine::from_state(state, engine.data().clone()).unwrap();
            probe.step().unwrap().loss as f64
        };
        let h = 1e-3f32;
        let (mut skipped, mut checked) = (0, 0);
        for p in 0..params.len() {
            let (mut plus, mut minus) = (params.clone(), params.clone());
            plus[p] += h;
            minus[p] -= h;
            let (lp, l0, lm) = (loss(&plus), loss(&params), loss(&minus));
            let (right, left) = ((lp - l0) / h as f64, (l0 - lm) / h as f64);
            if (right - left).abs() > 0.05 * (right.abs() + left.abs()) + 1e-2 {
                skipped += 1;
                continue;
            }
            let numeric = (lp - lm) / (2.0 * h as f64);
            checked += 1;
            assert!(
                (analytic[p] as f64 - numeric).abs() <= 1e-3 + 0.02 * numeric.abs(),
                "checkpointing {checkpointing}: dparam[{p}] analytic {} numeric {numeric}",
                analytic[p]
            );
        }
        assert!(skipped * 20 <= params.len(), "{skipped} of {} parameters at a kink", params.len());
        assert!(checked > 0);
    }
}

/// Checkpointed activations and shards change no bit; 300 steps learn the
/// digits (83 % of the test rows here; chance is 10 %).
#[test]
fn checkpointed_and_sharded_steps_keep_the_bits_and_the_net_learns() {
    let run = |extra: serde_json::Value, checkpointing: bool, threads: usize, steps: usize| {
        let e = parse(digits_net(extra)).unwrap();
        let mut engine = common::engine(&e);
        engine.set_activation_checkpointing(checkpointing).unwrap();
        if threads > 1 {
            engine.set_threads(threads);
        }
        let losses: Vec<u32> = (0..steps).map(|_| engine.step().unwrap().loss.to_bits()).collect();
        (losses, engine)
    };
    let (plain, _) = run(json!({}), false, 1, 12);
    assert_eq!(run(json!({}), true, 1, 12).0, plain, "activation checkpointing");
    let (one, _) = run(json!({"shards": 4}), false, 1, 12);
    assert_eq!(run(json!({"shards": 4}), false, 2, 12).0, one, "4 shards on 2 ranks against 1");
    assert_eq!(run(json!({"shards": 4}), false, 3, 12).0, one, "4 shards on 3 ranks against 1");

    let (_, engine) = run(json!({"batch_size": 32}), false, 1, 300);
    let test = engine.evaluate(&engine.data().test).unwrap();
    assert!(test.accuracy.unwrap() > 0.75, "test accuracy {:?}, loss {}", test.accuracy, test.loss);
}

/// The NaN sentinel names a conv layer and its phase, with and without
/// activation checkpointing, and keeps the state: a NaN weight in the
/// second conv layer shows in its forward ("layer 2", not the pool after
/// it); a bias of 1e20 under gelu_tanh gives a finite forward (gelu(z) = z
/// there) and a NaN derivative (0·∞) in its backward.
#[test]
fn a_nan_in_a_conv_layer_is_named_by_layer_and_phase() {
    let mut v = digits_net(json!({}));
    v["model"]["layers"][2]["activation"] = json!("gelu_tanh");
    let e = parse(v).unwrap();
    let clean = common::engine(&e).state();
    let data = common::engine(&e).data().clone();
    let shape = common::engine(&e).layout().layers[2];
    let mut forward_nan = clean.clone();
    forward_nan.params[shape.weight_offset + 5] = f32::NAN;
    let mut backward_nan = clean.clone();
    backward_nan.params[shape.bias_offset..shape.end()].fill(1e20);
    for checkpointing in [false, true] {
        for (expected, state) in [("layer 2 during forward", &forward_nan), ("layer 2 during backward", &backward_nan)]
        {
            let mut engine = CpuEngine::from_state(state.clone(), data.clone()).unwrap();
            engine.set_activation_checkpointing(checkpointing).unwrap();
            let message = match engine.step().unwrap_err() {
                stepscope_core::Error::NonFinite(message) => message,
                other => panic!("expected a non-finite error, got {other}"),
            };
            assert!(message.contains(expected) && message.contains("at step 1,"), "{checkpointing}: {message}");
            assert_eq!(engine.step_count(), 0);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(engine.params()), bits(&state.params), "{expected}: the state is kept");
        }
    }
}

/// A profiled step (the page's anatomy and `stepscope bench`) bursts a
/// conv net's phases and is still the same step: the same metrics and, in
/// the end, the same bits, with and without activation checkpointing.
#[test]
fn a_profiled_conv_step_is_the_same_step() {
    use stepscope_core::engine::profile::{clock_resolution_ms, Burst, ProfilePath};
    let burst =
        Burst { target_ms: 0.2, max_reps: 1000, resolution_ms: clock_resolution_ms(), resolved_ms: f64::INFINITY };
    let e = parse(digits_net(json!({"grad_accumulation": 2, "clip_grad_norm": 0.5}))).unwrap();
    for checkpointing in [false, true] {
        let engine = || {
            let mut engine = common::engine(&e);
            engine.set_activation_checkpointing(checkpointing).unwrap();
            engine
        };
        let (mut plain, mut profiled) = (engine(), engine());
        for step in 0..4 {
            let a = plain.step().unwrap();
            let (b, profile) = profiled.profile_step(&burst).unwrap();
            assert_eq!(
                (a.step, a.loss.to_bits(), a.grad_norm.to_bits()),
                (b.step, b.loss.to_bits(), b.grad_norm.to_bits())
            );
            assert_eq!((profile.step, profile.path), (step, ProfilePath::CpuBurst));
            for m in [profile.forward, profile.backward, profile.optimizer] {
                assert!(m.ms > 0.0 && m.reps >= 1, "{profile:?}");
            }
        }
        assert_eq!(plain.state(), profiled.state(), "checkpointing {checkpointing}: the same bits");
    }
}

/// Each step's layers are timed inside its forward and backward phases:
/// one time per layer, for that very step, and with the loss's they never
/// exceed the phase they split (the anatomy's rest is never negative). A
/// run in parts times the same way; a transformer has its op times instead.
#[test]
fn layer_times_split_the_phases_they_sit_in() {
    let e = parse(digits_net(json!({"grad_accumulation": 2}))).unwrap();
    let mut engine = common::engine(&e);
    assert!(engine.layer_times().is_none(), "no step yet");
    for _ in 0..3 {
        let m = engine.step().unwrap();
        let (step, t) = engine.layer_times().cloned().unwrap();
        assert_eq!(step, m.step);
        assert_eq!((t.forward.len(), t.backward.len()), (e.model.layers.len(), e.model.layers.len()));
        let forward: f64 = t.forward.iter().sum::<f64>() + t.loss_forward;
        let backward: f64 = t.backward.iter().sum::<f64>() + t.loss_backward;
        assert!(t.forward.iter().chain(&t.backward).all(|&ms| ms >= 0.0), "{t:?}");
        assert!(forward > 0.0 && forward <= m.phases.forward_ms, "{forward} of {:?}", m.phases);
        assert!(backward > 0.0 && backward <= m.phases.backward_ms, "{backward} of {:?}", m.phases);
    }
    while engine.step_part().unwrap().is_none() {}
    assert_eq!(engine.layer_times().unwrap().0, 3, "a step taken in parts");
    let (_, t) = engine.layer_times().unwrap();
    assert!(t.forward.iter().sum::<f64>() > 0.0);
}

/// Until its builder and views exist (the page's conv issue), the page
/// refuses conv and pool layers by name, before anything is built; the GPU
/// engine trains them (`gpu_conv_training.rs`).
/// The page trains conv nets within its memory budget, which counts their
/// activations and patch matrices.
#[test]
fn the_page_takes_conv_nets_within_its_budget() {
    let page = stepscope_core::limits::Limits::PAGE;
    let e = parse(digits_net(json!({}))).unwrap();
    assert!(page.check(&e, None).is_ok());
    let mut wide = parse(digits_net(json!({"batch_size": 4096}))).unwrap();
    wide.model.layers[0].kind = LayerKind::Conv2d { filters: 256, kernel: 3, stride: 1, padding: 1 };
    assert!(wide.validate().is_ok());
    let err = page.check(&wide, None).unwrap_err().to_string();
    assert!(err.contains("more than the 1024.0 MiB budget of this page"), "{err}");
}

/// The memory budget counts what a conv net's engine holds: activations,
/// the max pools' choices, the patch matrices (backward scratch).
#[test]
fn the_memory_estimate_is_what_the_engine_holds() {
    use stepscope_core::engine::MemoryBytes;
    let e = parse(digits_net(json!({}))).unwrap();
    let mut engine = common::engine(&e);
    assert_eq!(MemoryBytes::estimate(&e, false), engine.memory());
    engine.step().unwrap();
    assert_eq!(MemoryBytes::estimate(&e, false), engine.memory(), "after a step");
    engine.set_activation_checkpointing(true).unwrap();
    assert_eq!(MemoryBytes::estimate(&e, true), engine.memory(), "checkpointing");
}

/// The receptive field, against the forward pass itself: an output
/// position depends on exactly the input pixels whose change moves it
/// (tanh and average pooling, so that no dead unit or unchosen maximum
/// hides a dependence), for every position of every conv and pool layer
/// of a net with padding, a stride-2 conv and an overlapping pool.
#[test]
fn the_receptive_field_is_what_the_output_depends_on() {
    use stepscope_core::engine::{forward_pass, Activations};
    let e = parse(json!({
        "seed": 5,
        "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 2, "kernel": 3, "padding": 1, "activation": "tanh"},
            {"kind": "avg_pool2d", "kernel": 2},
            {"kind": "conv2d", "filters": 2, "kernel": 3, "stride": 2, "padding": 1, "activation": "tanh"},
            {"kind": "avg_pool2d", "kernel": 2, "stride": 1},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy",
        "optimizer": {"kind": "sgd", "lr": 0.1},
        "batch_size": 4,
        "data": {"source": "digits"}
    }))
    .unwrap();
    let layout = stepscope_core::model::Layout::new(&e);
    let params = stepscope_core::model::init_parameters(&layout, 5);
    let base: Vec<f32> = (0..64).map(|i| ((i * 37) % 11) as f32 / 11.0).collect();
    let run = |input: &[f32]| {
        let mut acts = Activations::try_new(&layout, 1).unwrap();
        forward_pass(&mut acts, &params, input, &layout, &e);
        acts.a
    };
    let before = run(&base);
    let moved: Vec<Vec<Vec<f32>>> = (0..64)
        .map(|pixel| {
            let mut input = base.clone();
            input[pixel] += 1.0;
            run(&input)
        })
        .collect();
    let shapes = [[2, 8, 8], [2, 4, 4], [2, 2, 2], [2, 1, 1]];
    for (layer, [c, h, w]) in shapes.into_iter().enumerate() {
        for (y, x) in (0..h).flat_map(|y| (0..w).map(move |x| (y, x))) {
            let depends = |pixel: usize| {
                (0..c).any(|ch| {
                    let at = ch * h * w + y * w + x;
                    moved[pixel][layer][at] != before[layer][at]
                })
            };
            let [y0, x0, y1, x1] = e.receptive_field(layer, y, x).unwrap();
            for pixel in 0..64 {
                let inside = (y0..y1).contains(&(pixel / 8)) && (x0..x1).contains(&(pixel % 8));
                assert_eq!(
                    depends(pixel),
                    inside,
                    "layer {layer} at ({y}, {x}), pixel {pixel}: field {:?}",
                    [y0, x0, y1, x1]
                );
            }
        }
        assert_eq!(e.receptive_field(layer, h, 0), None, "outside the output");
    }
    assert_eq!(e.receptive_field(4, 0, 0), None, "a dense layer has none");
    // The last pool's one output sees the whole image; a first-layer
    // corner its 2 × 2 of the image (the rest is padding).
    assert_eq!(e.receptive_field(3, 0, 0), Some([0, 0, 8, 8]));
    assert_eq!(e.receptive_field(0, 0, 0), Some([0, 0, 2, 2]));
}
