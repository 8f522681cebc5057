//! Range and consistency checks of an experiment (a run's state is
//! checked beside it, in `engine::state_check`). Each message names the field, the value
//! and what is allowed, in the words a user typed.

use crate::error::{Error, Result};
use crate::experiment::*;

/// Largest learning rate (and `min_lr`) accepted: far above any rate that
/// trains (the lessons diverge on purpose at 3), far below what overflows.
pub const MAX_LR: f64 = 100.0;

impl Experiment {
    /// Parses and validates; the error names the field and its position.
    pub fn from_json(text: &str) -> Result<Experiment> {
        // Strict first (`json`): the model's fields are read through a map,
        // where serde_json alone would keep the last of a repeated key.
        let experiment: Experiment = crate::json::from_str(text).map_err(Error::Experiment)?;
        experiment.validate()?;
        Ok(experiment)
    }

    /// Every value against its range and against the other fields.
    pub fn validate(&self) -> Result<()> {
        experiment(self)
    }
}

pub(crate) fn bad(msg: String) -> Result<()> {
    Err(Error::Experiment(msg))
}

fn finite_at_least(name: &str, value: f64, min: f64) -> Result<()> {
    if !value.is_finite() || value < min {
        return bad(format!("{name} must be a finite number >= {min}, got {value}"));
    }
    Ok(())
}

fn learning_rate(name: &str, value: f64) -> Result<()> {
    if !value.is_finite() || !(0.0..=MAX_LR).contains(&value) {
        return bad(format!("{name} must be a finite number in [0, {MAX_LR}], got {value}"));
    }
    Ok(())
}

fn beta(name: &str, value: f64) -> Result<()> {
    if !(0.0..1.0).contains(&value) {
        return bad(format!("{name} must be in [0, 1), got {value}"));
    }
    Ok(())
}

pub fn experiment(e: &Experiment) -> Result<()> {
    model(e)?;
    optimizer(&e.optimizer)?;
    schedule(&e.schedule)?;
    if e.batch_size == 0 || e.batch_size > MAX_BATCH {
        return bad(format!("batch_size must be in 1..={MAX_BATCH}, got {}", e.batch_size));
    }
    if e.grad_accumulation == 0 || e.grad_accumulation > 1024 {
        return bad(format!("grad_accumulation must be in 1..=1024, got {}", e.grad_accumulation));
    }
    if e.shards == 0 || e.shards > MAX_SHARDS {
        return bad(format!("shards must be in 1..={MAX_SHARDS}, got {}", e.shards));
    }
    if !e.batch_size.is_multiple_of(e.shards) {
        return bad(format!(
            "shards ({}) must divide batch_size ({}): every shard takes the same number of rows",
            e.shards, e.batch_size
        ));
    }
    if let Some(max_norm) = e.clip_grad_norm {
        if !max_norm.is_finite() || max_norm <= 0.0 {
            return bad(format!(
                "clip_grad_norm must be a finite number > 0 (or null for no clipping), got {max_norm}"
            ));
        }
    }
    if let Some(reg) = &e.regularization {
        finite_at_least("regularization.rate", reg.rate, 0.0)?;
    }
    data(e)
}

/// A transformer's parameters, at most (an upper bound of the count is
/// checked, so that no offset of a valid model overflows a 32-bit `usize`).
pub const MAX_GPT_PARAMETERS: u64 = 1 << 30;

/// The transformer's fields (`"model": {"kind": "gpt", …}`).
fn gpt(e: &Experiment, g: &GptSpec) -> Result<()> {
    let range = |name: &str, value: usize, max: usize| -> Result<()> {
        if value == 0 || value > max {
            return bad(format!("model.{name} must be in 1..={max}, got {value}"));
        }
        Ok(())
    };
    range("vocab_size", g.vocab_size, MAX_VOCABULARY)?;
    range("context", g.context, MAX_CONTEXT)?;
    range("embed", g.embed, MAX_EMBED)?;
    range("heads", g.heads, g.embed.min(MAX_HEADS))?;
    range("blocks", g.blocks, MAX_BLOCKS)?;
    range("mlp_ratio", g.mlp_ratio, MAX_MLP_RATIO)?;
    if !g.embed.is_multiple_of(g.heads) {
        return bad(format!("model.embed ({}) must be a multiple of model.heads ({})", g.embed, g.heads));
    }
    // Offsets into the flat buffer are `usize`, 32 bits in WebAssembly:
    // the parameters, counted in u64 here, must fit there with room.
    let (v, t, c, l, m) = (g.vocab_size as u64, g.context as u64, g.embed as u64, g.blocks as u64, g.mlp_ratio as u64);
    let params = (2 * v + t + 2) * c + l * ((4 + 2 * m) * c * c + (13 + m) * c + 4 * c);
    if params > MAX_GPT_PARAMETERS {
        return bad(format!(
            "the model has about {params} parameters, more than the {MAX_GPT_PARAMETERS} an engine holds \
             (model.embed, model.blocks and model.mlp_ratio set its size)"
        ));
    }
    if e.loss != Loss::CrossEntropy {
        return bad(format!("a gpt model's loss must be \"cross_entropy\", not {:?}", e.loss.name()));
    }
    if !e.data.source.is_text() {
        return bad(format!(
            "a gpt model reads text: data.source must be \"text\" or \"shakespeare\", not {:?}",
            e.data.source.name()
        ));
    }
    Ok(())
}

fn model(e: &Experiment) -> Result<()> {
    if !e.z_loss.is_finite() || e.z_loss < 0.0 {
        return bad(format!("z_loss must be a finite number >= 0, got {}", e.z_loss));
    }
    if let Some(g) = e.gpt() {
        return gpt(e, g);
    }
    if e.z_loss != 0.0 {
        return bad("z_loss applies to a gpt model only".into());
    }
    if e.data.source.is_text() {
        return bad(format!(
            "data.source {:?} is text: it needs \"model\": {{\"kind\": \"gpt\", …}}",
            e.data.source.name()
        ));
    }
    let m = &e.model;
    if m.input_shape.is_none() && (m.inputs == 0 || m.inputs > MAX_UNITS) {
        return bad(format!("model.inputs must be in 1..={MAX_UNITS}, got {}", m.inputs));
    }
    if m.layers.is_empty() || m.layers.len() > MAX_LAYERS {
        return bad(format!("model.layers must hold 1..={MAX_LAYERS} layers, got {}", m.layers.len()));
    }
    images(e)?;
    for (i, layer) in m.layers.iter().enumerate() {
        if layer.kind == LayerKind::Dense && (layer.units == 0 || layer.units > MAX_UNITS) {
            return bad(format!("model.layers[{i}].units must be in 1..={MAX_UNITS}, got {}", layer.units));
        }
    }
    let outputs = e.outputs();
    match e.loss {
        Loss::CrossEntropy if outputs < 2 => {
            bad(format!("loss cross_entropy needs an output layer of at least 2 units (one per class), got {outputs}"))
        }
        _ => Ok(()),
    }
}

/// The image model: `input_shape` in range, conv and pool layers before the
/// first dense layer and a dense layer last, every field in range, every
/// layer's output at least 1 × 1 (the error names the layer and its input).
fn images(e: &Experiment) -> Result<()> {
    let m = &e.model;
    let spatial = m.layers.iter().position(|l| l.kind.is_spatial());
    let Some([c, h, w]) = m.input_shape else {
        return match spatial {
            Some(i) => bad(format!(
                "model.layers[{i}] is {}: it needs model.input_shape [C, H, W] (each row an image in C, H, W order)",
                m.layers[i].kind.name()
            )),
            None => Ok(()),
        };
    };
    if !(1..=MAX_CHANNELS).contains(&c) || !(1..=MAX_SIDE).contains(&h) || !(1..=MAX_SIDE).contains(&w) {
        return bad(format!(
            "model.input_shape must be [C, H, W] with C in 1..={MAX_CHANNELS} and H, W in 1..={MAX_SIDE}, got [{c}, {h}, {w}]"
        ));
    }
    if m.inputs > MAX_IMAGE_FLOATS {
        return bad(format!("model.input_shape holds {} floats a row, more than {MAX_IMAGE_FLOATS}", m.inputs));
    }
    if let Some(first_dense) = m.layers.iter().position(|l| !l.kind.is_spatial()) {
        if let Some(i) = m.layers.iter().skip(first_dense).position(|l| l.kind.is_spatial()) {
            let i = i + first_dense;
            return bad(format!(
                "model.layers[{i}] is {} after the dense model.layers[{first_dense}]: conv and pool layers come before the first dense layer",
                m.layers[i].kind.name()
            ));
        }
    }
    if m.layers.last().is_some_and(|l| l.kind.is_spatial()) {
        return bad(format!("model.layers[{}]: the last layer must be dense (the outputs)", m.layers.len() - 1));
    }
    let mut image = [c, h, w];
    for (i, layer) in m.layers.iter().enumerate() {
        let (kernel, stride, padding) = match layer.kind {
            LayerKind::Dense => break,
            LayerKind::Conv2d { filters, kernel, stride, padding } => {
                if !(1..=MAX_FILTERS).contains(&filters) {
                    return bad(format!("model.layers[{i}].filters must be in 1..={MAX_FILTERS}, got {filters}"));
                }
                if padding >= kernel.max(1) {
                    return bad(format!(
                        "model.layers[{i}].padding must be less than the kernel ({kernel}), got {padding}"
                    ));
                }
                (kernel, stride, padding)
            }
            LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => (kernel, stride, 0),
        };
        if !(1..=MAX_KERNEL).contains(&kernel) {
            return bad(format!("model.layers[{i}].kernel must be in 1..={MAX_KERNEL}, got {kernel}"));
        }
        if !(1..=MAX_KERNEL).contains(&stride) {
            return bad(format!("model.layers[{i}].stride must be in 1..={MAX_KERNEL}, got {stride}"));
        }
        let Some(next) = crate::model::conv::layer_output(&layer.kind, image) else {
            let reach = if padding > 0 { format!(" with padding {padding}") } else { String::new() };
            return bad(format!(
                "model.layers[{i}] ({}, kernel {kernel}{reach}) needs an input of at least {kernel} × {kernel}, got {} × {}: its output would be empty",
                layer.kind.name(),
                image[1] + 2 * padding,
                image[2] + 2 * padding
            ));
        };
        let floats = next[0] * next[1] * next[2];
        if floats > MAX_IMAGE_FLOATS {
            return bad(format!("model.layers[{i}] makes {floats} floats a row, more than {MAX_IMAGE_FLOATS}"));
        }
        let patch = image[0] * kernel * kernel * next[1] * next[2];
        if matches!(layer.kind, LayerKind::Conv2d { .. }) && patch > MAX_PATCH_FLOATS {
            return bad(format!(
                "model.layers[{i}]'s patch matrix would hold {patch} floats an image (C·K·K × output positions), more than {MAX_PATCH_FLOATS}"
            ));
        }
        image = next;
    }
    Ok(())
}

fn optimizer(o: &OptimizerSpec) -> Result<()> {
    match *o {
        OptimizerSpec::Sgd { lr, momentum, dampening, nesterov, weight_decay } => {
            learning_rate("optimizer.lr", lr)?;
            finite_at_least("optimizer.momentum", momentum, 0.0)?;
            finite_at_least("optimizer.dampening", dampening, 0.0)?;
            finite_at_least("optimizer.weight_decay", weight_decay, 0.0)?;
            // torch.optim.SGD refuses the same combination.
            if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                return bad("optimizer.nesterov needs momentum > 0 and dampening 0 (as torch.optim.SGD)".into());
            }
            Ok(())
        }
        OptimizerSpec::Adam { lr, betas, eps, weight_decay }
        | OptimizerSpec::Adamw { lr, betas, eps, weight_decay }
        | OptimizerSpec::Lamb { lr, betas, eps, weight_decay } => {
            learning_rate("optimizer.lr", lr)?;
            beta("optimizer.betas[0]", betas[0])?;
            beta("optimizer.betas[1]", betas[1])?;
            finite_at_least("optimizer.eps", eps, 0.0)?;
            if eps == 0.0 {
                return bad("optimizer.eps must be > 0, got 0".into());
            }
            finite_at_least("optimizer.weight_decay", weight_decay, 0.0)
        }
    }
}

fn schedule(s: &Schedule) -> Result<()> {
    match *s {
        Schedule::Constant => Ok(()),
        Schedule::WarmupCosine { warmup_steps, total_steps, min_lr }
        | Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => {
            if total_steps == 0 {
                return bad("schedule.total_steps must be >= 1, got 0".into());
            }
            if warmup_steps > total_steps {
                return bad(format!(
                    "schedule.warmup_steps ({warmup_steps}) must not exceed schedule.total_steps ({total_steps})"
                ));
            }
            learning_rate("schedule.min_lr", min_lr)
        }
    }
}

fn data(e: &Experiment) -> Result<()> {
    let d = &e.data;
    let fraction = d.train_fraction();
    if !fraction.is_finite() || fraction <= 0.0 || fraction > 1.0 {
        return bad(format!("data.train_fraction must be in (0, 1], got {fraction}"));
    }
    if let Some(augment) = &d.augment {
        let Some([_, h, w]) = e.image_shape() else {
            return bad(format!(
                "data.augment applies to images (\"digits\", \"mnist\", or a \"csv\" given model.input_shape); \"{}\" rows are not images",
                d.source.name()
            ));
        };
        augment.check(h.min(w)).map_err(crate::Error::Experiment)?;
    }
    if d.num_workers() > MAX_LOADER_WORKERS {
        return bad(format!("data.num_workers must be in 0..={MAX_LOADER_WORKERS}, got {}", d.num_workers()));
    }
    if !(1..=MAX_PREFETCH_FACTOR).contains(&d.prefetch_factor()) {
        return bad(format!("data.prefetch_factor must be in 1..={MAX_PREFETCH_FACTOR}, got {}", d.prefetch_factor()));
    }
    let generated = d.source.is_plane();
    if !generated {
        let why = match d.source {
            DataSource::Csv => "the CSV's columns are the data",
            DataSource::Text | DataSource::Shakespeare => "the text's windows are the data",
            _ => "its 1,797 images are the data",
        };
        for (given, name) in
            [(d.samples.is_some(), "samples"), (d.noise.is_some(), "noise"), (d.features.is_some(), "features")]
        {
            if given {
                return bad(format!("data.{name} does not apply to \"source\": \"{}\" ({why})", d.source.name()));
            }
        }
    }
    if generated {
        let samples = d.samples();
        if !(2..=MAX_SAMPLES).contains(&samples) {
            return bad(format!("data.samples must be in 2..={MAX_SAMPLES}, got {samples}"));
        }
        let noise = d.noise();
        if !noise.is_finite() || !(0.0..=1.0).contains(&noise) {
            return bad(format!("data.noise must be in [0, 1], got {noise}"));
        }
        let features = d.features();
        if features.is_empty() {
            return bad("data.features must name at least one feature".into());
        }
        for (i, f) in features.iter().enumerate() {
            if features[..i].contains(f) {
                return bad(format!("data.features lists {f:?} twice"));
            }
        }
        if features.len() != e.model.inputs {
            return bad(format!(
                "model.inputs is {} but data.features has {} features",
                e.model.inputs,
                features.len()
            ));
        }
    }
    if let Some(side) = d.source.image_side() {
        let pixels = side * side;
        if e.model.inputs != pixels {
            return bad(format!(
                "{} has {pixels} inputs ({side}×{side} pixels): model.inputs must be {pixels}, got {}",
                d.source.name(),
                e.model.inputs
            ));
        }
    }
    if d.source == DataSource::Csv || d.source.is_text() {
        // The file decides (`parse_csv` checks its columns and targets).
        return Ok(());
    }
    loss_fits(e)
}

/// The loss and output width against the data's classes (the page's loss
/// selector offers `Experiment::fitting_losses`, the same rule).
fn loss_fits(e: &Experiment) -> Result<()> {
    let (source, loss, outputs) = (e.data.source.name(), e.loss, e.outputs());
    let Some(wanted) = e.output_units_for(loss) else {
        return match e.data.source.classes() {
            None => bad(format!(
                "data.source {source:?} is a regression dataset: it needs loss \"mse\" with 1 output unit, not {:?}",
                loss.name()
            )),
            Some(classes) => bad(format!(
                "{source} has {classes} classes: the loss must be cross_entropy with {classes} output units, not {}",
                loss.name()
            )),
        };
    };
    if outputs == wanted {
        return Ok(());
    }
    match e.data.source.classes() {
        Some(classes) if classes > 2 => bad(format!(
            "{source} has {classes} classes: the loss must be cross_entropy with {classes} output units, not {outputs}"
        )),
        _ => bad(format!(
            "the output layer has {outputs} units but {source} data with loss {} needs {wanted}",
            loss.name()
        )),
    }
}
