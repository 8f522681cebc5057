//! Augmentation and loader workers (issue 43, part 3): the changes belong
//! to the experiment (its seed, each row's place in the run), so a run's
//! bits are the same whoever makes its batches (the loop itself, or any
//! number of loaders in any order), whether it was resumed from a
//! checkpoint, and on one rank or several.

mod common;

use serde_json::json;
use stepscope_core::data::{BatchMaker, Dataset};
use stepscope_core::{CpuEngine, Experiment};

/// A small conv net on the 8×8 digits with a shift and an elastic
/// distortion of every training image.
fn augmented(extra: serde_json::Value) -> Experiment {
    let mut e = json!({
        "seed": 5,
        "model": {"input_shape": [1, 8, 8], "layers": [
            {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
            {"kind": "max_pool2d", "kernel": 2},
            {"units": 10, "activation": "linear"}]},
        "loss": "cross_entropy",
        "optimizer": {"kind": "adam", "lr": 0.01},
        "batch_size": 12,
        "data": {"source": "digits", "augment": {"shift": 1, "elastic": {"alpha": 3.0, "sigma": 1.5}}}
    });
    for (k, v) in extra.as_object().unwrap() {
        e[k] = v.clone();
    }
    Experiment::from_json(&e.to_string()).unwrap()
}

fn losses(engine: &mut CpuEngine, steps: usize) -> Vec<u32> {
    (0..steps).map(|_| engine.step().unwrap().loss.to_bits()).collect()
}

#[test]
fn batches_made_by_loaders_in_any_order_give_the_loops_bits() {
    for shards in [1, 3] {
        let e = augmented(json!({"shards": shards}));
        let mut plain = common::engine(&e);
        let straight = losses(&mut plain, 10);

        // Two loaders, each making every other micro-batch, delivered out
        // of order; one batch never arrives (the loop makes it itself).
        let mut fed = common::engine(&e);
        let data = Dataset::load(&e, None).unwrap();
        let start = fed.state().data_position;
        let mut makers = [0, 1].map(|_| BatchMaker::new(&e, data.train.rows(), start.clone()));
        let batch = e.batch_size as u64;
        let mut made = Vec::new();
        for j in 0..10u64 {
            if j == 4 {
                continue;
            }
            made.push(makers[(j % 2) as usize].make(j * batch, &data.train).unwrap());
        }
        assert!(makers[0].make(0, &data.train).is_none(), "a maker only moves on");
        made.swap(0, 1);
        made.swap(5, 7);
        for m in made {
            fed.feed(m);
        }
        assert_eq!(losses(&mut fed, 10), straight, "{shards} shards");
        assert_eq!(fed.params(), plain.params());
        assert_eq!(fed.state().data_position, plain.state().data_position);
    }
}

#[test]
fn augmentation_changes_the_run_and_a_resumed_run_draws_the_same_changes() {
    let e = augmented(json!({}));
    let mut straight = common::engine(&e);
    let all = losses(&mut straight, 12);

    let mut none = e.clone();
    none.data.augment = None;
    assert_ne!(losses(&mut common::engine(&none), 12), all, "augmentation changes the batches");

    let mut first = common::engine(&e);
    losses(&mut first, 5);
    let mut resumed = CpuEngine::from_state(first.state(), Dataset::load(&e, None).unwrap()).unwrap();
    assert_eq!(losses(&mut resumed, 7), all[5..]);
}

#[test]
fn the_loader_and_augmentation_are_checked_and_refused_by_name() {
    let base = augmented(json!({}));
    let refuse = |data: serde_json::Value| {
        let mut v = serde_json::to_value(&base).unwrap();
        v["data"] = data;
        Experiment::from_json(&v.to_string()).unwrap_err().to_string()
    };
    assert!(refuse(json!({"source": "digits", "augment": {"shift": 5}})).contains("at most half"));
    assert!(refuse(json!({"source": "digits", "augment": {"elastic": {"alpha": 3, "sigma": 0}}})).contains("sigma"));
    assert!(refuse(json!({"source": "digits", "augment": {"rotate": 10}})).contains("rotate"));
    assert!(refuse(json!({"source": "digits", "num_workers": 99})).contains("num_workers"));
    assert!(refuse(json!({"source": "digits", "num_workers": 2, "prefetch_factor": 0})).contains("prefetch_factor"));
    let circle = json!({
        "model": {"inputs": 2, "layers": [{"units": 1, "activation": "linear"}]},
        "loss": "bce_with_logits", "optimizer": {"kind": "sgd", "lr": 0.1}, "batch_size": 4,
        "data": {"source": "circle", "augment": {"shift": 1}}
    });
    let err = Experiment::from_json(&circle.to_string()).unwrap_err().to_string();
    assert!(err.contains("applies to images"), "{err}");
    // The GPU engine says why it leaves augmented images to the CPU's.
    let why = stepscope_core::gpu::unsupported(&base).unwrap();
    assert!(why.contains("shift ±1 px, elastic α 3 σ 1.5"), "{why}");
    // Changing how rows are served is an edit of the run, not a new one.
    let mut loader = base.clone();
    loader.data.num_workers = Some(2);
    loader.data.augment = None;
    assert!(loader.data.same_rows(&base.data));
    // Moved to data without images, the augmentation goes.
    let mut moved = base.clone();
    moved.data.source = stepscope_core::experiment::DataSource::Circle;
    moved.fit_to_data(None);
    assert_eq!(moved.data.augment, None);
}
