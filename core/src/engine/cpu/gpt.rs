//! The transformer inside the CPU engine: the model kind's part of a step
//! (`Gpt::forward`/`backward` over a micro-batch of windows) and its
//! memory. Everything else of the step (the data, gradient accumulation,
//! regularization, clipping, the optimizer, the phases and their clock) is
//! the engine's own, shared with the MLP (ARCHITECTURE.md, "Two kinds of
//! model, one house").

use crate::engine::phases::{summarise, tensor_row, LayerPhase, PhasePart, PhaseTensors, StepPhase};
use crate::error::{room, Result};
use crate::model::gpt::{Gpt, GptActivations, GptScratch, GptShape, OpTimes, Stage, BLOCK_OPS, OP_OUTPUTS};
use crate::model::Layout;
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
    /// The z-loss of the last forward.
    pub last_z: f32,
    /// Where this step's forwards and backwards spent their time so far
    /// (summed over its micro-batches), and the last whole step's: (step,
    /// forward, backward).
    pub times: (OpTimes, OpTimes),
    pub last_times: Option<(u64, OpTimes, OpTimes)>,
}

/// Token ids from a table's f32 cells (exact for any vocabulary allowed).
fn ids(cells: &[f32], out: &mut Vec<u32>) {
    out.clear();
    out.extend(cells.iter().map(|&x| x as u32));
}

impl GptNet {
    /// The model with every buffer a step of `batch` windows uses,
    /// allocated now (an error, not an abort, where the memory is not
    /// there).
    pub fn new(shape: GptShape, batch: usize, checkpointing: bool) -> Result<GptNet> {
        let tokens = batch.saturating_mul(shape.context);
        Ok(GptNet {
            model: Gpt::new(shape),
            acts: GptActivations::allocate(&shape, batch, checkpointing)?,
            scratch: GptScratch::allocate(&shape, batch)?,
            ids: room(tokens, "the batch's token ids")?,
            next: room(tokens, "the batch's token ids")?,
            z_sum: 0.0,
            last_z: 0.0,
            times: Default::default(),
            last_times: None,
        })
    }

    /// Token ids the micro-batch's buffers hold room for.
    pub fn ids_capacity(&self) -> usize {
        self.ids.capacity() + self.next.capacity()
    }

    /// Forward's and backward's stages (`Gpt::stages`).
    pub fn stages(&self) -> usize {
        self.model.stages()
    }

    /// Forward's stage `i` over a micro-batch (`inputs` and `targets` as
    /// the batcher serves them): after the last, the cross-entropy, the
    /// z-loss added into `z_sum`.
    pub fn forward_stage(&mut self, params: &[f32], inputs: &[f32], targets: &[f32], i: usize) -> Option<f32> {
        if i == 0 {
            ids(inputs, &mut self.ids);
            ids(targets, &mut self.next);
        }
        let (ce, z) = self.model.forward_stage(&mut self.acts, params, &self.ids, &self.next, i)?;
        self.z_sum += z;
        self.last_z = z;
        self.times.0.add(&self.acts.times);
        Some(ce)
    }

    /// Backward's stage `i` of the last forward into `grads`, scaled by
    /// `scale` (1/k).
    pub fn backward_stage(&mut self, grads: &mut [f32], params: &[f32], z_loss: f32, scale: f32, i: usize) {
        let (acts, scratch) = (&mut self.acts, &mut self.scratch);
        self.model.backward_stage(grads, acts, scratch, params, &self.ids, &self.next, z_loss, scale, i);
        if i + 1 == self.model.stages() {
            self.times.1.add(&self.scratch.times);
        }
    }

    /// The last micro-batch's forward again, every stage, for a profiled
    /// step's burst: the same activations (the real forward checked
    /// them), the step's z-loss and op times left as they were.
    pub fn forward_again(&mut self, params: &[f32]) {
        for i in 0..self.model.stages() {
            let out = self.model.forward_stage(&mut self.acts, params, &self.ids, &self.next, i);
            std::hint::black_box(out);
        }
    }

    /// The last micro-batch's backward again into `grads`, every stage,
    /// for a profiled step's burst (the caller restores `grads`).
    pub fn backward_again(&mut self, grads: &mut [f32], params: &[f32], z_loss: f32, scale: f32) {
        let (acts, scratch) = (&mut self.acts, &mut self.scratch);
        for i in 0..self.model.stages() {
            self.model.backward_stage(grads, acts, scratch, params, &self.ids, &self.next, z_loss, scale, i);
        }
    }

    /// A step begins: its op times start from zero.
    pub fn begin_step(&mut self) {
        self.z_sum = 0.0;
        self.times = Default::default();
    }

    /// A step ended: its op times are the last step's.
    pub fn end_step(&mut self, step: u64) {
        let (f, b) = std::mem::take(&mut self.times);
        self.last_times = Some((step, f, b));
    }

    /// Step-by-phase's rows after stage `i` of a forward or backward, and
    /// what that stage was. Forward: every op output so far, in forward
    /// order. Backward: the gradient of each tensor backward has reached,
    /// in the order it reached them, after the residual stream's gradient
    /// where backward stands.
    pub fn phase_rows(
        &self,
        layout: &Layout,
        phase: StepPhase,
        i: usize,
        grads: &[f32],
    ) -> (Vec<LayerPhase>, PhasePart) {
        let m = &self.model;
        let count = m.stages();
        let forward = matches!(phase, StepPhase::Forward { .. });
        let at = |i: usize| if forward { m.forward_stage_at(i) } else { m.backward_stage_at(i) };
        let (rows, added) = if forward {
            let rows = summarise(layout, &PhaseTensors::Ops(self.acts.op_outputs_through(at(i))));
            let added = match at(i) {
                Stage::Embedding => 1,
                Stage::Block { op, .. } if self.acts.checkpointing && op + 1 == BLOCK_OPS.len() => 1,
                Stage::Block { op, .. } => OP_OUTPUTS[op].len(),
                Stage::Head => 2,
            };
            (rows, added)
        } else {
            let all = summarise(layout, &PhaseTensors::Backward { grads });
            let reached = m.tensors_through_backward(i);
            let before = if i == 0 { 0 } else { m.tensors_through_backward(i - 1).len() };
            let (dx, place) = m.stream_gradient(&self.scratch, i);
            let mut rows =
                vec![tensor_row(0, format!("∂objective/∂x at {place} (the residual stream)"), "gradient", dx)];
            rows.extend(reached.iter().map(|&j| all[j].clone()));
            (rows, reached.len() - before)
        };
        let next = (i + 1 < count).then(|| at(i + 1).name());
        (rows, PhasePart { name: at(i).name(), index: i, count, next, added })
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

/// One token a `Sampler` wrote: its id, the probability it was drawn
/// with (softmax(logits/temperature) over the top k), and the most likely
/// tokens of that distribution with theirs, most likely first.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SampledToken {
    pub token: u32,
    pub probability: f32,
    pub top: Vec<(u32, f32)>,
}

/// nanoGPT's `generate`, a token at a time (the page writes a sample in
/// parts between training frames): the model reads the last ≤ T tokens of
/// the prompt plus what it has written, and draws the next token from
/// softmax(logits/temperature) over the top k, with the seed's sampling
/// stream. The same seed gives the same tokens.
pub struct Sampler {
    tokens: Vec<u32>,
    prompt: usize,
    how: Sampling,
    rng: Rng,
    acts: GptActivations,
    probs: Vec<f64>,
    /// `last_margin`.
    margin: f64,
    /// The last draw's random point in [0, 1) (`redraw`).
    point: f64,
}

impl Sampler {
    pub fn new(prompt: &[u32], how: &Sampling) -> Sampler {
        Sampler {
            tokens: prompt.to_vec(),
            prompt: prompt.len(),
            how: *how,
            rng: Rng::new(how.seed, stream::SAMPLE),
            acts: GptActivations::default(),
            probs: Vec::new(),
            margin: 1.0,
            point: 0.0,
        }
    }

    /// Whether `how.tokens` tokens are written.
    pub fn done(&self) -> bool {
        self.tokens.len() - self.prompt >= self.how.tokens
    }

    /// The tokens written so far.
    pub fn written(&self) -> &[u32] {
        &self.tokens[self.prompt..]
    }

    /// Writes the next token, with `shown` alternatives in its `top`: the
    /// CPU's forward over `window`, then `draw`.
    pub fn next_token(&mut self, model: &Gpt, params: &[f32], shown: usize) -> SampledToken {
        let v = model.shape.vocab_size;
        let window = self.window(model.shape.context).to_vec();
        let t = window.len();
        let targets = vec![0u32; t];
        model.forward_windows(&mut self.acts, params, &window, &targets, t);
        let logits = self.acts.logits[(t - 1) * v..t * v].to_vec();
        self.draw(&logits, shown)
    }

    /// What the model reads for the next token: the last ≤ `context`
    /// tokens of the prompt and what is written.
    pub fn window(&self, context: usize) -> &[u32] {
        &self.tokens[self.tokens.len().saturating_sub(context)..]
    }

    /// Draws the next token from the logits after `window` (another
    /// engine's forward: `gpu::GpuSampler`) and writes it.
    pub fn draw(&mut self, logits: &[f32], shown: usize) -> SampledToken {
        let v = logits.len();
        let mut probs = std::mem::take(&mut self.probs);
        let sum = self.probabilities(logits, &mut probs);
        let r = self.rng.next_f64();
        let next = pick(&probs, r * sum);
        // How far the draw fell from the edges of its token's share, as a
        // share of the whole.
        let start: f64 = probs[..next].iter().sum();
        self.margin = (r * sum - start).min(start + probs[next] - r * sum).max(0.0) / sum;
        self.point = r;
        let mut top = Vec::new();
        if shown > 0 {
            let mut order: Vec<usize> = (0..v).collect();
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
            top = order.iter().take(shown).map(|&i| (i as u32, (probs[i] / sum) as f32)).collect();
        }
        let probability = (probs[next] / sum) as f32;
        self.probs = probs;
        self.tokens.push(next as u32);
        SampledToken { token: next as u32, probability, top }
    }

    /// softmax(logits/temperature) over the top k, unnormalised, into
    /// `probs`; returns their sum.
    fn probabilities(&self, logits: &[f32], probs: &mut Vec<f64>) -> f64 {
        let (v, how) = (logits.len(), &self.how);
        // The k-th largest logit: below it, probability 0 (as nanoGPT's -inf).
        let mut sorted: Vec<f32> = logits.to_vec();
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        let floor = how.top_k.map_or(f32::NEG_INFINITY, |k| sorted[k.clamp(1, v) - 1]);
        let max = sorted[0] as f64 / how.temperature as f64;
        probs.clear();
        probs.resize(v, 0.0);
        let mut sum = 0.0;
        for (p, &x) in probs.iter_mut().zip(logits) {
            *p = if x < floor { 0.0 } else { libm::exp(x as f64 / how.temperature as f64 - max) };
            sum += *p;
        }
        sum
    }

    /// The token the last draw's random point picks from other logits for
    /// the same window (the CPU's, to check a GPU draw that fell close to
    /// an edge).
    pub fn redraw(&self, logits: &[f32]) -> u32 {
        let mut probs = Vec::new();
        let sum = self.probabilities(logits, &mut probs);
        pick(&probs, self.point * sum) as u32
    }

    /// How close the last draw fell to the edge of its token's share (a
    /// share of the whole; 1 before the first). Logits off by at most δ
    /// move the edges by at most about 2δ/temperature of the whole, so a
    /// margin above that means the same token from those logits.
    pub fn last_margin(&self) -> f64 {
        self.margin
    }
}

/// The token whose share of the cumulative `probs` holds `u`. Rounding can
/// leave u past the last token with a probability: then the last such
/// token, never a zero-probability one.
fn pick(probs: &[f64], mut u: f64) -> usize {
    let mut next = probs.len() - 1;
    for (i, &p) in probs.iter().enumerate() {
        if p > 0.0 && u < p {
            next = i;
            break;
        }
        u -= p;
    }
    if probs[next] == 0.0 {
        next = probs.iter().rposition(|&p| p > 0.0).unwrap_or(0);
    }
    next
}

/// Writes `how.tokens` tokens after `prompt` (`Sampler`, whole); the
/// same seed gives the same tokens.
pub fn sample(model: &Gpt, params: &[f32], prompt: &[u32], how: &Sampling) -> Vec<u32> {
    let mut sampler = Sampler::new(prompt, how);
    while !sampler.done() {
        sampler.next_token(model, params, 0);
    }
    sampler.written().to_vec()
}
