//! The data loader's controls (the slow-loader lesson): augmentation
//! presets scaled to the image, loader workers and their prefetch, each an
//! edit of the experiment's `data` that changes how rows are served, not
//! which (a live change, `DataSpec::same_rows`).

use stepscope_core::experiment::{
    Activation, Augment, DataSource, Elastic, LayerSpec, MAX_LOADER_WORKERS, MAX_PREFETCH_FACTOR,
};
use stepscope_core::Experiment;

/// The presets, by the name the control gives them.
pub const AUGMENT_PRESETS: [&str; 3] = ["none", "shift", "elastic"];

/// A preset for square images of `side` pixels: a shift of 2 pixels on
/// MNIST (28), and Simard et al.'s elastic distortion for MNIST (α 34,
/// σ 4) with it, both scaled to the side (digits: 1 pixel, α 9.7, σ 1.1).
pub fn augment_preset(name: &str, side: usize) -> Option<Augment> {
    let scale = side as f64 / 28.0;
    let shift = ((2.0 * scale).round() as usize).max(1);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    match name {
        "none" => None,
        "shift" => Some(Augment { shift, elastic: None }),
        "elastic" => Some(Augment {
            shift,
            elastic: Some(Elastic { alpha: round(34.0 * scale), sigma: round(4.0 * scale).max(0.5) }),
        }),
        _ => None,
    }
}

/// The shorter side of the run's images (where its rows are images).
fn image_side(e: &Experiment) -> Option<usize> {
    e.image_shape().map(|[_, h, w]| h.min(w))
}

/// Which preset the run's augmentation is ("custom" where none is).
pub fn augment_name(e: &Experiment) -> &'static str {
    let side = image_side(e).unwrap_or(28);
    let current = e.data.active_augment().cloned();
    AUGMENT_PRESETS.into_iter().find(|name| augment_preset(name, side) == current).unwrap_or("custom")
}

/// The augmentation control: a preset by name, on image data only.
pub fn set_augmentation(e: &mut Experiment, name: &str) -> Result<(), String> {
    if !AUGMENT_PRESETS.contains(&name) {
        return Err(format!("Augmentation: `{name}` is not one of {}.", AUGMENT_PRESETS.join(", ")));
    }
    let Some(side) = image_side(e) else {
        return Err(
            "Augmentation changes images: pick the digits or MNIST first, or give a CSV's rows an image shape.".into(),
        );
    };
    e.data.augment = augment_preset(name, side);
    Ok(())
}

/// Loader workers (0: the training loop makes its batches).
pub fn set_num_workers(e: &mut Experiment, text: &str) -> Result<(), String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n <= MAX_LOADER_WORKERS => {
            e.data.num_workers = (n > 0).then_some(n);
            Ok(())
        }
        _ => Err(format!("Loader workers: `{text}` is not a whole number in 0…{MAX_LOADER_WORKERS}.")),
    }
}

/// Batches each loader worker makes ahead.
pub fn set_prefetch_factor(e: &mut Experiment, text: &str) -> Result<(), String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_PREFETCH_FACTOR).contains(&n) => {
            e.data.prefetch_factor = Some(n);
            Ok(())
        }
        _ => Err(format!("Prefetch factor: `{text}` is not a whole number in 1…{MAX_PREFETCH_FACTOR}.")),
    }
}

/// The lesson's model: a small MLP (784 → 64 → 10 on MNIST, ReLU) at
/// batch 20. It computes a step of 20 images in less time than the
/// elastic distortion of those 20 images takes (about 0.2 ms an image in
/// the browser), so the batches' making is most of the step while the loop
/// makes them: a small, fast model is where a loader is the bottleneck.
/// ConvNetJS's conv net computes for about five times as long and hides
/// the same work (bench/loader.md).
pub const LESSON_HIDDEN: usize = 64;
pub const LESSON_BATCH: usize = 20;

/// The lesson's start: MNIST (where the run's data are not MNIST-sized
/// images), the lesson's small MLP, heavy augmentation (shift and elastic)
/// made by the training loop itself (no loader workers).
pub fn augmentation_lesson(e: &mut Experiment) -> Result<(), String> {
    if image_side(e).is_none_or(|side| side < 28) {
        e.data.source = DataSource::Mnist;
        e.data.train_fraction = None;
        super::fit_new_data(e);
    }
    let output = e.model.layers.last().cloned().ok_or("The model has no output layer.")?;
    e.model.layers = vec![LayerSpec::dense(LESSON_HIDDEN, Activation::Relu), output];
    if e.data.source != DataSource::Csv {
        e.model.input_shape = None;
    }
    e.batch_size = LESSON_BATCH;
    set_augmentation(e, "elastic")?;
    e.data.num_workers = None;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::{default_experiment, edited};

    #[test]
    fn presets_scale_to_the_image_and_name_themselves_back() {
        assert_eq!(
            augment_preset("elastic", 28),
            Some(Augment { shift: 2, elastic: Some(Elastic { alpha: 34.0, sigma: 4.0 }) })
        );
        assert_eq!(
            augment_preset("elastic", 8),
            Some(Augment { shift: 1, elastic: Some(Elastic { alpha: 9.7, sigma: 1.1 }) })
        );
        let e = edited(&default_experiment(), augmentation_lesson).unwrap();
        assert_eq!(e.data.source, DataSource::Mnist);
        assert_eq!(augment_name(&e), "elastic");
        assert_eq!(e.model.layers.len(), 2, "the lesson's small MLP");
        assert_eq!((e.model.layers[0].units, e.batch_size), (LESSON_HIDDEN, LESSON_BATCH));
        assert!(!e.model.layers.iter().any(|l| l.kind.is_spatial()));
        // From the conv preset on MNIST, the same lesson.
        let conv = edited(&e, crate::model::edit::conv_preset).unwrap();
        assert_eq!(edited(&conv, augmentation_lesson).unwrap().model, e.model);
        let shifted = edited(&e, |x| set_augmentation(x, "shift")).unwrap();
        assert_eq!(augment_name(&shifted), "shift");
        assert!(!crate::model::edit::needs_reset(&e, &shifted), "a live change");
        let workers = edited(&e, |x| set_num_workers(x, "3").and_then(|()| set_prefetch_factor(x, "4"))).unwrap();
        assert_eq!((workers.data.num_workers(), workers.data.prefetch_factor()), (3, 4));
        assert!(!crate::model::edit::needs_reset(&e, &workers));
    }

    #[test]
    fn refusals_name_the_control() {
        let e = default_experiment();
        assert!(edited(&e, |x| set_augmentation(x, "elastic")).unwrap_err().contains("pick the digits or MNIST"));
        assert!(edited(&e, |x| set_num_workers(x, "99")).unwrap_err().contains("Loader workers"));
        assert!(edited(&e, |x| set_prefetch_factor(x, "0")).unwrap_err().contains("Prefetch factor"));
    }
}
