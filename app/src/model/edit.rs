//! The default experiment and the edits the controls make to it. Every
//! edit goes through `Experiment::validate`, so a control can never put the
//! page into a state the engine would refuse; a refused edit becomes a
//! message and changes nothing.

use stepscope_core::data::Table;
use stepscope_core::experiment::*;
use stepscope_core::limits::Limits;
use stepscope_core::Experiment;

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

/// Spiral data, a small tanh network, AdamW.
pub fn default_experiment() -> Experiment {
    // Chosen so that a newcomer sees it learn: 2-16-16-1 tanh with AdamW
    // at lr 0.02 and batch 32 reaches about 96 % test accuracy on the
    // spiral in 1,000 steps, a few seconds on either engine (the
    // previous 2-8-8-1 at lr 0.03, batch 16 had 74 % after 8,000).
    Experiment::from_json(
        r#"{"seed": 1,
            "model": {"inputs": 2, "layers": [
                {"units": 16, "activation": "tanh"}, {"units": 16, "activation": "tanh"},
                {"units": 1, "activation": "linear"}]},
            "loss": "bce_with_logits",
            "optimizer": {"kind": "adamw", "lr": 0.02, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
            "batch_size": 32,
            "data": {"source": "spiral", "samples": 500, "noise": 0.1, "train_fraction": 0.5,
                     "features": ["x1", "x2"], "shuffle": true}}"#,
    )
    .expect("the default experiment is valid")
}

/// The hidden layers (all but the output layer).
pub fn hidden_layers(e: &Experiment) -> &[LayerSpec] {
    &e.model.layers[..e.model.layers.len() - 1]
}

/// Whether going from `old` to `new` needs fresh parameters (the model,
/// the data or the seed changed) or can continue the run.
pub fn needs_reset(old: &Experiment, new: &Experiment) -> bool {
    old.model != new.model || old.data != new.data || old.seed != new.seed || old.loss != new.loss
}

/// The output layer and loss that a data source implies (binary
/// classification: one logit with bce; regression: one linear unit with
/// mse). CSV keeps what its upload inferred.
pub fn fit_output(e: &mut Experiment) {
    if e.data.source == DataSource::Csv {
        return;
    }
    let loss = if e.data.source.is_regression() { Loss::Mse } else { Loss::BceWithLogits };
    e.loss = loss;
    if let Some(out) = e.model.layers.last_mut() {
        *out = LayerSpec { units: 1, activation: Activation::Linear };
    }
    e.model.inputs = e.data.features().len();
}

/// Applies `edit` to a copy of `e` and validates it: Ok(new) or the
/// message to show, `e` untouched.
pub fn edited(e: &Experiment, edit: impl FnOnce(&mut Experiment) -> Result<(), String>) -> Result<Experiment, String> {
    let mut new = e.clone();
    edit(&mut new)?;
    new.validate().map_err(|err| err.to_string())?;
    page_check(&new, None)?;
    Ok(new)
}

pub fn add_layer(e: &mut Experiment) -> Result<(), String> {
    let hidden = hidden_layers(e).len();
    if hidden >= MAX_HIDDEN_LAYERS {
        return Err(format!("At most {MAX_HIDDEN_LAYERS} hidden layers on this page."));
    }
    let like = hidden_layers(e).last().cloned().unwrap_or(LayerSpec { units: 4, activation: Activation::Tanh });
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

/// Parses a number typed into a control, naming the control on failure.
pub fn parse_number(label: &str, text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(format!("{label}: `{text}` is not a number.")),
    }
}

/// An experiment for an uploaded CSV: inputs from its `x…` columns; the
/// problem from its targets: one `y` of integer classes 0..C is
/// classification (bce for 2 classes, cross_entropy for more), anything
/// else is regression with mse on every target column.
pub fn experiment_for_csv(base: &Experiment, text: &str) -> Result<Experiment, String> {
    let names = stepscope_core::data::csv_header(text).map_err(|err| err.to_string())?;
    let inputs = names.iter().filter(|n| n.starts_with('x') && n.len() > 1).count();
    let targets = names.iter().filter(|n| n.starts_with('y')).count();
    if inputs == 0 || targets == 0 {
        return Err("csv: line 1: the header needs input columns (x1, x2, …) and a target column (y)".into());
    }
    let mut e = base.clone();
    e.data = DataSpec {
        source: DataSource::Csv,
        samples: None,
        noise: None,
        train_fraction: None,
        features: None,
        shuffle: true,
    };
    e.model.inputs = inputs.min(4096);
    // Read the targets leniently first to choose the problem; the strict
    // parser below reports any bad line and column.
    let y_col = names.iter().position(|n| *n == "y");
    let mut classes: Option<usize> = y_col.filter(|_| targets == 1).map(|_| 0);
    if let (Some(col), Some(max_class)) = (y_col, classes.as_mut()) {
        for row in stepscope_core::data::csv_rows(text).skip(1) {
            match row.ok().and_then(|(_, fields)| fields.get(col)?.parse::<f64>().ok()) {
                Some(v) if v >= 0.0 && v.fract() == 0.0 && v < 1024.0 => *max_class = (*max_class).max(v as usize + 1),
                _ => {
                    classes = None;
                    break;
                }
            }
        }
    }
    let (loss, outputs) = match classes {
        Some(c) if c <= 2 => (Loss::BceWithLogits, 1),
        Some(c) => (Loss::CrossEntropy, c),
        None => (Loss::Mse, targets),
    };
    e.loss = loss;
    if let Some(out) = e.model.layers.last_mut() {
        *out = LayerSpec { units: outputs, activation: Activation::Linear };
    }
    e.validate().map_err(|err| err.to_string())?;
    let table = stepscope_core::data::parse_csv(text, &e).map_err(|err| err.to_string())?;
    page_check(&e, Some((table.rows(), 0)))?;
    Ok(e)
}

/// Rows of a table (for messages).
pub fn rows(table: &Table) -> usize {
    table.rows()
}
