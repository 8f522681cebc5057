//! The default experiment and the edits the controls make to it. Every
//! edit goes through `Experiment::validate`, so a control can never put the
//! page into a state the engine would refuse; a refused edit becomes a
//! message and changes nothing.

use stepscope_core::data::{CsvTable, Table};
use stepscope_core::experiment::*;
use stepscope_core::limits::Limits;
use stepscope_core::Experiment;

mod hyper;
mod layers;
mod loader;
pub use hyper::*;
pub use layers::*;
pub use loader::*;

/// Page limits, enforced with a message (the core's own limits are wider).
/// They live in the core (`Limits::PAGE`), which checks every experiment
/// the page meets: a link, a control, an upload, a restored checkpoint.
pub const MAX_HIDDEN_LAYERS: usize = Limits::PAGE.hidden_layers;
pub const MAX_UNITS_PER_LAYER: usize = Limits::PAGE.hidden_units;

/// `e` against the page's limits and memory budget (`rows`: train and test
/// rows, where the data is known).
pub fn page_check(e: &Experiment, rows: Option<(usize, usize)>) -> Result<(), String> {
    Limits::PAGE.check(e, rows).map(drop).map_err(|err| err.to_string())
}

/// Spiral data, a small tanh network, AdamW with a decaying learning rate.
pub fn default_experiment() -> Experiment {
    // Chosen so that a newcomer sees it learn: 2-16-16-1 tanh with AdamW
    // at lr 0.02 and batch 32 reaches about 96 % test accuracy on the
    // spiral in 1,000 steps, a few seconds on either engine (the
    // previous 2-8-8-1 at lr 0.03, batch 16 had 74 % after 8,000).
    // The learning rate then falls by a cosine to 0.002 at step 3,000 and
    // stays there: at a constant 0.02, once the loss is near zero, Adam's
    // second moment decays with the gradients and a rare larger gradient
    // moves every weight by about lr at once, so a learned run spiked and
    // raised the page's own alarm (bench/default-mlp.md).
    Experiment::from_json(
        r#"{"seed": 1,
            "model": {"inputs": 2, "layers": [
                {"units": 16, "activation": "tanh"}, {"units": 16, "activation": "tanh"},
                {"units": 1, "activation": "linear"}]},
            "loss": "bce_with_logits",
            "optimizer": {"kind": "adamw", "lr": 0.02, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
            "schedule": {"kind": "warmup_cosine", "warmup_steps": 0, "total_steps": 3000, "min_lr": 0.002},
            "batch_size": 32,
            "data": {"source": "spiral", "samples": 500, "noise": 0.1, "train_fraction": 0.5,
                     "features": ["x1", "x2"], "shuffle": true}}"#,
    )
    .expect("the default experiment is valid")
}

/// What the model switch opens for a transformer: a small character-level
/// GPT on Tiny Shakespeare, chosen so that a newcomer sees it learn on the
/// CPU engine in the browser (bench/page-gpt.md, a 2-core machine: a third
/// of its sample's words are real ones at 20–30 s, half from 90 s; its
/// validation loss is 1.998 at 130 s and 1.87 at 180 s). The learning rate warms up
/// and then stays, so the run keeps learning for as long as it is left.
/// Its batch is 8 shards of 2 windows, so that up to 8 ranks (workers,
/// `host::ranks`) share each step with the same losses on any number
/// (natively, 4 × 96 at B 16: 14,400 tokens/s whole on one thread, 15,900
/// in 8 shards on one, 28,400 on two; a shard's smaller buffers stay in
/// cache).
pub fn default_gpt_experiment() -> Experiment {
    Experiment::from_json(
        r#"{"seed": 1337,
            "model": {"kind": "gpt", "vocab_size": 65, "context": 64, "embed": 96, "heads": 4, "blocks": 3},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adamw", "lr": 0.006, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.1},
            "schedule": {"kind": "warmup_cosine", "warmup_steps": 20, "total_steps": 100000, "min_lr": 0.0006},
            "batch_size": 16, "shards": 8,
            "clip_grad_norm": 1.0,
            "data": {"source": "shakespeare", "train_fraction": 0.9}}"#,
    )
    .expect("the default transformer experiment is valid")
}

/// The model switch: `mlp` opens the default MLP, `gpt` the default
/// transformer, each keeping the other settings nothing (a model kind
/// brings its own data, loss and optimizer).
pub fn set_model_kind(e: &mut Experiment, kind: &str) -> Result<(), String> {
    match (kind, e.gpt().is_some()) {
        ("mlp", false) | ("gpt", true) => Ok(()),
        ("mlp", true) => {
            *e = default_experiment();
            Ok(())
        }
        ("gpt", false) => {
            *e = default_gpt_experiment();
            Ok(())
        }
        _ => Err(format!("Unknown model kind `{kind}` (mlp or gpt).")),
    }
}

/// The transformer's fields the builder edits, by the experiment's names.
pub fn set_gpt_field(e: &mut Experiment, field: &str, value: usize) -> Result<(), String> {
    let gpt = e.model.gpt.as_mut().ok_or("The model is not a transformer.")?;
    match field {
        "blocks" => gpt.blocks = value,
        "heads" => gpt.heads = value,
        "embed" => gpt.embed = value,
        "context" => gpt.context = value,
        _ => return Err(format!("Unknown transformer field `{field}`.")),
    }
    Ok(())
}

/// The transformer's switches: `qk_layernorm` and `tie_embeddings`.
pub fn set_gpt_switch(e: &mut Experiment, field: &str, on: bool) -> Result<(), String> {
    let gpt = e.model.gpt.as_mut().ok_or("The model is not a transformer.")?;
    match field {
        "qk_layernorm" => gpt.qk_layernorm = on,
        "tie_embeddings" => gpt.tie_embeddings = on,
        _ => return Err(format!("Unknown transformer switch `{field}`.")),
    }
    Ok(())
}

/// The z-loss coefficient (≥ 0; the core validates it).
pub fn set_z_loss(e: &mut Experiment, v: f64) -> Result<(), String> {
    e.z_loss = v;
    Ok(())
}

/// The model in a few words, for the runs list: the MLP's hidden widths,
/// the transformer's blocks, width, heads and context.
pub fn model_summary(e: &Experiment) -> String {
    if let Some(g) = e.gpt() {
        return format!("GPT {} blocks × {} wide, {} heads, context {}", g.blocks, g.embed, g.heads, g.context);
    }
    if e.model.layers.iter().any(|l| l.kind.is_spatial()) {
        return hidden_layers(e).iter().map(LayerSpec::words).collect::<Vec<_>>().join(", ");
    }
    let hidden: Vec<String> = hidden_layers(e).iter().map(|l| l.units.to_string()).collect();
    if hidden.is_empty() {
        "no hidden layer".into()
    } else {
        hidden.join("-")
    }
}

/// The hidden layers (all but the output layer; none for a transformer).
pub fn hidden_layers(e: &Experiment) -> &[LayerSpec] {
    &e.model.layers[..e.model.layers.len().saturating_sub(1)]
}

/// Whether going from `old` to `new` needs fresh parameters (the model,
/// the data or the seed changed) or can continue the run.
pub fn needs_reset(old: &Experiment, new: &Experiment) -> bool {
    // Augmentation and the loader change how rows are served, not which.
    old.model != new.model || !old.data.same_rows(&new.data) || old.seed != new.seed || old.loss != new.loss
}

/// Fits the model's ends to the data after a change of data or
/// features: the input width, and the output layer for the loss, kept
/// where it still fits the data (else the data's usual one). CSV keeps what
/// its upload inferred. A change of dataset calls `fit_new_data` instead.
pub fn fit_output(e: &mut Experiment) {
    let loss = e.loss;
    e.fit_to_data(Some(loss));
}

/// Fits the model's ends to newly chosen data with that data's usual loss
/// (bce for two classes, cross-entropy for more, mse for regression).
pub fn fit_new_data(e: &mut Experiment) {
    e.fit_to_data(None);
}

/// The loss selector: `name` as the experiment JSON spells it; the output
/// layer takes the units that loss needs on this data.
pub fn set_loss(e: &mut Experiment, name: &str) -> Result<(), String> {
    let loss = e
        .fitting_losses()
        .into_iter()
        .find(|l| l.name() == name)
        .ok_or_else(|| format!("The loss `{name}` does not fit the {} data.", e.data.source.name()))?;
    e.fit_to_data(Some(loss));
    Ok(())
}

/// Applies `edit` to a copy of `e` and validates it: Ok(new) or the
/// message to show, `e` untouched.
pub fn edited(e: &Experiment, edit: impl FnOnce(&mut Experiment) -> Result<(), String>) -> Result<Experiment, String> {
    let mut new = e.clone();
    edit(&mut new)?;
    // A new batch size keeps the shards a divisor of it.
    new.fit_shards();
    new.validate().map_err(|err| err.to_string())?;
    page_check(&new, None)?;
    Ok(new)
}

pub fn add_layer(e: &mut Experiment) -> Result<(), String> {
    let hidden = hidden_layers(e).len();
    if hidden >= MAX_HIDDEN_LAYERS {
        return Err(format!("At most {MAX_HIDDEN_LAYERS} hidden layers on this page."));
    }
    let like = hidden_layers(e).last().cloned().unwrap_or(LayerSpec::dense(4, Activation::Tanh));
    e.model.layers.insert(hidden, like);
    Ok(())
}

pub fn remove_layer(e: &mut Experiment) -> Result<(), String> {
    let hidden = hidden_layers(e).len();
    if hidden == 0 {
        return Err("There is no hidden layer to remove.".into());
    }
    e.model.layers.remove(hidden - 1);
    Ok(())
}

pub fn set_units(e: &mut Experiment, layer: usize, units: usize) -> Result<(), String> {
    if units == 0 || units > MAX_UNITS_PER_LAYER {
        return Err(format!("A layer has 1 to {MAX_UNITS_PER_LAYER} units on this page."));
    }
    e.model.layers[layer].units = units;
    Ok(())
}

/// A layer width typed into the builder: a whole number ≥ 1 (the limit
/// is `set_units`'s).
pub fn parse_units(label: &str, text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{label}: `{}` is not a whole number of units ≥ 1.", text.trim())),
    }
}

/// Parses a number typed into a control, naming the control on failure.
pub fn parse_number(label: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{label}: `{text}` is not a number.")),
    }
}

/// An experiment for an uploaded CSV, read already (`CsvTable`): inputs
/// from its `x…` columns; the problem from its targets: one `y` of integer
/// classes 0..C is classification (bce for 2 classes, cross_entropy for
/// more), anything else is regression with mse on every target column.
pub fn experiment_for_csv(base: &Experiment, csv: &CsvTable) -> Result<Experiment, String> {
    let (inputs, targets) = (csv.table.input_width, csv.table.target_width);
    if inputs == 0 || targets == 0 {
        return Err("csv: line 1: the header needs input columns (x1, x2, …) and a target column (y)".into());
    }
    let mut e = base.clone();
    e.data = DataSpec {
        source: DataSource::Csv,
        samples: None,
        noise: None,
        // Split like the built-in data: half trains, half tests (the
        // training-share control changes it; 100 % trains on every row).
        train_fraction: Some(0.5),
        features: None,
        shuffle: true,
        // Loader settings carry over; augmentation is for images.
        augment: None,
        ..base.data.clone()
    };
    e.model.inputs = inputs;
    // Rows that look like images are taken as images (the shape the run
    // had, where it holds the columns, else n × n or 3 × n × n from 8 × 8
    // up); the Image shape control changes or clears it.
    e.model.input_shape = base
        .model
        .input_shape
        .filter(|s| s.iter().product::<usize>() == inputs)
        .or_else(|| stepscope_core::experiment::image_shape_for(inputs).filter(|s| s[1] >= 8));
    e.fit_image_shape();
    let (loss, outputs) = match csv.classes() {
        Some(c) if c <= 2 => (Loss::BceWithLogits, 1),
        Some(c) => (Loss::CrossEntropy, c),
        None => (Loss::Mse, targets),
    };
    e.loss = loss;
    if let Some(out) = e.model.layers.last_mut() {
        *out = LayerSpec::dense(outputs, Activation::Linear);
    }
    e.validate().map_err(|err| err.to_string())?;
    csv.check(&e).map_err(|err| err.to_string())?;
    page_check(&e, Some((csv.rows(), 0)))?;
    Ok(e)
}

/// Rows of a table (for messages).
pub fn rows(table: &Table) -> usize {
    table.rows()
}
