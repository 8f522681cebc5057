//! Step-by-phase mode: one optimizer step taken one phase at a time
//! (forward → backward for each micro-batch, then the optimizer), with
//! the tensors each phase produced summarised per layer. Both engines
//! produce the raw tensors; the summaries are built here, once.

use serde::{Deserialize, Serialize};

use super::StepMetrics;
use crate::model::Layout;
use crate::stats::{tensor_stats, TensorStats};

/// A phase of one optimizer step, as the page advances it.
/// Where one step of an MLP or conv net spent its forward and backward,
/// layer by layer (all its micro-batches): milliseconds from the clock
/// around each layer's call, and around the loss's forward and its
/// gradient. They sit inside the step's forward and backward phases; what
/// they do not account for (the batch's rows, regularization, the
/// bookkeeping between calls) stays the phase's own, so a table of them
/// adds up to the phases it splits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayerTimes {
    /// Per layer, in `model.layers` order.
    pub forward: Vec<f64>,
    pub backward: Vec<f64>,
    pub loss_forward: f64,
    pub loss_backward: f64,
}

impl LayerTimes {
    /// Sized for `layers`, every time 0 (kept where already so).
    pub(crate) fn sized(&mut self, layers: usize) {
        if self.forward.len() != layers {
            self.forward = vec![0.0; layers];
            self.backward = vec![0.0; layers];
        }
    }

    /// Adds `other` (another step's) into these.
    pub fn add(&mut self, other: &LayerTimes) {
        self.sized(other.forward.len());
        for (a, b) in self.forward.iter_mut().zip(&other.forward) {
            *a += b;
        }
        for (a, b) in self.backward.iter_mut().zip(&other.backward) {
            *a += b;
        }
        self.loss_forward += other.loss_forward;
        self.loss_backward += other.loss_backward;
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepPhase {
    /// Forward pass of micro-batch `micro` (data loading included).
    Forward { micro: usize },
    /// Backward pass of micro-batch `micro` (regularization after the last).
    Backward { micro: usize },
    /// Clipping, learning rate and the update.
    Optimizer,
}

impl StepPhase {
    /// The phase after this one, for a step of `micro_batches` micro-batches.
    pub fn next(self, micro_batches: usize) -> StepPhase {
        match self {
            StepPhase::Forward { micro } => StepPhase::Backward { micro },
            StepPhase::Backward { micro } if micro + 1 < micro_batches => StepPhase::Forward { micro: micro + 1 },
            StepPhase::Backward { .. } => StepPhase::Optimizer,
            StepPhase::Optimizer => StepPhase::Forward { micro: 0 },
        }
    }

    /// "forward", "backward" or "optimizer".
    pub fn name(self) -> &'static str {
        match self {
            StepPhase::Forward { .. } => "forward",
            StepPhase::Backward { .. } => "backward",
            StepPhase::Optimizer => "optimizer",
        }
    }
}

impl std::fmt::Display for StepPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepPhase::Forward { micro } | StepPhase::Backward { micro } => {
                write!(f, "{} (micro-batch {})", self.name(), micro + 1)
            }
            StepPhase::Optimizer => f.write_str("optimizer"),
        }
    }
}

/// Statistics and L2 norm of one tensor of a layer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NamedStats {
    /// What the tensor is: "activation", "pre-activation", "weight grad", …
    pub name: std::borrow::Cow<'static, str>,
    pub stats: TensorStats,
    /// L2 norm of the finite values (f64 sum).
    pub norm: f64,
}

/// One layer's tensors after a phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerPhase {
    pub layer: usize,
    /// What the row is, where it is not a dense layer: a transformer's
    /// named tensor or op output ("transformer.h.0.attn.c_attn.weight",
    /// "block 1 · attention P").
    #[serde(default)]
    pub label: Option<String>,
    pub tensors: Vec<NamedStats>,
    /// After the optimizer: ‖Δθ‖ / ‖θ‖ over the layer's weights and bias
    /// (θ after the update). A healthy run is often near 1e-3.
    pub update_ratio: Option<f64>,
}

/// What one phase did, summarised for the page.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    pub phase: StepPhase,
    /// The optimizer step this phase belongs to (0-based).
    pub step: u64,
    pub micro_batches: usize,
    /// Forward: this micro-batch's loss.
    pub loss: Option<f32>,
    /// Optimizer: the finished step's metrics (loss, gradient norm, lr).
    pub metrics: Option<StepMetrics>,
    pub layers: Vec<LayerPhase>,
    /// A transformer's forward and backward stop between a block's ops:
    /// which part of the phase this was. None: the whole phase ran.
    #[serde(default)]
    pub part: Option<PhasePart>,
}

/// One stop of a phase taken in parts (a transformer's embedding, a
/// block's op, its head).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhasePart {
    /// "block 2 · attention".
    pub name: String,
    /// Its place among the phase's `count` parts (0-based).
    pub index: usize,
    pub count: usize,
    /// The next part's name, while the phase is not finished.
    pub next: Option<String>,
    /// How many of the report's rows this part produced: its last.
    pub added: usize,
}

impl PhaseReport {
    /// The phase that comes next: this one again while it has parts left.
    pub fn next(&self) -> StepPhase {
        match &self.part {
            Some(part) if part.next.is_some() => self.phase,
            _ => self.phase.next(self.micro_batches),
        }
    }

    /// What comes next, in words: "forward (micro-batch 1) · block 2 · ln_2".
    pub fn next_label(&self) -> String {
        match self.part.as_ref().and_then(|p| p.next.as_ref()) {
            Some(part) => format!("{} · {part}", self.phase),
            None => self.next().to_string(),
        }
    }

    /// What ran, in words: "backward (micro-batch 1) · block 3 · MLP".
    pub fn label(&self) -> String {
        match &self.part {
            Some(part) => format!("{} · {}", self.phase, part.name),
            None => self.phase.to_string(),
        }
    }
}

/// The raw tensors a phase produced, as an engine holds them.
pub enum PhaseTensors<'a> {
    /// z (when stored: not under activation checkpointing) and a of
    /// every layer, each (B, O_l).
    Forward { z: Option<&'a [Vec<f32>]>, a: &'a [Vec<f32>] },
    /// The accumulated gradients (P).
    Backward { grads: &'a [f32] },
    /// Parameters after the update, the update, and the optimizer's
    /// moments by name (each (P)).
    Optimizer { params: &'a [f32], updates: &'a [f32], moments: Vec<(&'static str, &'a [f32])> },
    /// A transformer's forward: each op's output, in forward order
    /// (`GptActivations::op_outputs`).
    Ops(Vec<(String, &'a [f32])>),
}

/// A row of one tensor, outside a layer (a transformer's residual-stream
/// gradient in step-by-phase).
pub(crate) fn tensor_row(layer: usize, label: String, name: &'static str, values: &[f32]) -> LayerPhase {
    LayerPhase { layer, label: Some(label), tensors: vec![named(name, values)], update_ratio: None }
}

fn named(name: &'static str, values: &[f32]) -> NamedStats {
    let norm = values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt();
    NamedStats { name: name.into(), stats: tensor_stats(values), norm }
}

/// A transformer's summaries: a row per op output (forward) or per named
/// tensor (backward, optimizer), in forward and buffer order.
fn summarise_named(layout: &Layout, tensors: &PhaseTensors) -> Vec<LayerPhase> {
    let row = |i: usize, label: String, tensors: Vec<NamedStats>, update_ratio: Option<f64>| LayerPhase {
        layer: i,
        label: Some(label),
        tensors,
        update_ratio,
    };
    match tensors {
        PhaseTensors::Ops(outputs) => outputs
            .iter()
            .enumerate()
            .map(|(i, (name, v))| row(i, name.clone(), vec![named("output", v)], None))
            .collect(),
        PhaseTensors::Forward { .. } => Vec::new(),
        PhaseTensors::Backward { grads } => layout
            .tensors()
            .into_iter()
            .enumerate()
            .map(|(i, t)| row(i, t.name, vec![named("gradient", &grads[t.offset..t.offset + t.len])], None))
            .collect(),
        PhaseTensors::Optimizer { params, updates, moments } => layout
            .tensors()
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let range = t.offset..t.offset + t.len;
                let update = named("update", &updates[range.clone()]);
                let weight = named("parameters", &params[range.clone()]);
                let ratio = (weight.norm > 0.0).then(|| update.norm / weight.norm);
                let mut list = vec![update, weight];
                list.extend(moments.iter().map(|(name, m)| named(name, &m[range.clone()])));
                row(i, t.name, list, ratio)
            })
            .collect(),
    }
}

/// Per-layer summaries of `tensors` (for a transformer, per op output or
/// named tensor: `summarise_named`).
pub fn summarise(layout: &Layout, tensors: &PhaseTensors) -> Vec<LayerPhase> {
    if layout.gpt.is_some() {
        return summarise_named(layout, tensors);
    }
    layout
        .layers
        .iter()
        .enumerate()
        .map(|(l, shape)| {
            let weights = shape.weight_offset..shape.bias_offset;
            let bias = shape.bias_offset..shape.end();
            let all = shape.weight_offset..shape.end();
            let mut update_ratio = None;
            let list = match tensors {
                PhaseTensors::Forward { z: Some(z), a } => {
                    vec![named("pre-activation", &z[l]), named("activation", &a[l])]
                }
                PhaseTensors::Forward { z: None, a } => vec![named("activation", &a[l])],
                PhaseTensors::Ops(_) => Vec::new(),
                PhaseTensors::Backward { grads } => vec![
                    named("weight grad", &grads[weights]),
                    named("bias grad", &grads[bias]),
                    named("layer grad", &grads[all]),
                ],
                PhaseTensors::Optimizer { params, updates, moments } => {
                    let update = named("update", &updates[all.clone()]);
                    let weight = named("parameters", &params[all.clone()]);
                    if weight.norm > 0.0 {
                        update_ratio = Some(update.norm / weight.norm);
                    }
                    let mut list = vec![update, weight];
                    list.extend(moments.iter().map(|(name, m)| named(name, &m[all.clone()])));
                    list
                }
            };
            LayerPhase { layer: l, label: None, tensors: list, update_ratio }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_cycle_through_micro_batches() {
        let mut p = StepPhase::Forward { micro: 0 };
        let mut seen = Vec::new();
        for _ in 0..6 {
            seen.push(p.to_string());
            p = p.next(2);
        }
        assert_eq!(
            seen,
            [
                "forward (micro-batch 1)",
                "backward (micro-batch 1)",
                "forward (micro-batch 2)",
                "backward (micro-batch 2)",
                "optimizer",
                "forward (micro-batch 1)"
            ]
        );
        assert_eq!(StepPhase::Backward { micro: 0 }.next(1), StepPhase::Optimizer);
    }

    #[test]
    fn update_ratio_is_the_norm_ratio() {
        let layout = Layout { layers: vec![crate::model::LayerShape::dense(1, 1, 0)], parameter_count: 2, gpt: None };
        // weight 3, bias 4: ‖θ‖ = 5; update (0.03, 0.04): ‖Δθ‖ = 0.05.
        let params = [3.0, 4.0];
        let updates = [0.03, 0.04];
        let layers =
            summarise(&layout, &PhaseTensors::Optimizer { params: &params, updates: &updates, moments: vec![] });
        let ratio = layers[0].update_ratio.unwrap();
        assert!((ratio - 0.01).abs() < 1e-9, "{ratio}");
        assert_eq!(layers[0].tensors[0].name, "update");
    }
}
