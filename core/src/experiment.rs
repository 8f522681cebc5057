//! The experiment: one JSON object that the page builds, shares in its URL,
//! stores in every checkpoint, and the CLI reads. Documented field by field
//! in `docs/experiment.md`.
//!
//! Parsing is strict: an unknown field or value, or a key given twice at
//! any depth (`crate::json`), is an error that names it, so a typo never
//! silently trains something else. `validate` then checks
//! every value against its range and against the other fields.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod data_spec;
mod optimizer_spec;

pub use data_spec::*;
pub use optimizer_spec::*;

/// Largest width of any layer (inputs included): keeps a typo such as
/// `"units": 1600000` from allocating gigabytes in the browser.
pub const MAX_UNITS: usize = 4096;
pub const MAX_LAYERS: usize = 17;
pub const MAX_BATCH: usize = 65_536;
/// Shards of a micro-batch (`Experiment::shards`): more ranks than this
/// would each get too little of a step to pay for the all-reduce.
pub const MAX_SHARDS: usize = 64;
pub const MAX_SAMPLES: usize = 100_000;
/// The transformer's field limits (its memory is the budget's, `Limits`).
pub const MAX_CONTEXT: usize = 4096;
pub const MAX_EMBED: usize = 4096;
pub const MAX_HEADS: usize = 256;
pub const MAX_BLOCKS: usize = 64;
pub const MAX_MLP_RATIO: usize = 16;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    #[serde(default)]
    pub seed: u64,
    pub model: ModelSpec,
    pub loss: Loss,
    pub optimizer: OptimizerSpec,
    #[serde(default)]
    pub schedule: Schedule,
    pub batch_size: usize,
    #[serde(default = "one")]
    pub grad_accumulation: usize,
    /// Shards of each micro-batch: each shard's gradient is taken apart
    /// (from zero, over batch_size/shards rows) and the shards' gradients
    /// are summed in shard order, so the run's bits depend on this number
    /// and never on how many threads or workers compute the shards
    /// (ARCHITECTURE.md, "Ranks"). 1 (left out): the micro-batch whole.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub shards: usize,
    #[serde(default)]
    pub clip_grad_norm: Option<f64>,
    #[serde(default)]
    pub regularization: Option<Regularization>,
    /// The transformer's z-loss coefficient c: the objective adds
    /// c·mean(logsumexp(logits)²) (PaLM). 0 (left out) for none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub z_loss: f64,
    pub data: DataSpec,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn one() -> usize {
    1
}

fn is_one(v: &usize) -> bool {
    *v == 1
}

/// The model. Without `"kind"` (or with `"kind": "mlp"`) it is the
/// multilayer perceptron of `inputs` and `layers`, written exactly as
/// before the transformer came, so every link, checkpoint and config
/// still means the same run. `"kind": "gpt"` is the character-level
/// transformer (`GptSpec`); `inputs` and `layers` are then 0 and empty,
/// and code that only the MLP has (its GPU engine, its views) checks
/// `gpt` first (ARCHITECTURE.md, "Two kinds of model, one house").
#[derive(Clone, Debug, PartialEq)]
pub struct ModelSpec {
    pub inputs: usize,
    pub layers: Vec<LayerSpec>,
    pub gpt: Option<GptSpec>,
}

/// `"model": {"kind": "mlp", …}`, as written before `kind` existed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MlpFields {
    inputs: usize,
    layers: Vec<LayerSpec>,
}

/// nanoGPT's model (`"model": {"kind": "gpt", …}`), documented in
/// docs/experiment.md.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GptSpec {
    /// Tokens; must equal the data's vocabulary.
    pub vocab_size: usize,
    /// T, tokens per window.
    pub context: usize,
    /// C, the model width.
    pub embed: usize,
    /// H; C must be a multiple of H.
    pub heads: usize,
    /// L, transformer blocks.
    pub blocks: usize,
    /// The MLP's hidden width as a multiple of C.
    #[serde(default = "four")]
    pub mlp_ratio: usize,
    /// The output head is the token embedding.
    #[serde(default = "yes")]
    pub tie_embeddings: bool,
    /// LayerNorm over the head dimension on q and k.
    #[serde(default)]
    pub qk_layernorm: bool,
}

fn four() -> usize {
    4
}
fn yes() -> bool {
    true
}

impl GptSpec {
    pub fn shape(&self) -> crate::model::gpt::GptShape {
        crate::model::gpt::GptShape {
            vocab_size: self.vocab_size,
            context: self.context,
            embed: self.embed,
            heads: self.heads,
            blocks: self.blocks,
            mlp_ratio: self.mlp_ratio,
            tie_embeddings: self.tie_embeddings,
            qk_layernorm: self.qk_layernorm,
        }
    }
}

impl Serialize for ModelSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Tagged<'a> {
            kind: &'static str,
            #[serde(flatten)]
            gpt: &'a GptSpec,
        }
        match &self.gpt {
            Some(gpt) => Tagged { kind: "gpt", gpt }.serialize(s),
            None => MlpFields { inputs: self.inputs, layers: self.layers.clone() }.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ModelSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<ModelSpec, D::Error> {
        use serde::de::Error as _;
        // `kind` picks the fields, so the object is read as a map first;
        // `UniqueMap` refuses a repeated key that a plain map would drop.
        let mut map = crate::json::UniqueMap::deserialize(d)?.0;
        let kind = match map.remove("kind") {
            None => "mlp".to_string(),
            Some(serde_json::Value::String(kind)) => kind,
            Some(other) => return Err(D::Error::custom(format!("model.kind must be \"mlp\" or \"gpt\", got {other}"))),
        };
        let value = serde_json::Value::Object(map);
        match kind.as_str() {
            "mlp" => {
                let m: MlpFields =
                    serde_json::from_value(value).map_err(|e| D::Error::custom(format!("model: {e}")))?;
                Ok(ModelSpec { inputs: m.inputs, layers: m.layers, gpt: None })
            }
            "gpt" => {
                let g: GptSpec = serde_json::from_value(value).map_err(|e| D::Error::custom(format!("model: {e}")))?;
                Ok(ModelSpec { inputs: 0, layers: Vec::new(), gpt: Some(g) })
            }
            other => {
                Err(D::Error::custom(format!("unknown variant `{other}` for model.kind, expected `mlp` or `gpt`")))
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerSpec {
    pub units: usize,
    pub activation: Activation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    Linear,
    Relu,
    LeakyRelu,
    Tanh,
    Sigmoid,
    GeluTanh,
    Silu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Loss {
    Mse,
    BceWithLogits,
    CrossEntropy,
}

impl Loss {
    /// The name the experiment JSON uses (`"cross_entropy"`).
    pub fn name(self) -> &'static str {
        match self {
            Loss::Mse => "mse",
            Loss::BceWithLogits => "bce_with_logits",
            Loss::CrossEntropy => "cross_entropy",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Regularization {
    pub kind: RegularizationKind,
    pub rate: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegularizationKind {
    L1,
    L2,
}

impl Experiment {
    /// Parses and validates; the error names the field and its position.
    pub fn from_json(text: &str) -> Result<Experiment> {
        // Strict first (`json`): the model's fields are read through a map,
        // where serde_json alone would keep the last of a repeated key.
        let experiment: Experiment = crate::json::from_str(text).map_err(Error::Experiment)?;
        experiment.validate()?;
        Ok(experiment)
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an experiment always serialises")
    }

    /// Whether going from `self` to `to` changes only what a running
    /// engine can take in place: the learning rate and schedule, the
    /// optimizer's hyperparameters (same optimizer, and for SGD momentum
    /// staying on or off, so its state keeps its layout), clipping and
    /// regularization. Anything else (model, loss, batch, data, seed)
    /// needs the run rebuilt from its state.
    pub fn retunable_to(&self, to: &Experiment) -> bool {
        let same_state = self.optimizer.name() == to.optimizer.name()
            && self.optimizer.state_copies() == to.optimizer.state_copies();
        same_state
            && self.seed == to.seed
            && self.model == to.model
            && self.loss == to.loss
            && self.batch_size == to.batch_size
            && self.grad_accumulation == to.grad_accumulation
            && self.shards == to.shards
            && self.data == to.data
    }

    /// Keeps `shards` a divisor of `batch_size` after the batch changed:
    /// the largest divisor not above it (a batch of 12 with 8 shards gets
    /// 6, of 2 gets 2).
    pub fn fit_shards(&mut self) {
        let most = self.shards.clamp(1, self.batch_size.max(1));
        self.shards = (1..=most).rev().find(|s| self.batch_size.is_multiple_of(*s)).unwrap_or(1);
    }

    /// Units of the output layer (the transformer's: its vocabulary).
    pub fn outputs(&self) -> usize {
        match &self.model.gpt {
            Some(gpt) => gpt.vocab_size,
            None => self.model.layers.last().map_or(0, |l| l.units),
        }
    }

    /// The transformer's spec; None for the MLP.
    pub fn gpt(&self) -> Option<&GptSpec> {
        self.model.gpt.as_ref()
    }

    /// Widths of every layer boundary: inputs, then each layer's units.
    /// FLOPs of one optimizer step's forwards and backwards, all its
    /// micro-batches: an MLP's from its widths, a transformer's from its
    /// shape (`GptShape::step_flops`).
    pub fn step_flops(&self) -> (f64, f64) {
        let rows = self.batch_size * self.grad_accumulation;
        match self.gpt() {
            Some(g) => g.shape().step_flops(rows),
            None => crate::engine::profile::step_flops(&self.widths(), self.batch_size, self.grad_accumulation),
        }
    }

    pub fn widths(&self) -> Vec<usize> {
        std::iter::once(self.model.inputs).chain(self.model.layers.iter().map(|l| l.units)).collect()
    }

    pub fn validate(&self) -> Result<()> {
        crate::validate::experiment(self)
    }
}

#[cfg(test)]
mod tests;
