//! The transformer inside the CPU engine: the model kind's part of a step
//! (`Gpt::forward`/`backward` over a micro-batch of windows) and its
//! memory. Everything else of the step (the data, gradient accumulation,
//! regularization, clipping, the optimizer, the phases and their clock) is
//! the engine's own, shared with the MLP (ARCHITECTURE.md, "Two kinds of
//! model, one house").

use crate::model::gpt::{Gpt, GptActivations, GptScratch, GptShape};
use crate::rng::{stream, Rng};

pub(super) struct GptNet {
    pub model: Gpt,
    pub acts: GptActivations,
    pub scratch: GptScratch,
    /// The micro-batch's token ids and next tokens (B·T).
    ids: Vec<u32>,
    next: Vec<u32>,
    /// The z-loss of this step's micro-batches, summed.
    pub z_sum: f32,
}

/// Token ids from a table's f32 cells (exact for any vocabulary allowed).
fn ids(cells: &[f32], out: &mut Vec<u32>) {
    out.clear();
    out.extend(cells.iter().map(|&x| x as u32));
}

impl GptNet {
    pub fn new(shape: GptShape) -> GptNet {
        GptNet {
            model: Gpt::new(shape),
            acts: GptActivations::default(),
            scratch: GptScratch::default(),
            ids: Vec::new(),
            next: Vec::new(),
            z_sum: 0.0,
        }
    }

    /// Forward over a micro-batch (`inputs` and `targets` as the batcher
    /// serves them): the cross-entropy; the z-loss adds into `z_sum`.
    pub fn forward(&mut self, params: &[f32], inputs: &[f32], targets: &[f32]) -> f32 {
        ids(inputs, &mut self.ids);
        ids(targets, &mut self.next);
        let (ce, z) = self.model.forward(&mut self.acts, params, &self.ids, &self.next);
        self.z_sum += z;
        ce
    }

    /// Backward of the last forward into `grads`, scaled by `scale` (1/k).
    pub fn backward(&mut self, grads: &mut [f32], params: &[f32], z_loss: f32, scale: f32) {
        let (acts, scratch) = (&mut self.acts, &mut self.scratch);
        self.model.backward(grads, acts, scratch, params, &self.ids, &self.next, z_loss, scale);
    }

    /// (activations, attention probabilities, backward scratch) in bytes,
    /// from the buffers as they are.
    pub fn memory(&self) -> (u64, u64, u64) {
        let (acts, att) = self.acts.bytes();
        (acts, att, self.scratch.bytes())
    }
}

/// How to draw each next token (`stepscope sample`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    pub tokens: usize,
    /// Logits are divided by it; must be > 0.
    pub temperature: f32,
    /// Only the k most likely tokens are drawn from (nanoGPT's `top_k`).
    pub top_k: Option<usize>,
    pub seed: u64,
}

/// nanoGPT's `generate`: the model reads the last ≤ T tokens of `prompt`
/// plus what it has written, and draws the next token from
/// softmax(logits/temperature) over the top k, with the seed's sampling
/// stream. Returns the new tokens; the same seed gives the same tokens.
pub fn sample(model: &Gpt, params: &[f32], prompt: &[u32], how: &Sampling) -> Vec<u32> {
    let (t_max, v) = (model.shape.context, model.shape.vocab_size);
    let mut rng = Rng::new(how.seed, stream::SAMPLE);
    let mut tokens = prompt.to_vec();
    let mut acts = GptActivations::default();
    let mut probs = vec![0.0f64; v];
    for _ in 0..how.tokens {
        let window = &tokens[tokens.len().saturating_sub(t_max)..];
        let t = window.len();
        let targets = vec![0u32; t];
        model.forward_windows(&mut acts, params, window, &targets, t);
        let logits = &acts.logits[(t - 1) * v..t * v];
        // The k-th largest logit: below it, probability 0 (as nanoGPT's -inf).
        let mut sorted: Vec<f32> = logits.to_vec();
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        let floor = how.top_k.map_or(f32::NEG_INFINITY, |k| sorted[k.clamp(1, v) - 1]);
        let max = sorted[0] as f64 / how.temperature as f64;
        let mut sum = 0.0;
        for (p, &x) in probs.iter_mut().zip(logits) {
            *p = if x < floor { 0.0 } else { libm::exp(x as f64 / how.temperature as f64 - max) };
            sum += *p;
        }
        let mut u = rng.next_f64() * sum;
        let mut next = v - 1;
        for (i, &p) in probs.iter().enumerate() {
            if p > 0.0 && u < p {
                next = i;
                break;
            }
            u -= p;
        }
        // Rounding can leave u past the last token with a probability:
        // take the last such token, never a zero-probability one.
        if probs[next] == 0.0 {
            next = probs.iter().rposition(|&p| p > 0.0).unwrap_or(0);
        }
        tokens.push(next as u32);
    }
    tokens.split_off(prompt.len())
}
