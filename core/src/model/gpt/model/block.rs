//! One transformer block as four ops, forward and backward: ln_1, then
//! attention (c_attn, the q/k LayerNorms, softmax(q·kᵀ/√hs) with the
//! causal mask, c_proj) and its residual add, then ln_2, then the MLP
//! (c_fc, GELU, c_proj) and its residual add. `Gpt::forward` and
//! `Gpt::backward` run them in order (backward in reverse); the page's
//! step-by-phase view stops between them (`Stage`).

use super::super::ops::*;
use super::buffers::BlockActs;
use super::times::Lap;
use super::{pair, qk_segments, sized, BlockAt, Dims, Gpt, GptScratch, OpKind};

/// A block's ops, in forward order.
pub const BLOCK_OPS: [&str; 4] = ["ln_1", "attention", "ln_2", "MLP"];

/// Where a forward or backward can stop: the embedding, one op of one
/// block (`BLOCK_OPS[op]`), or the head (ln_f, the logits, the loss).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Embedding,
    Block { block: usize, op: usize },
    Head,
}

impl Stage {
    /// "embedding", "block 2 · attention", "head (ln_f, logits, loss)".
    pub fn name(self) -> String {
        match self {
            Stage::Embedding => "embedding".into(),
            Stage::Block { block, op } => format!("block {} · {}", block + 1, BLOCK_OPS[op]),
            Stage::Head => "head (ln_f, logits, loss)".into(),
        }
    }
}

impl Gpt {
    /// Indices into `tensors` of those whose gradients backward's stages
    /// 0..=`i` have reached, in the order it reaches them (the tied
    /// embedding from the head on: its rows gather both parts there).
    pub fn tensors_through_backward(&self, i: usize) -> Vec<usize> {
        let last = self.stages() - 1;
        let stage_of = |name: &str| -> usize {
            if name == "transformer.wte.weight" {
                return if self.shape.tie_embeddings { 0 } else { last };
            }
            if name == "transformer.wpe.weight" {
                return last;
            }
            let Some(rest) = name.strip_prefix("transformer.h.") else { return 0 }; // ln_f, lm_head
            let (block, part) = rest.split_once('.').unwrap_or((rest, ""));
            let block: usize = block.parse().unwrap_or(0);
            let op = ["ln_1.", "attn.", "ln_2.", "mlp."].iter().position(|p| part.starts_with(p)).unwrap_or(0);
            last - (1 + BLOCK_OPS.len() * block + op)
        };
        let mut reached: Vec<(usize, usize)> =
            self.tensors.iter().enumerate().map(|(j, t)| (stage_of(&t.name), j)).filter(|&(s, _)| s <= i).collect();
        reached.sort_by_key(|&(s, j)| (s, std::cmp::Reverse(j)));
        reached.into_iter().map(|(_, j)| j).collect()
    }

    /// Op `op` of one block's forward, from its input `x`: ln_1; res2 =
    /// x + attn(ln_1(x)); ln_2; res3 = res2 + mlp(ln_2(res2)).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_op_forward(
        &self,
        a: &mut BlockActs,
        x: &[f32],
        p: &[f32],
        d: &Dims,
        at: &BlockAt,
        times: &mut [f64; 5],
        op: usize,
    ) {
        let &Dims { rows, b, t, c, h, hidden, hs, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        let mut lap = Lap::start();
        match op {
            0 => {
                a.ln1.forward(x, w(at.ln1.0, c), w(at.ln1.1, c), rows, c);
                times[OpKind::LayerNorm as usize] += lap.split();
            }
            1 => {
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
                let (pw, pb) = (w(at.attn_proj.0, c * c), w(at.attn_proj.1, c));
                matmul_forward(&mut a.res2, &a.atty, pw, Some(pb), rows, c, c);
                times[OpKind::Attention as usize] += lap.split();
                for (r, &xi) in a.res2.iter_mut().zip(x) {
                    *r += xi; // the residual: x + attn(ln_1(x))
                }
                times[OpKind::Residual as usize] += lap.split();
            }
            2 => {
                a.ln2.forward(&a.res2, w(at.ln2.0, c), w(at.ln2.1, c), rows, c);
                times[OpKind::LayerNorm as usize] += lap.split();
            }
            _ => {
                sized(&mut a.fch, rows * hidden);
                sized(&mut a.fch_gelu, rows * hidden);
                let (fw, fb) = (w(at.fc.0, hidden * c), w(at.fc.1, hidden));
                matmul_forward(&mut a.fch, &a.ln2.out, fw, Some(fb), rows, c, hidden);
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
        }
    }

    /// Op `op`'s backward in block `l` (run from op 3 down to 0): `s.dx`
    /// holds ∂/∂(the block's output) before op 3 and ∂/∂x (its input)
    /// after op 0; parameter gradients add into `g`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn block_op_backward(
        &self,
        g: &mut [f32],
        a: &BlockActs,
        x: &[f32],
        s: &mut GptScratch,
        p: &[f32],
        d: &Dims,
        at: &BlockAt,
        l: usize,
        op: usize,
    ) {
        let &Dims { rows, b, t, c, h, hidden, hs, .. } = d;
        let w = |off: usize, len: usize| &p[off..off + len];
        let mut lap = Lap::start();
        let times = &mut s.times.blocks[l];
        match op {
            3 => {
                // res3 = res2 + mlp(ln_2(res2)): dx is ∂/∂res3.
                s.dres2.copy_from_slice(&s.dx);
                times[OpKind::Residual as usize] += lap.split();
                let (dw, db) = pair(g, at.fc_proj, c * hidden);
                let wp = w(at.fc_proj.0, c * hidden);
                matmul_backward(Some(&mut s.dhidden_gelu), dw, Some(db), &s.dx, &a.fch_gelu, wp, rows, hidden, c);
                s.dhidden.fill(0.0);
                gelu_backward(&mut s.dhidden, &a.fch, &s.dhidden_gelu);
                let (dw, db) = pair(g, at.fc, hidden * c);
                let wf = w(at.fc.0, hidden * c);
                matmul_backward(Some(&mut s.dln), dw, Some(db), &s.dhidden, &a.ln2.out, wf, rows, c, hidden);
                times[OpKind::Mlp as usize] += lap.split();
            }
            2 => {
                let (dw, db) = pair(g, at.ln2, c);
                let (mean, rstd) = (&a.ln2.mean, &a.ln2.rstd);
                layernorm_backward(&mut s.dres2, dw, db, &s.dln, &a.res2, w(at.ln2.0, c), mean, rstd, rows, c);
                times[OpKind::LayerNorm as usize] += lap.split();
            }
            1 => {
                // res2 = x + attn(ln_1(x)): dres2 flows to x and into attn.
                s.dx.copy_from_slice(&s.dres2);
                times[OpKind::Residual as usize] += lap.split();
                let (dw, db) = pair(g, at.attn_proj, c * c);
                let wp = w(at.attn_proj.0, c * c);
                matmul_backward(Some(&mut s.datty), dw, Some(db), &s.dres2, &a.atty, wp, rows, c, c);
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
                        let wn = w(norm.0, hs);
                        layernorm_backward(&mut s.dqkv_raw[range], dw, db, dy, x_seg, wn, mean, rstd, 1, hs);
                    }
                    &s.dqkv_raw
                } else {
                    &s.dqkv
                };
                let (dw, db) = pair(g, at.attn, 3 * c * c);
                let wa = w(at.attn.0, 3 * c * c);
                matmul_backward(Some(&mut s.dln), dw, Some(db), dqkv_in, &a.ln1.out, wa, rows, c, 3 * c);
                times[OpKind::Attention as usize] += lap.split();
            }
            _ => {
                let (dw, db) = pair(g, at.ln1, c);
                let (mean, rstd) = (&a.ln1.mean, &a.ln1.rstd);
                layernorm_backward(&mut s.dx, dw, db, &s.dln, x, w(at.ln1.0, c), mean, rstd, rows, c);
                times[OpKind::LayerNorm as usize] += lap.split();
            }
        }
    }
}
