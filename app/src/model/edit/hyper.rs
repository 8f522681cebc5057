//! The hyperparameter controls' setters: each validates and edits the
//! experiment (`AppState::edit` applies it), or refuses with a message
//! naming what does not apply.

use stepscope_core::experiment::*;
use stepscope_core::Experiment;

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
    use crate::model::edit::default_experiment;

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
