//! The whole GPT, forward and backward, strung from its ops (`ops`) as
//! llm.c's `gpt2_forward`/`gpt2_backward` do, over the flat parameter
//! buffer of `GptShape::tensors`:
//!
//! x = wte[idx] + wpe; per block x = x + attn(ln_1(x)); x = x + mlp(ln_2(x));
//! logits = ln_f(x)·headᵀ (head = wte when tied); loss = mean cross-entropy
//! over the B·T positions, the objective adding z_loss·mean(lse²).

use super::layout::{GptShape, GptTensor};
use super::ops::*;

mod buffers;
mod inspect;
mod times;

use buffers::BlockActs;
pub use buffers::{memory_floats, GptActivations, GptScratch};
pub use inspect::{inspect_window, WindowInspection};
use times::Lap;
pub use times::{OpKind, OpTimes};

/// Offsets of one block's tensors.
struct BlockAt {
    ln1: (usize, usize),
    attn: (usize, usize),
    attn_proj: (usize, usize),
    q_ln: Option<(usize, usize)>,
    k_ln: Option<(usize, usize)>,
    ln2: (usize, usize),
    fc: (usize, usize),
    fc_proj: (usize, usize),
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
        let d = self.dims(inp.len(), t);
        let Dims { rows, b, c, v, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        acts.batch = b;
        acts.times.reset(self.shape.blocks);
        let mut lap = Lap::start();
        sized(&mut acts.encoded, rows * c);
        encoder_forward(&mut acts.encoded, inp, w(self.wte, v * c), w(self.wpe, t * c), t, c);
        acts.times.embedding += lap.split();
        let kept = if acts.checkpointing { 1 } else { self.shape.blocks };
        acts.blocks.resize_with(kept, BlockActs::default);
        acts.outs.resize_with(if acts.checkpointing { self.shape.blocks } else { 0 }, Vec::new);
        for (l, at) in self.blocks.iter().enumerate() {
            let times = &mut acts.times.blocks[l];
            if acts.checkpointing {
                let x: &[f32] = if l == 0 { &acts.encoded } else { &acts.outs[l - 1] };
                self.block_forward(&mut acts.blocks[0], x, p, &d, at, times);
                let out = &mut acts.outs[l];
                sized(out, rows * c);
                out.copy_from_slice(&acts.blocks[0].res3);
            } else {
                let (before, rest) = acts.blocks.split_at_mut(l);
                let x: &[f32] = if l == 0 { &acts.encoded } else { &before[l - 1].res3 };
                self.block_forward(&mut rest[0], x, p, &d, at, times);
            }
        }
        let mut lap = Lap::start();
        let mut lnf = std::mem::take(&mut acts.lnf);
        let x = self.block_output(acts, self.shape.blocks);
        lnf.forward(x, w(self.ln_f.0, c), w(self.ln_f.1, c), rows, c);
        acts.lnf = lnf;
        sized(&mut acts.logits, rows * v);
        matmul_forward(&mut acts.logits, &acts.lnf.out, w(self.head, v * c), None, rows, c, v);
        sized(&mut acts.lse, rows);
        let losses = cross_entropy_forward(&mut acts.lse, &acts.logits, targets, rows, v);
        acts.times.head += lap.split();
        losses
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

    /// One block: res2 = x + attn(ln_1(x)); res3 = res2 + mlp(ln_2(res2)).
    fn block_forward(&self, a: &mut BlockActs, x: &[f32], p: &[f32], d: &Dims, at: &BlockAt, times: &mut [f64; 5]) {
        let &Dims { rows, b, t, c, h, hidden, hs, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        let mut lap = Lap::start();
        a.ln1.forward(x, w(at.ln1.0, c), w(at.ln1.1, c), rows, c);
        times[OpKind::LayerNorm as usize] += lap.split();
        sized(&mut a.qkv, rows * 3 * c);
        let (aw, ab) = (w(at.attn.0, 3 * c * c), w(at.attn.1, 3 * c));
        if let (Some(q_ln), Some(k_ln)) = (at.q_ln, at.k_ln) {
            sized(&mut a.qkv_raw, rows * 3 * c);
            matmul_forward(&mut a.qkv_raw, &a.ln1.out, aw, Some(ab), rows, c, 3 * c);
            a.qkv.copy_from_slice(&a.qkv_raw);
            sized(&mut a.qk_stats.0, 2 * rows * h);
            sized(&mut a.qk_stats.1, 2 * rows * h);
            for (seg, (norm, part)) in qk_segments(rows, c, h, q_ln, k_ln).enumerate() {
                let range = part..part + hs;
                let (mean, rstd) = (&mut a.qk_stats.0[seg..seg + 1], &mut a.qk_stats.1[seg..seg + 1]);
                let (wn, bn) = (w(norm.0, hs), w(norm.1, hs));
                layernorm_forward(&mut a.qkv[range.clone()], mean, rstd, &a.qkv_raw[range], wn, bn, 1, hs);
            }
        } else {
            matmul_forward(&mut a.qkv, &a.ln1.out, aw, Some(ab), rows, c, 3 * c);
        }
        sized(&mut a.att, b * h * t * t);
        sized(&mut a.atty, rows * c);
        attention_forward(&mut a.atty, &mut a.att, &a.qkv, b, t, c, h);
        sized(&mut a.res2, rows * c);
        matmul_forward(&mut a.res2, &a.atty, w(at.attn_proj.0, c * c), Some(w(at.attn_proj.1, c)), rows, c, c);
        times[OpKind::Attention as usize] += lap.split();
        for (r, &xi) in a.res2.iter_mut().zip(x) {
            *r += xi; // the residual: x + attn(ln_1(x))
        }
        times[OpKind::Residual as usize] += lap.split();
        a.ln2.forward(&a.res2, w(at.ln2.0, c), w(at.ln2.1, c), rows, c);
        times[OpKind::LayerNorm as usize] += lap.split();
        sized(&mut a.fch, rows * hidden);
        sized(&mut a.fch_gelu, rows * hidden);
        matmul_forward(&mut a.fch, &a.ln2.out, w(at.fc.0, hidden * c), Some(w(at.fc.1, hidden)), rows, c, hidden);
        gelu_forward(&mut a.fch_gelu, &a.fch);
        sized(&mut a.res3, rows * c);
        let (pw, pb) = (w(at.fc_proj.0, c * hidden), w(at.fc_proj.1, c));
        matmul_forward(&mut a.res3, &a.fch_gelu, pw, Some(pb), rows, hidden, c);
        times[OpKind::Mlp as usize] += lap.split();
        for (r, &xi) in a.res3.iter_mut().zip(&a.res2) {
            *r += xi;
        }
        times[OpKind::Residual as usize] += lap.split();
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
        let d = self.dims(inp.len(), self.shape.context);
        let Dims { rows, t, c, v, hidden, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        s.times.reset(self.shape.blocks);
        let mut lap = Lap::start();
        zeroed(&mut s.dlogits, rows * v);
        cross_entropy_backward(&mut s.dlogits, &acts.logits, &acts.lse, targets, rows, v, z_loss, scale / rows as f32);
        sized(&mut s.dlnf, rows * c); // matmul_backward overwrites ∂x
        let (dlnf, dlogits) = (&mut s.dlnf, &s.dlogits);
        let dhead = &mut g[self.head..self.head + v * c];
        matmul_backward(Some(dlnf), dhead, None, dlogits, &acts.lnf.out, w(self.head, v * c), rows, c, v);
        zeroed(&mut s.dx, rows * c);
        {
            let x = self.block_output(acts, self.shape.blocks);
            let (dw, db) = pair(g, self.ln_f, c);
            let (mean, rstd) = (&acts.lnf.mean, &acts.lnf.rstd);
            layernorm_backward(&mut s.dx, dw, db, &s.dlnf, x, w(self.ln_f.0, c), mean, rstd, rows, c);
        }
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
        for (l, at) in self.blocks.iter().enumerate().rev() {
            if acts.checkpointing {
                // The recomputed forward counts as this block's backward
                // time, on a line of its own.
                let mut recompute = [0.0; 5];
                let x: &[f32] = if l == 0 { &acts.encoded } else { &acts.outs[l - 1] };
                self.block_forward(&mut acts.blocks[0], x, p, &d, at, &mut recompute);
                s.times.blocks[l][OpKind::Recompute as usize] += recompute.iter().sum::<f64>();
            }
            let a = &acts.blocks[if acts.checkpointing { 0 } else { l }];
            let x = self.block_output(acts, l);
            self.block_backward(g, a, x, s, p, &d, at, l);
        }
        let mut lap = Lap::start();
        let (dwte, dwpe) = split_two(g, (self.wte, v * c), (self.wpe, t * c));
        encoder_backward(dwte, dwpe, &s.dx, inp, t, c);
        s.times.embedding += lap.split();
    }

    /// Backward through one block: `s.dx` holds ∂/∂(its output) on entry
    /// and ∂/∂x (its input) on return; parameter gradients add into `g`.
    #[allow(clippy::too_many_arguments)]
    fn block_backward(
        &self,
        g: &mut [f32],
        a: &BlockActs,
        x: &[f32],
        s: &mut GptScratch,
        p: &[f32],
        d: &Dims,
        at: &BlockAt,
        l: usize,
    ) {
        let &Dims { rows, b, t, c, h, hidden, hs, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        let mut lap = Lap::start();
        let mut times = [0.0; 5];
        // res3 = res2 + mlp(ln_2(res2)): dx is ∂/∂res3.
        s.dres2.copy_from_slice(&s.dx);
        times[OpKind::Residual as usize] += lap.split();
        let (dw, db) = pair(g, at.fc_proj, c * hidden);
        let wp = w(at.fc_proj.0, c * hidden);
        matmul_backward(Some(&mut s.dhidden_gelu), dw, Some(db), &s.dx, &a.fch_gelu, wp, rows, hidden, c);
        s.dhidden.fill(0.0);
        gelu_backward(&mut s.dhidden, &a.fch, &s.dhidden_gelu);
        let (dw, db) = pair(g, at.fc, hidden * c);
        matmul_backward(
            Some(&mut s.dln),
            dw,
            Some(db),
            &s.dhidden,
            &a.ln2.out,
            w(at.fc.0, hidden * c),
            rows,
            c,
            hidden,
        );
        times[OpKind::Mlp as usize] += lap.split();
        let (dw, db) = pair(g, at.ln2, c);
        let (mean, rstd) = (&a.ln2.mean, &a.ln2.rstd);
        layernorm_backward(&mut s.dres2, dw, db, &s.dln, &a.res2, w(at.ln2.0, c), mean, rstd, rows, c);
        times[OpKind::LayerNorm as usize] += lap.split();
        // res2 = x + attn(ln_1(x)): dres2 flows to x and into attn.
        s.dx.copy_from_slice(&s.dres2);
        times[OpKind::Residual as usize] += lap.split();
        let (dw, db) = pair(g, at.attn_proj, c * c);
        matmul_backward(Some(&mut s.datty), dw, Some(db), &s.dres2, &a.atty, w(at.attn_proj.0, c * c), rows, c, c);
        s.dqkv.fill(0.0);
        attention_backward(&mut s.dqkv, &mut s.att_row, &s.datty, &a.qkv, &a.att, b, t, c, h);
        let dqkv_in: &[f32] = if let (Some(q_ln), Some(k_ln)) = (at.q_ln, at.k_ln) {
            // v passes through; q and k through their LayerNorms.
            s.dqkv_raw.copy_from_slice(&s.dqkv);
            for (seg, (norm, part)) in qk_segments(rows, c, h, q_ln, k_ln).enumerate() {
                let range = part..part + hs;
                s.dqkv_raw[range.clone()].fill(0.0);
                let (dw, db) = pair(g, norm, hs);
                let (mean, rstd) = (&a.qk_stats.0[seg..seg + 1], &a.qk_stats.1[seg..seg + 1]);
                let (x_seg, dy) = (&a.qkv_raw[range.clone()], &s.dqkv[range.clone()]);
                layernorm_backward(&mut s.dqkv_raw[range], dw, db, dy, x_seg, w(norm.0, hs), mean, rstd, 1, hs);
            }
            &s.dqkv_raw
        } else {
            &s.dqkv
        };
        let (dw, db) = pair(g, at.attn, 3 * c * c);
        matmul_backward(Some(&mut s.dln), dw, Some(db), dqkv_in, &a.ln1.out, w(at.attn.0, 3 * c * c), rows, c, 3 * c);
        times[OpKind::Attention as usize] += lap.split();
        let (dw, db) = pair(g, at.ln1, c);
        let (mean, rstd) = (&a.ln1.mean, &a.ln1.rstd);
        layernorm_backward(&mut s.dx, dw, db, &s.dln, x, w(at.ln1.0, c), mean, rstd, rows, c);
        times[OpKind::LayerNorm as usize] += lap.split();
        for (total, t) in s.times.blocks[l].iter_mut().zip(times) {
            *total += t;
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
