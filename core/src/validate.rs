//! Range and consistency checks of an experiment. Each message names the
//! field, the value and what is allowed, in the words a user typed.

use crate::error::{Error, Result};
use crate::experiment::*;

fn bad(msg: String) -> Result<()> {
    Err(Error::Experiment(msg))
}

fn finite_at_least(name: &str, value: f64, min: f64) -> Result<()> {
    if !value.is_finite() || value < min {
        return bad(format!("{name} must be a finite number >= {min}, got {value}"));
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

fn model(e: &Experiment) -> Result<()> {
    let m = &e.model;
    if m.inputs == 0 || m.inputs > MAX_UNITS {
        return bad(format!("model.inputs must be in 1..={MAX_UNITS}, got {}", m.inputs));
    }
    if m.layers.is_empty() || m.layers.len() > MAX_LAYERS {
        return bad(format!("model.layers must hold 1..={MAX_LAYERS} layers, got {}", m.layers.len()));
    }
    for (i, layer) in m.layers.iter().enumerate() {
        if layer.units == 0 || layer.units > MAX_UNITS {
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

fn optimizer(o: &OptimizerSpec) -> Result<()> {
    match *o {
        OptimizerSpec::Sgd { lr, momentum, dampening, nesterov, weight_decay } => {
            finite_at_least("optimizer.lr", lr, 0.0)?;
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
            finite_at_least("optimizer.lr", lr, 0.0)?;
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
            finite_at_least("schedule.min_lr", min_lr, 0.0)
        }
    }
}

fn data(e: &Experiment) -> Result<()> {
    let d = &e.data;
    if d.source == DataSource::Csv {
        for (given, name) in [
            (d.samples.is_some(), "samples"),
            (d.noise.is_some(), "noise"),
            (d.train_fraction.is_some(), "train_fraction"),
            (d.features.is_some(), "features"),
        ] {
            if given {
                return bad(format!(
                    "data.{name} does not apply to \"source\": \"csv\" (the CSV's columns are the data)"
                ));
            }
        }
        return Ok(());
    }
    let samples = d.samples();
    if !(2..=MAX_SAMPLES).contains(&samples) {
        return bad(format!("data.samples must be in 2..={MAX_SAMPLES}, got {samples}"));
    }
    let noise = d.noise();
    if !noise.is_finite() || !(0.0..=1.0).contains(&noise) {
        return bad(format!("data.noise must be in [0, 1], got {noise}"));
    }
    let fraction = d.train_fraction();
    if !fraction.is_finite() || fraction <= 0.0 || fraction > 1.0 {
        return bad(format!("data.train_fraction must be in (0, 1], got {fraction}"));
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
        return bad(format!("model.inputs is {} but data.features has {} features", e.model.inputs, features.len()));
    }
    let outputs = e.outputs();
    let wanted = match (d.source.is_regression(), e.loss) {
        (true, Loss::Mse) => 1,
        (true, loss) => {
            return bad(format!(
                "data.source {:?} is a regression dataset: it needs loss \"mse\", not {loss:?}",
                d.source
            ))
        }
        (false, Loss::CrossEntropy) => 2,
        (false, _) => 1,
    };
    if outputs != wanted {
        return bad(format!(
            "the output layer has {outputs} units but {:?} data with loss {:?} needs {wanted}",
            d.source, e.loss
        ));
    }
    Ok(())
}
