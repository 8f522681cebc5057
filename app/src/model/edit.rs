//! The default experiment and the edits the controls make to it. Every
//! edit goes through `Experiment::validate`, so a control can never put the
//! page into a state the engine would refuse; a refused edit becomes a
//! message and changes nothing.

use stepscope_core::data::{CsvTable, Table};
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

/// What the model switch opens for a transformer: a small character-level
/// GPT on Tiny Shakespeare, chosen so that a newcomer sees it learn on the
/// CPU engine in the browser (bench/page-gpt.md, a 2-core machine: a third
/// of its sample's words are real ones at 20–30 s, half from 90 s; its
/// validation loss is 1.998 at 130 s and 1.87 at 180 s). The learning rate warms up
/// and then stays, so the run keeps learning for as long as it is left.
pub fn default_gpt_experiment() -> Experiment {
    Experiment::from_json(
        r#"{"seed": 1337,
            "model": {"kind": "gpt", "vocab_size": 65, "context": 64, "embed": 96, "heads": 4, "blocks": 3},
            "loss": "cross_entropy",
            "optimizer": {"kind": "adamw", "lr": 0.006, "betas": [0.9, 0.99], "eps": 1e-8, "weight_decay": 0.1},
            "schedule": {"kind": "warmup_cosine", "warmup_steps": 20, "total_steps": 100000, "min_lr": 0.0006},
            "batch_size": 16,
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
    old.model != new.model || old.data != new.data || old.seed != new.seed || old.loss != new.loss
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
    };
    e.model.inputs = inputs;
    let (loss, outputs) = match csv.classes() {
        Some(c) if c <= 2 => (Loss::BceWithLogits, 1),
        Some(c) => (Loss::CrossEntropy, c),
        None => (Loss::Mse, targets),
    };
    e.loss = loss;
    if let Some(out) = e.model.layers.last_mut() {
        *out = LayerSpec { units: outputs, activation: Activation::Linear };
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

// The hyperparameter controls' setters: each validates and edits the
// experiment (`AppState::edit` applies it).

pub fn set_lr(e: &mut Experiment, v: f64) -> Result<(), String> {
    match &mut e.optimizer {
        OptimizerSpec::Sgd { lr, .. }
        | OptimizerSpec::Adam { lr, .. }
        | OptimizerSpec::Adamw { lr, .. }
        | OptimizerSpec::Lamb { lr, .. } => *lr = v,
    }
    Ok(())
}

pub fn whole(label: &str, v: f64) -> Result<usize, String> {
    if v >= 1.0 && v.fract() == 0.0 && v <= 1e9 {
        Ok(v as usize)
    } else {
        Err(format!("{label} must be a whole number ≥ 1, got {v}."))
    }
}

pub fn set_batch(e: &mut Experiment, v: f64) -> Result<(), String> {
    e.batch_size = whole("Batch size", v)?;
    Ok(())
}

pub fn set_accumulation(e: &mut Experiment, v: f64) -> Result<(), String> {
    e.grad_accumulation = whole("Gradient accumulation", v)?;
    Ok(())
}

pub fn set_seed(e: &mut Experiment, v: f64) -> Result<(), String> {
    e.seed = whole("Seed", v + 1.0)? as u64 - 1;
    Ok(())
}

pub fn set_weight_decay(e: &mut Experiment, v: f64) -> Result<(), String> {
    match &mut e.optimizer {
        OptimizerSpec::Sgd { weight_decay, .. }
        | OptimizerSpec::Adam { weight_decay, .. }
        | OptimizerSpec::Adamw { weight_decay, .. }
        | OptimizerSpec::Lamb { weight_decay, .. } => *weight_decay = v,
    }
    Ok(())
}

pub fn set_momentum(e: &mut Experiment, v: f64) -> Result<(), String> {
    match &mut e.optimizer {
        OptimizerSpec::Sgd { momentum, .. } => *momentum = v,
        _ => return Err("Momentum applies to SGD.".into()),
    }
    Ok(())
}

pub fn set_beta(e: &mut Experiment, index: usize, v: f64) -> Result<(), String> {
    match &mut e.optimizer {
        OptimizerSpec::Adam { betas, .. } | OptimizerSpec::Adamw { betas, .. } | OptimizerSpec::Lamb { betas, .. } => {
            betas[index] = v
        }
        OptimizerSpec::Sgd { .. } => return Err("Betas apply to Adam, AdamW and LAMB.".into()),
    }
    Ok(())
}

pub fn set_clip(e: &mut Experiment, v: f64) -> Result<(), String> {
    e.clip_grad_norm = if v == 0.0 { None } else { Some(v) };
    Ok(())
}

pub fn set_reg_rate(e: &mut Experiment, v: f64) -> Result<(), String> {
    match &mut e.regularization {
        Some(r) => r.rate = v,
        None => return Err("Choose L1 or L2 regularization first.".into()),
    }
    Ok(())
}

pub fn schedule_fields(s: &Schedule) -> (u64, u64, f64) {
    match *s {
        Schedule::Constant => (0, 1000, 0.0),
        Schedule::WarmupCosine { warmup_steps, total_steps, min_lr }
        | Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => (warmup_steps, total_steps, min_lr),
    }
}

pub fn with_schedule_fields(
    s: &mut Schedule,
    warmup: Option<u64>,
    total: Option<u64>,
    min: Option<f64>,
) -> Result<(), String> {
    match s {
        Schedule::Constant => Err("Choose a warmup schedule first.".into()),
        Schedule::WarmupCosine { warmup_steps, total_steps, min_lr }
        | Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => {
            *warmup_steps = warmup.unwrap_or(*warmup_steps);
            *total_steps = total.unwrap_or(*total_steps);
            *min_lr = min.unwrap_or(*min_lr);
            Ok(())
        }
    }
}

/// Another optimizer, keeping the learning rate, with PyTorch's defaults
/// for the rest (AdamW: weight decay 0.01).
pub fn set_optimizer(e: &mut Experiment, kind: &str) -> Result<(), String> {
    let lr = e.optimizer.lr();
    e.optimizer = match kind {
        "sgd" => OptimizerSpec::Sgd { lr, momentum: 0.9, dampening: 0.0, nesterov: false, weight_decay: 0.0 },
        "adam" => OptimizerSpec::Adam { lr, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 },
        "adamw" => OptimizerSpec::Adamw { lr, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.01 },
        "lamb" => OptimizerSpec::Lamb { lr, betas: [0.9, 0.999], eps: 1e-6, weight_decay: 0.0 },
        other => return Err(format!("Unknown optimizer `{other}`.")),
    };
    Ok(())
}

/// Another schedule, keeping the warmup, length and floor it had (a
/// warmup of at least 10 steps).
pub fn set_schedule(e: &mut Experiment, kind: &str) -> Result<(), String> {
    let (warmup_steps, total_steps, min_lr) = schedule_fields(&e.schedule);
    e.schedule = match kind {
        "constant" => Schedule::Constant,
        "warmup_cosine" => Schedule::WarmupCosine { warmup_steps: warmup_steps.max(10), total_steps, min_lr },
        "warmup_linear" => Schedule::WarmupLinear { warmup_steps: warmup_steps.max(10), total_steps, min_lr },
        other => return Err(format!("Unknown schedule `{other}`.")),
    };
    Ok(())
}

pub fn set_nesterov(e: &mut Experiment, on: bool) -> Result<(), String> {
    match &mut e.optimizer {
        OptimizerSpec::Sgd { nesterov, .. } => {
            *nesterov = on;
            Ok(())
        }
        _ => Err("Nesterov applies to SGD.".into()),
    }
}

/// "l1", "l2" or none, keeping the rate (0.001 when there was none).
pub fn set_regularization(e: &mut Experiment, kind: &str) -> Result<(), String> {
    let rate = e.regularization.as_ref().map_or(0.001, |r| r.rate);
    e.regularization = match kind {
        "l1" => Some(Regularization { kind: RegularizationKind::L1, rate }),
        "l2" => Some(Regularization { kind: RegularizationKind::L2, rate }),
        _ => None,
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controls' setters: what each changes, what it keeps, and what it
    /// refuses with a message.
    #[test]
    fn setters_change_what_they_name_and_refuse_what_does_not_apply() {
        let mut e = default_experiment();
        let lr = e.optimizer.lr();
        set_optimizer(&mut e, "sgd").unwrap();
        assert!(matches!(e.optimizer, OptimizerSpec::Sgd { .. }) && e.optimizer.lr() == lr, "the rate is kept");
        assert!(set_beta(&mut e, 0, 0.8).unwrap_err().contains("Adam"));
        set_momentum(&mut e, 0.5).unwrap();
        set_nesterov(&mut e, true).unwrap();
        assert!(matches!(e.optimizer, OptimizerSpec::Sgd { momentum: 0.5, nesterov: true, .. }));
        set_optimizer(&mut e, "adamw").unwrap();
        assert!(set_momentum(&mut e, 0.5).unwrap_err().contains("SGD"));
        assert!(set_nesterov(&mut e, true).is_err());
        assert!(set_optimizer(&mut e, "rmsprop").unwrap_err().contains("rmsprop"));

        e.schedule = Schedule::Constant;
        assert!(with_schedule_fields(&mut e.schedule, Some(5), None, None).is_err());
        set_schedule(&mut e, "warmup_cosine").unwrap();
        let Schedule::WarmupCosine { warmup_steps, total_steps, .. } = e.schedule else { panic!("{:?}", e.schedule) };
        assert_eq!((warmup_steps, total_steps), (10, 1000));
        with_schedule_fields(&mut e.schedule, None, Some(50), None).unwrap();
        set_schedule(&mut e, "warmup_linear").unwrap();
        assert!(matches!(e.schedule, Schedule::WarmupLinear { total_steps: 50, .. }), "the length is kept");
        assert!(set_schedule(&mut e, "cyclic").is_err());

        set_clip(&mut e, 0.0).unwrap();
        assert_eq!(e.clip_grad_norm, None, "0 turns clipping off");
        set_clip(&mut e, 1.5).unwrap();
        assert_eq!(e.clip_grad_norm, Some(1.5));
        e.regularization = None;
        assert!(set_reg_rate(&mut e, 0.1).is_err());
        set_regularization(&mut e, "l1").unwrap();
        set_reg_rate(&mut e, 0.1).unwrap();
        assert_eq!(e.regularization, Some(Regularization { kind: RegularizationKind::L1, rate: 0.1 }));
        set_regularization(&mut e, "none").unwrap();
        assert_eq!(e.regularization, None);

        assert!(set_batch(&mut e, 2.5).is_err() && set_batch(&mut e, 0.0).is_err());
        set_batch(&mut e, 64.0).unwrap();
        set_seed(&mut e, 0.0).unwrap();
        assert_eq!((e.batch_size, e.seed), (64, 0));
    }
}
