//! The whole GPT, forward and backward, strung from its ops (`ops`) as
//! llm.c's `gpt2_forward`/`gpt2_backward` do, over the flat parameter
//! buffer of `GptShape::tensors`:
//!
//! x = wte[idx] + wpe; per block x = x + attn(ln_1(x)); x = x + mlp(ln_2(x));
//! logits = ln_f(x)·headᵀ (head = wte when tied); loss = mean cross-entropy
//! over the B·T positions, the objective adding z_loss·mean(lse²).

use super::layout::{GptShape, GptTensor};
use super::ops::*;

mod block;
mod buffers;
mod inspect;
mod times;

pub use block::{Stage, BLOCK_OPS};
use buffers::BlockActs;
pub use buffers::{memory_floats, GptActivations, GptScratch, OP_OUTPUTS};
pub use inspect::{inspect_window, WindowInspection};
use times::Lap;
pub use times::{OpKind, OpTimes};

/// Offsets of one block's tensors: (weight, bias) of each.
pub struct BlockAt {
    pub ln1: (usize, usize),
    pub attn: (usize, usize),
    pub attn_proj: (usize, usize),
    pub q_ln: Option<(usize, usize)>,
    pub k_ln: Option<(usize, usize)>,
    pub ln2: (usize, usize),
    pub fc: (usize, usize),
    pub fc_proj: (usize, usize),
}

/// (weight, bias) offsets by name.
fn at(tensors: &[GptTensor], name: &str) -> (usize, usize) {
    let find = |suffix: &str| tensors.iter().find(|t| t.name == format!("{name}.{suffix}")).map(|t| t.offset);
    (find("weight").expect("the layout names it"), find("bias").unwrap_or(usize::MAX))
}

/// The sizes of a batch of `rows` = B·T positions.
struct Dims {
    rows: usize,
    b: usize,
    t: usize,
    c: usize,
    h: usize,
    v: usize,
    /// The MLP's width, and the head size.
    hidden: usize,
    hs: usize,
}

pub struct Gpt {
    pub shape: GptShape,
    pub tensors: Vec<GptTensor>,
    wte: usize,
    wpe: usize,
    blocks: Vec<BlockAt>,
    ln_f: (usize, usize),
    head: usize,
}

impl Gpt {
    pub fn new(shape: GptShape) -> Gpt {
        let tensors = shape.tensors();
        let blocks = (0..shape.blocks)
            .map(|i| {
                let b = format!("transformer.h.{i}");
                BlockAt {
                    ln1: at(&tensors, &format!("{b}.ln_1")),
                    attn: at(&tensors, &format!("{b}.attn.c_attn")),
                    attn_proj: at(&tensors, &format!("{b}.attn.c_proj")),
                    q_ln: shape.qk_layernorm.then(|| at(&tensors, &format!("{b}.attn.q_ln"))),
                    k_ln: shape.qk_layernorm.then(|| at(&tensors, &format!("{b}.attn.k_ln"))),
                    ln2: at(&tensors, &format!("{b}.ln_2")),
                    fc: at(&tensors, &format!("{b}.mlp.c_fc")),
                    fc_proj: at(&tensors, &format!("{b}.mlp.c_proj")),
                }
            })
            .collect();
        let wte = at(&tensors, "transformer.wte").0;
        let head = if shape.tie_embeddings { wte } else { at(&tensors, "lm_head").0 };
        Gpt {
            wpe: at(&tensors, "transformer.wpe").0,
            ln_f: at(&tensors, "transformer.ln_f"),
            blocks,
            wte,
            head,
            tensors,
            shape,
        }
    }

    /// Where block `l`'s tensors sit in the flat buffer.
    pub fn block_at(&self, l: usize) -> &BlockAt {
        &self.blocks[l]
    }

    /// Offsets of wte, wpe, ln_f's (weight, bias) and the head's weight
    /// (wte's when tied; the head has no bias).
    pub fn embedding_and_head_at(&self) -> (usize, usize, (usize, usize), usize) {
        (self.wte, self.wpe, self.ln_f, self.head)
    }

    /// The sizes of `rows` positions in windows of `t` tokens.
    fn dims(&self, rows: usize, t: usize) -> Dims {
        let s = &self.shape;
        let (c, h) = (s.embed, s.heads);
        Dims { rows, b: rows / t, t, c, h, v: s.vocab_size, hidden: s.mlp_ratio * c, hs: c / h }
    }

    /// Forward over `inp` (B·T token ids): the cross-entropy and the z-loss
    /// (`ops::cross_entropy_forward`); `targets` the next tokens.
    pub fn forward(&self, acts: &mut GptActivations, p: &[f32], inp: &[u32], targets: &[u32]) -> (f32, f32) {
        self.forward_windows(acts, p, inp, targets, self.shape.context)
    }

    /// `forward` over windows of `t` ≤ T tokens (sampling from a short
    /// prompt): position embeddings wpe[0..t), the causal mask over t.
    pub fn forward_windows(
        &self,
        acts: &mut GptActivations,
        p: &[f32],
        inp: &[u32],
        targets: &[u32],
        t: usize,
    ) -> (f32, f32) {
        let mut losses = (0.0, 0.0);
        for i in 0..self.stages() {
            if let Some(l) = self.forward_stage_windows(acts, p, inp, targets, t, i) {
                losses = l;
            }
        }
        losses
    }

    /// Forward's stops, and backward's (`stage`): the embedding, each
    /// block's four ops, the head.
    pub fn stages(&self) -> usize {
        BLOCK_OPS.len() * self.shape.blocks + 2
    }

    /// What forward's `i`-th stage runs: the embedding first, then each
    /// block's ops in order, then the head.
    pub fn forward_stage_at(&self, i: usize) -> Stage {
        let ops = BLOCK_OPS.len();
        match i {
            0 => Stage::Embedding,
            _ if i + 1 >= self.stages() => Stage::Head,
            _ => Stage::Block { block: (i - 1) / ops, op: (i - 1) % ops },
        }
    }

    /// What backward's `i`-th stage runs: forward's stages in reverse.
    pub fn backward_stage_at(&self, i: usize) -> Stage {
        self.forward_stage_at(self.stages() - 1 - i.min(self.stages() - 1))
    }

    /// Runs forward's stage `i` over windows of T tokens (step-by-phase
    /// stops between them; `forward` runs them all): the losses after
    /// the last (the head), None before it.
    pub fn forward_stage(
        &self,
        acts: &mut GptActivations,
        p: &[f32],
        inp: &[u32],
        targets: &[u32],
        i: usize,
    ) -> Option<(f32, f32)> {
        self.forward_stage_windows(acts, p, inp, targets, self.shape.context, i)
    }

    fn forward_stage_windows(
        &self,
        acts: &mut GptActivations,
        p: &[f32],
        inp: &[u32],
        targets: &[u32],
        t: usize,
        i: usize,
    ) -> Option<(f32, f32)> {
        let d = self.dims(inp.len(), t);
        let Dims { rows, b, c, v, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        let mut lap = Lap::start();
        match self.forward_stage_at(i) {
            Stage::Embedding => {
                acts.batch = b;
                acts.times.reset(self.shape.blocks);
                sized(&mut acts.encoded, rows * c);
                encoder_forward(&mut acts.encoded, inp, w(self.wte, v * c), w(self.wpe, t * c), t, c);
                let kept = if acts.checkpointing { 1 } else { self.shape.blocks };
                acts.blocks.resize_with(kept, BlockActs::default);
                acts.outs.resize_with(if acts.checkpointing { self.shape.blocks } else { 0 }, Vec::new);
                acts.times.embedding += lap.split();
                None
            }
            Stage::Block { block: l, op } => {
                let (at, times) = (&self.blocks[l], &mut acts.times.blocks[l]);
                if acts.checkpointing {
                    let x: &[f32] = if l == 0 { &acts.encoded } else { &acts.outs[l - 1] };
                    self.block_op_forward(&mut acts.blocks[0], x, p, &d, at, times, op);
                    if op + 1 == BLOCK_OPS.len() {
                        let out = &mut acts.outs[l];
                        sized(out, rows * c);
                        out.copy_from_slice(&acts.blocks[0].res3);
                    }
                } else {
                    let (before, rest) = acts.blocks.split_at_mut(l);
                    let x: &[f32] = if l == 0 { &acts.encoded } else { &before[l - 1].res3 };
                    self.block_op_forward(&mut rest[0], x, p, &d, at, times, op);
                }
                None
            }
            Stage::Head => {
                let mut lnf = std::mem::take(&mut acts.lnf);
                let x = self.block_output(acts, self.shape.blocks);
                lnf.forward(x, w(self.ln_f.0, c), w(self.ln_f.1, c), rows, c);
                acts.lnf = lnf;
                sized(&mut acts.logits, rows * v);
                matmul_forward(&mut acts.logits, &acts.lnf.out, w(self.head, v * c), None, rows, c, v);
                sized(&mut acts.lse, rows);
                let losses = cross_entropy_forward(&mut acts.lse, &acts.logits, targets, rows, v);
                acts.times.head += lap.split();
                Some(losses)
            }
        }
    }

    /// The input of block `l` (the output of block l − 1, or the
    /// embedding for block 0); `l` = L gives the last block's output.
    fn block_output<'a>(&self, acts: &'a GptActivations, l: usize) -> &'a [f32] {
        match l {
            0 => &acts.encoded,
            _ if acts.checkpointing => &acts.outs[l - 1],
            _ => &acts.blocks[l - 1].res3,
        }
    }

    /// Backward of the last `forward`: adds ∂objective/∂θ, times `scale`
    /// relative to the mean over the batch's positions (1/k for k
    /// micro-batches), into `g` (the flat layout). With checkpointing each
    /// block's forward is run again from its kept input first (the same
    /// function on the same inputs: the same bits as without).
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &self,
        g: &mut [f32],
        acts: &mut GptActivations,
        s: &mut GptScratch,
        p: &[f32],
        inp: &[u32],
        targets: &[u32],
        z_loss: f32,
        scale: f32,
    ) {
        for i in 0..self.stages() {
            self.backward_stage(g, acts, s, p, inp, targets, z_loss, scale, i);
        }
    }

    /// Runs backward's stage `i` (`backward_stage_at`): `backward` is
    /// them all in order, step-by-phase stops between them.
    #[allow(clippy::too_many_arguments)]
    pub fn backward_stage(
        &self,
        g: &mut [f32],
        acts: &mut GptActivations,
        s: &mut GptScratch,
        p: &[f32],
        inp: &[u32],
        targets: &[u32],
        z_loss: f32,
        scale: f32,
        i: usize,
    ) {
        let d = self.dims(inp.len(), self.shape.context);
        let Dims { rows, t, c, v, hidden, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        match self.backward_stage_at(i) {
            Stage::Head => {
                s.times.reset(self.shape.blocks);
                let mut lap = Lap::start();
                zeroed(&mut s.dlogits, rows * v);
                let dl = &mut s.dlogits;
                cross_entropy_backward(dl, &acts.logits, &acts.lse, targets, rows, v, z_loss, scale / rows as f32);
                sized(&mut s.dlnf, rows * c); // matmul_backward overwrites ∂x
                let (dlnf, dlogits) = (&mut s.dlnf, &s.dlogits);
                let dhead = &mut g[self.head..self.head + v * c];
                matmul_backward(Some(dlnf), dhead, None, dlogits, &acts.lnf.out, w(self.head, v * c), rows, c, v);
                zeroed(&mut s.dx, rows * c);
                let x = self.block_output(acts, self.shape.blocks);
                let (dw, db) = pair(g, self.ln_f, c);
                let (mean, rstd) = (&acts.lnf.mean, &acts.lnf.rstd);
                layernorm_backward(&mut s.dx, dw, db, &s.dlnf, x, w(self.ln_f.0, c), mean, rstd, rows, c);
                s.times.head += lap.split();
                sized(&mut s.dres2, rows * c);
                sized(&mut s.dhidden, rows * hidden);
                sized(&mut s.dhidden_gelu, rows * hidden);
                sized(&mut s.dln, rows * c);
                sized(&mut s.datty, rows * c);
                sized(&mut s.dqkv, rows * 3 * c);
                if self.shape.qk_layernorm {
                    sized(&mut s.dqkv_raw, rows * 3 * c);
                }
                sized(&mut s.att_row, attention_scratch(t, c / self.shape.heads));
            }
            Stage::Block { block: l, op } => {
                let at = &self.blocks[l];
                if acts.checkpointing && op + 1 == BLOCK_OPS.len() {
                    // The block's first op in backward recomputes its
                    // forward, counted as its backward time on a line of
                    // its own.
                    let mut recompute = [0.0; 5];
                    let x: &[f32] = if l == 0 { &acts.encoded } else { &acts.outs[l - 1] };
                    for op in 0..BLOCK_OPS.len() {
                        self.block_op_forward(&mut acts.blocks[0], x, p, &d, at, &mut recompute, op);
                    }
                    s.times.blocks[l][OpKind::Recompute as usize] += recompute.iter().sum::<f64>();
                }
                let a = &acts.blocks[if acts.checkpointing { 0 } else { l }];
                let x = self.block_output(acts, l);
                self.block_op_backward(g, a, x, s, p, &d, at, l, op);
            }
            Stage::Embedding => {
                let mut lap = Lap::start();
                let (dwte, dwpe) = split_two(g, (self.wte, v * c), (self.wpe, t * c));
                encoder_backward(dwte, dwpe, &s.dx, inp, t, c);
                s.times.embedding += lap.split();
            }
        }
    }

    /// ∂objective/∂(the residual stream) where backward's stage `i` left
    /// it, and where in the model that is.
    pub fn stream_gradient<'a>(&self, s: &'a GptScratch, i: usize) -> (&'a [f32], String) {
        match self.backward_stage_at(i) {
            Stage::Head => (&s.dx, format!("block {} output", self.shape.blocks)),
            Stage::Block { block, op: 3 } => (&s.dx, format!("block {} output", block + 1)),
            Stage::Block { block, op: 2 } => (&s.dres2, format!("block {} · x + attention", block + 1)),
            Stage::Block { block, op: 1 } => (&s.dx, format!("block {} · x + attention", block + 1)),
            Stage::Block { block, .. } => (&s.dx, format!("block {} input", block + 1)),
            Stage::Embedding => (&s.dx, "the embedding".into()),
        }
    }
}

/// The q and k segments of each row and head that the q/k LayerNorms
/// normalise: ((its LayerNorm's weight and bias offsets), start in qkv).
fn qk_segments(
    rows: usize,
    c: usize,
    h: usize,
    q_ln: (usize, usize),
    k_ln: (usize, usize),
) -> impl Iterator<Item = ((usize, usize), usize)> {
    let hs = c / h;
    (0..rows).flat_map(move |r| {
        (0..h).flat_map(move |head| [(q_ln, r * 3 * c + head * hs), (k_ln, r * 3 * c + c + head * hs)])
    })
}

fn sized(v: &mut Vec<f32>, n: usize) {
    v.resize(n, 0.0);
}

fn zeroed(v: &mut Vec<f32>, n: usize) {
    v.clear();
    v.resize(n, 0.0);
}

/// A weight of `len` at `wb.0` and, after it (as every layout places a
/// bias), its bias: the weight's slice of `g` and the rest of `g` from the
/// bias on (the ops read only the bias's length of it).
fn pair(g: &mut [f32], wb: (usize, usize), len: usize) -> (&mut [f32], &mut [f32]) {
    let (w, b) = wb;
    assert_eq!(w + len, b, "a bias follows its weight");
    g[w..].split_at_mut(len)
}

/// Two disjoint ranges (offset, length) of `g`, the first before the
/// second.
fn split_two(g: &mut [f32], a: (usize, usize), b: (usize, usize)) -> (&mut [f32], &mut [f32]) {
    assert!(a.0 + a.1 <= b.0);
    let (first, second) = g.split_at_mut(b.0);
    (&mut first[a.0..a.0 + a.1], &mut second[..b.1])
}

#[cfg(test)]
mod tests;
