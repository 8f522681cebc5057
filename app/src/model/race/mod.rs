//! A race: 2–4 runs of the page's experiment that differ in one setting
//! (the optimizer, the learning rate or the batch size), from the same seed
//! and the same initial weights, trained side by side (`lanes`).
//!
//! Each lane is exactly the run its experiment would be alone: a fresh
//! `TrainState` of its variant (the initial weights depend on the model and
//! the seed alone, so every variant starts from the base's weights; the
//! tests check it) stepped by the core's `Trainer` on the page's engine.

use serde::{Deserialize, Serialize};
use stepscope_core::{Experiment, TrainState};

use crate::model::edit::{edited, set_batch, set_lr, set_optimizer};

mod lanes;

pub use lanes::{LaneReport, RaceLanes, RaceReport};

/// Runs in a race, at least and at most.
pub const MIN_LANES: usize = 2;
pub const MAX_LANES: usize = 4;
/// The longest race, in steps per lane.
pub const MAX_RACE_STEPS: u64 = 1_000_000;

/// The one setting a race varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaceSetting {
    Optimizer,
    LearningRate,
    BatchSize,
    /// A transformer's q/k LayerNorm, off against on.
    QkLayerNorm,
    /// A transformer's head tied to its token embedding, or its own.
    TieEmbeddings,
    /// The z-loss coefficient.
    ZLoss,
}

impl RaceSetting {
    pub fn parse(s: &str) -> Option<RaceSetting> {
        match s {
            "optimizer" => Some(RaceSetting::Optimizer),
            "lr" => Some(RaceSetting::LearningRate),
            "batch" => Some(RaceSetting::BatchSize),
            "qk_layernorm" => Some(RaceSetting::QkLayerNorm),
            "tie_embeddings" => Some(RaceSetting::TieEmbeddings),
            "z_loss" => Some(RaceSetting::ZLoss),
            _ => None,
        }
    }

    /// The form's value for this setting.
    pub fn key(self) -> &'static str {
        match self {
            RaceSetting::Optimizer => "optimizer",
            RaceSetting::LearningRate => "lr",
            RaceSetting::BatchSize => "batch",
            RaceSetting::QkLayerNorm => "qk_layernorm",
            RaceSetting::TieEmbeddings => "tie_embeddings",
            RaceSetting::ZLoss => "z_loss",
        }
    }

    /// Values a race of this setting starts with in the form.
    pub fn suggested(self) -> &'static str {
        match self {
            RaceSetting::Optimizer => "sgd, adamw",
            RaceSetting::LearningRate => "0.005, 0.02, 0.1",
            RaceSetting::BatchSize => "8, 32, 128",
            RaceSetting::QkLayerNorm => "off, on",
            RaceSetting::TieEmbeddings => "on, off",
            RaceSetting::ZLoss => "0, 0.0001",
        }
    }
}

/// What the user asked to race.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RaceSpec {
    pub setting: RaceSetting,
    /// One value per lane, as typed ("sgd", "0.1", "64").
    pub values: Vec<String>,
    /// Steps each lane trains before the race ends by itself (None: until
    /// the user ends it).
    pub steps: Option<u64>,
}

impl RaceSpec {
    /// A spec from the form's fields: the setting's key, the values
    /// separated by commas or spaces, and the steps (empty or 0: no limit).
    pub fn parse(setting: &str, values: &str, steps: &str) -> Result<RaceSpec, String> {
        let setting = RaceSetting::parse(setting).ok_or_else(|| format!("Unknown race setting `{setting}`."))?;
        let values: Vec<String> =
            values.split([',', ' ', ';']).map(str::trim).filter(|v| !v.is_empty()).map(str::to_string).collect();
        let steps = match steps.trim() {
            "" | "0" => None,
            text => match text.parse::<u64>() {
                Ok(n) if n <= MAX_RACE_STEPS => Some(n),
                _ => {
                    return Err(format!("Race steps must be a whole number from 0 to {MAX_RACE_STEPS}, got `{text}`."))
                }
            },
        };
        Ok(RaceSpec { setting, values, steps })
    }

    /// The lanes' experiments: `base` with the setting at each value, each
    /// validated against the core's and the page's limits, labelled by its
    /// value ("lr 0.1"). Refused whole, with a message, when any is wrong.
    pub fn variants(&self, base: &Experiment) -> Result<Vec<(String, Experiment)>, String> {
        let n = self.values.len();
        if !(MIN_LANES..=MAX_LANES).contains(&n) {
            return Err(format!("A race takes {MIN_LANES} to {MAX_LANES} values, got {n}."));
        }
        let mut out: Vec<(String, Experiment)> = Vec::with_capacity(n);
        for value in &self.values {
            let e = edited(base, |e| self.apply(e, value)).map_err(|why| format!("Race value `{value}`: {why}"))?;
            if let Some((label, _)) = out.iter().find(|(_, other)| *other == e) {
                return Err(format!("Race values `{value}` and `{label}` give the same experiment."));
            }
            out.push((format!("{} {value}", self.setting.key()), e));
        }
        Ok(out)
    }

    fn apply(&self, e: &mut Experiment, value: &str) -> Result<(), String> {
        match self.setting {
            // The page's own optimizer keeps its settings (a lane of it is
            // the page's run); another gets PyTorch's defaults.
            RaceSetting::Optimizer if e.optimizer.name() == value => Ok(()),
            RaceSetting::Optimizer => set_optimizer(e, value),
            RaceSetting::LearningRate => set_lr(e, number(value)?),
            RaceSetting::BatchSize => set_batch(e, number(value)?),
            RaceSetting::QkLayerNorm => {
                crate::model::edit::set_gpt_switch(e, "qk_layernorm", on_off(value, "q/k LayerNorm")?)
            }
            RaceSetting::TieEmbeddings => {
                crate::model::edit::set_gpt_switch(e, "tie_embeddings", on_off(value, "A tied head")?)
            }
            RaceSetting::ZLoss => crate::model::edit::set_z_loss(e, number(value)?),
        }
    }
}

fn on_off(value: &str, what: &str) -> Result<bool, String> {
    match value {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(format!("{what} is `on` or `off`, not `{value}`.")),
    }
}

fn number(value: &str) -> Result<f64, String> {
    value.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| format!("`{value}` is not a number."))
}

/// A lane's first state: a fresh run of `variant` with `base`'s initial
/// weights. These are `TrainState::fresh(variant)`'s own (the weights
/// depend on the model and the seed, which a race never changes); taking
/// them from the base makes "the same initial weights" hold by
/// construction, and the tests check that it is also the lone run's state.
///
/// A variant of another shape (a transformer with q/k LayerNorm against
/// one without: two more tensors a block) starts from its own initial
/// weights, drawn from the same seed.
pub fn lane_state(base: &TrainState, variant: &Experiment) -> TrainState {
    let fresh = TrainState::fresh(variant);
    if fresh.params.len() != base.params.len() {
        return fresh;
    }
    TrainState { params: base.params.clone(), ..fresh }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::default_experiment;
    use crate::model::runs::experiment_diff;

    fn spec(setting: &str, values: &str) -> RaceSpec {
        RaceSpec::parse(setting, values, "").unwrap()
    }

    /// Every variant is the base experiment but the chosen setting, and
    /// starts from the base's initial weights, which are also what a lone
    /// run of the variant starts from.
    #[test]
    fn variants_differ_in_the_chosen_setting_alone() {
        let base = default_experiment();
        let fresh = TrainState::fresh(&base);
        let cases = [
            ("optimizer", "sgd, adamw, lamb", vec!["optimizer", "momentum", "dampening", "nesterov", "betas", "eps"]),
            ("lr", "0.005 0.1", vec!["lr"]),
            ("batch", "8, 128", vec!["batch_size"]),
        ];
        for (setting, values, fields) in cases {
            let variants = spec(setting, values).variants(&base).unwrap();
            assert_eq!(variants.len(), values.split([',', ' ']).filter(|v| !v.is_empty()).count());
            for (label, e) in &variants {
                for line in experiment_diff(&base, e) {
                    let field = line.split(':').next().unwrap();
                    assert!(fields.contains(&field), "{label}: {line} is not the {setting}");
                }
                let lane = lane_state(&fresh, e);
                assert_eq!(lane, TrainState::fresh(e), "{label}: a lane starts as its lone run");
                assert_eq!(lane.params, fresh.params, "{label}: the same initial weights");
            }
        }
        let lanes = spec("optimizer", "sgd, adamw").variants(&base).unwrap();
        assert_eq!(lanes[1].1, base, "the page's own optimizer keeps its settings");
        assert!(experiment_diff(&lanes[1].1, &lanes[0].1).contains(&"optimizer: adamw → sgd".to_string()));
        assert_eq!(lanes[0].0, "optimizer sgd");
    }

    #[test]
    fn bad_races_are_refused_with_a_message() {
        let base = default_experiment();
        let refused = |setting: &str, values: &str| spec(setting, values).variants(&base).unwrap_err();
        assert!(refused("lr", "0.1").contains("2 to 4 values"));
        assert!(refused("lr", "0.1 0.2 0.3 0.4 0.5").contains("got 5"));
        assert!(refused("lr", "0.1, fast").contains("`fast` is not a number"));
        assert!(refused("lr", "0.1, -1").contains("Race value `-1`"));
        assert!(refused("batch", "8, 2.5").contains("whole number"));
        assert!(refused("optimizer", "sgd, rmsprop").contains("Unknown optimizer `rmsprop`"));
        assert!(refused("lr", "0.1, 0.10").contains("the same experiment"));
        assert!(RaceSpec::parse("momentum", "1, 2", "").unwrap_err().contains("Unknown race setting"));
        assert!(RaceSpec::parse("lr", "1, 2", "ten").unwrap_err().contains("`ten`"));
        assert_eq!(RaceSpec::parse("lr", "1, 2", " 300 ").unwrap().steps, Some(300));
        assert_eq!(RaceSpec::parse("lr", "1, 2", "0").unwrap().steps, None);
    }
}
