//! The experiment: one JSON object that the page builds, shares in its URL,
//! stores in every checkpoint, and the CLI reads. Documented field by field
//! in `docs/experiment.md`.
//!
//! Parsing is strict: an unknown field or value, or a key given twice at
//! any depth (`crate::json`), is an error that names it, so a typo never
//! silently trains something else. `validate` then checks
//! every value against its range and against the other fields
//! (`Experiment::from_json` and `Experiment::validate` live there: this
//! module is the format alone and imports nothing of the crate above
//! `json`, so every other module can build on it).

use serde::{Deserialize, Serialize};

mod augment_spec;
mod data_spec;
mod image_shape;
mod layer_spec;
mod optimizer_spec;

pub use augment_spec::*;
pub use data_spec::*;
pub use image_shape::*;
pub use layer_spec::*;
pub use optimizer_spec::*;

/// Largest width of any layer (inputs included): keeps a typo such as
/// `"units": 1600000` from allocating gigabytes in the browser.
pub const MAX_UNITS: usize = 4096;
pub const MAX_LAYERS: usize = 17;
/// An input image's channels and sides (`model.input_shape`).
pub const MAX_CHANNELS: usize = 64;
pub const MAX_SIDE: usize = 512;
/// Floats of one row's image, at the input and after any conv or pool
/// layer (a 16 × 512 × 512 image); the memory budget decides the rest.
pub const MAX_IMAGE_FLOATS: usize = 1 << 22;
/// A conv layer's filters, and a conv or pool window's side and stride.
pub const MAX_FILTERS: usize = 256;
pub const MAX_KERNEL: usize = 16;
/// A conv layer's patch matrix (C·K·K × OH·OW floats, one image's).
pub const MAX_PATCH_FLOATS: usize = 1 << 24;
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
/// Most distinct characters a text may have (the transformer's vocabulary
/// and its embedding rows).
pub const MAX_VOCABULARY: usize = 4096;

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
    /// [C, H, W]: each row's inputs are an image in (C, H, W) order, for
    /// conv and pool layers (ARCHITECTURE.md, "Convolutional layers").
    pub input_shape: Option<[usize; 3]>,
    pub layers: Vec<LayerSpec>,
    pub gpt: Option<GptSpec>,
}

/// `"model": {"kind": "mlp", …}`, as written before `kind` existed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MlpFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inputs: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input_shape: Option<[usize; 3]>,
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
            None => MlpFields { inputs: Some(self.inputs), input_shape: self.input_shape, layers: self.layers.clone() }
                .serialize(s),
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
                let inputs = match (m.inputs, m.input_shape) {
                    (Some(inputs), None) => inputs,
                    (inputs, Some([c, h, w])) => {
                        let pixels = c.checked_mul(h).and_then(|ch| ch.checked_mul(w)).unwrap_or(usize::MAX);
                        if inputs.is_some_and(|i| i != pixels) {
                            return Err(D::Error::custom(format!(
                                "model.inputs is {} but model.input_shape [{c}, {h}, {w}] holds C·H·W = {pixels}",
                                inputs.unwrap_or(0)
                            )));
                        }
                        pixels
                    }
                    (None, None) => return Err(D::Error::custom("model: missing field `inputs`")),
                };
                Ok(ModelSpec { inputs, input_shape: m.input_shape, layers: m.layers, gpt: None })
            }
            "gpt" => {
                let g: GptSpec = serde_json::from_value(value).map_err(|e| D::Error::custom(format!("model: {e}")))?;
                Ok(ModelSpec { inputs: 0, input_shape: None, layers: Vec::new(), gpt: Some(g) })
            }
            other => {
                Err(D::Error::custom(format!("unknown variant `{other}` for model.kind, expected `mlp` or `gpt`")))
            }
        }
    }
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
}

#[cfg(test)]
mod tests;
