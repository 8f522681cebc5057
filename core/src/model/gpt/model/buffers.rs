//! The transformer's buffers: what forward keeps for backward
//! (`GptActivations`, per block or, with activation checkpointing, per
//! block input), backward's working buffers (`GptScratch`), and their sizes
//! from the shape alone (`memory_floats`), which a test holds equal to the
//! buffers.

use super::super::layout::GptShape;
use super::super::ops::{attention_scratch, layernorm_forward};
use super::{sized, Stage, BLOCK_OPS};
use crate::error::{zeros, Result};

/// What forward keeps for backward, for a batch of B windows of T tokens.
/// With activation checkpointing (`checkpointing`) only each block's
/// output is kept (`outs`), and `blocks` holds one block's activations,
/// reused: backward recomputes each block's forward from its input.
#[derive(Default)]
pub struct GptActivations {
    pub batch: usize,
    pub checkpointing: bool,
    pub(super) encoded: Vec<f32>,
    pub(super) blocks: Vec<BlockActs>,
    /// Block outputs (checkpointing only), (B·T, C) each.
    pub(super) outs: Vec<Vec<f32>>,
    pub(super) lnf: Normed,
    pub logits: Vec<f32>,
    pub(super) lse: Vec<f32>,
    /// Where the last forward spent its time (`OpTimes`).
    pub times: super::OpTimes,
}

#[derive(Default)]
pub(super) struct BlockActs {
    pub(super) ln1: Normed,
    /// q, k, v before the q/k LayerNorm (only with `qk_layernorm`).
    pub(super) qkv_raw: Vec<f32>,
    pub(super) qk_stats: (Vec<f32>, Vec<f32>),
    pub(super) qkv: Vec<f32>,
    /// Attention probabilities (B, H, T, T).
    pub(super) att: Vec<f32>,
    pub(super) atty: Vec<f32>,
    pub(super) res2: Vec<f32>,
    pub(super) ln2: Normed,
    pub(super) fch: Vec<f32>,
    pub(super) fch_gelu: Vec<f32>,
    pub(super) res3: Vec<f32>,
}

/// The names of each block op's outputs (`BLOCK_OPS` order), as the
/// step-by-phase view lists them.
pub const OP_OUTPUTS: [&[&str]; 4] = [
    &["ln_1"],
    &["q, k, v", "attention P", "attention output", "x + attention"],
    &["ln_2"],
    &["c_fc", "GELU", "x + MLP"],
];

/// The outputs of block `l`'s ops 0..=`through` (`OP_OUTPUTS`), named.
fn block_outputs<'a>(out: &mut Vec<(String, &'a [f32])>, l: usize, b: &'a BlockActs, through: usize) {
    let buffers: [&[&'a [f32]]; 4] =
        [&[&b.ln1.out], &[&b.qkv, &b.att, &b.atty, &b.res2], &[&b.ln2.out], &[&b.fch, &b.fch_gelu, &b.res3]];
    for op in 0..=through {
        for (name, v) in OP_OUTPUTS[op].iter().zip(buffers[op]) {
            out.push((format!("block {} · {name}", l + 1), v));
        }
    }
}

impl BlockActs {
    /// (activations, attention probabilities) in f32s.
    fn floats(&self) -> (usize, usize) {
        let n = self.ln1.floats()
            + self.qkv_raw.len()
            + self.qk_stats.0.len()
            + self.qk_stats.1.len()
            + self.qkv.len()
            + self.atty.len()
            + self.res2.len()
            + self.ln2.floats()
            + self.fch.len()
            + self.fch_gelu.len()
            + self.res3.len();
        (n, self.att.len())
    }
}

impl GptActivations {
    /// Empty buffers, sized by the first forward; `checkpointing` keeps
    /// only each block's input.
    pub fn new(checkpointing: bool) -> GptActivations {
        GptActivations { checkpointing, ..GptActivations::default() }
    }

    /// Every buffer forward fills for `batch` windows, allocated now and
    /// fallibly (`error::zeros`): a machine without the memory gets an
    /// error before training begins, not an abort inside a step. Forward's
    /// own sizing then finds each buffer at its size (the same bits).
    pub fn allocate(s: &GptShape, batch: usize, checkpointing: bool) -> Result<GptActivations> {
        let (rows, c, h) = (times(&[batch, s.context]), s.embed, s.heads);
        let (hidden, qk) = (s.mlp_ratio * c, s.qk_layernorm);
        let f = |factors: &[usize]| zeros(times(factors), "the activations");
        let block = || -> Result<BlockActs> {
            Ok(BlockActs {
                ln1: Normed::allocate(rows, c)?,
                qkv_raw: f(&[rows, 3 * c, qk as usize])?,
                qk_stats: (f(&[rows, 2 * h, qk as usize])?, f(&[rows, 2 * h, qk as usize])?),
                qkv: f(&[rows, 3 * c])?,
                att: zeros(times(&[batch, h, s.context, s.context]), "the attention probabilities")?,
                atty: f(&[rows, c])?,
                res2: f(&[rows, c])?,
                ln2: Normed::allocate(rows, c)?,
                fch: f(&[rows, hidden])?,
                fch_gelu: f(&[rows, hidden])?,
                res3: f(&[rows, c])?,
            })
        };
        let kept = if checkpointing { 1 } else { s.blocks };
        Ok(GptActivations {
            batch,
            checkpointing,
            encoded: f(&[rows, c])?,
            blocks: (0..kept).map(|_| block()).collect::<Result<_>>()?,
            outs: (0..if checkpointing { s.blocks } else { 0 }).map(|_| f(&[rows, c])).collect::<Result<_>>()?,
            lnf: Normed::allocate(rows, c)?,
            logits: f(&[rows, s.vocab_size])?,
            lse: f(&[rows])?,
            times: super::OpTimes::default(),
        })
    }

    /// Bytes held: (activations, attention probabilities).
    pub fn bytes(&self) -> (u64, u64) {
        let (mut acts, mut att) = (0, 0);
        for b in &self.blocks {
            let (n, a) = b.floats();
            acts += n;
            att += a;
        }
        acts += self.encoded.len()
            + self.outs.iter().map(Vec::len).sum::<usize>()
            + self.lnf.floats()
            + self.logits.len()
            + self.lse.len();
        (4 * acts as u64, 4 * att as u64)
    }

    /// Every op's output of the last forward, in forward order, named for
    /// the page's step-by-phase view: the embedding, each block's ops (with
    /// activation checkpointing, each block's output alone: the rest is
    /// recomputed in backward), ln_f and the logits.
    pub fn op_outputs(&self) -> Vec<(String, &[f32])> {
        self.op_outputs_through(Stage::Head)
    }

    /// The op outputs of a forward run up to `stage` (step-by-phase stops
    /// there): those of `op_outputs` so far; with checkpointing, the
    /// current block's own ops too while it runs.
    pub fn op_outputs_through(&self, stage: Stage) -> Vec<(String, &[f32])> {
        let mut out: Vec<(String, &[f32])> = vec![("embedding (token + position)".into(), &self.encoded)];
        let (finished, current) = match stage {
            Stage::Embedding => return out,
            Stage::Block { block, op } if op + 1 < BLOCK_OPS.len() => (block, Some((block, op))),
            Stage::Block { block, .. } => (block + 1, None),
            Stage::Head => (self.blocks.len().max(self.outs.len()), None),
        };
        for l in 0..finished {
            if self.checkpointing {
                out.push((format!("block {} · output (kept; the rest is recomputed)", l + 1), &self.outs[l]));
            } else {
                block_outputs(&mut out, l, &self.blocks[l], BLOCK_OPS.len() - 1);
            }
        }
        if let Some((l, op)) = current {
            block_outputs(&mut out, l, &self.blocks[if self.checkpointing { 0 } else { l }], op);
        }
        if stage == Stage::Head {
            out.push(("ln_f".into(), &self.lnf.out));
            out.push(("logits".into(), &self.logits));
        }
        out
    }

    /// The attention probabilities of block `l` (B, H, T, T) as the last
    /// forward left them; None with checkpointing (only the last block's
    /// are then kept).
    pub fn attention(&self, l: usize) -> Option<&[f32]> {
        if self.checkpointing {
            return None;
        }
        self.blocks.get(l).map(|b| b.att.as_slice())
    }
}

/// Backward's working buffers, kept between steps.
#[derive(Default)]
pub struct GptScratch {
    /// Where the last backward spent its time (`OpTimes`).
    pub times: super::OpTimes,
    pub(super) dlogits: Vec<f32>,
    pub(super) dlnf: Vec<f32>,
    pub(super) dx: Vec<f32>,
    pub(super) dres2: Vec<f32>,
    pub(super) dhidden: Vec<f32>,
    pub(super) dhidden_gelu: Vec<f32>,
    pub(super) dln: Vec<f32>,
    pub(super) datty: Vec<f32>,
    pub(super) dqkv: Vec<f32>,
    pub(super) dqkv_raw: Vec<f32>,
    pub(super) att_row: Vec<f32>,
}

impl GptScratch {
    /// Every buffer backward uses for `batch` windows, allocated now and
    /// fallibly (as `GptActivations::allocate`).
    pub fn allocate(s: &GptShape, batch: usize) -> Result<GptScratch> {
        let (rows, c, hidden) = (times(&[batch, s.context]), s.embed, s.mlp_ratio * s.embed);
        let f = |factors: &[usize]| zeros(times(factors), "backward's buffers");
        Ok(GptScratch {
            times: super::OpTimes::default(),
            dlogits: f(&[rows, s.vocab_size])?,
            dlnf: f(&[rows, c])?,
            dx: f(&[rows, c])?,
            dres2: f(&[rows, c])?,
            dhidden: f(&[rows, hidden])?,
            dhidden_gelu: f(&[rows, hidden])?,
            dln: f(&[rows, c])?,
            datty: f(&[rows, c])?,
            dqkv: f(&[rows, 3 * c])?,
            dqkv_raw: f(&[rows, 3 * c, s.qk_layernorm as usize])?,
            att_row: f(&[attention_scratch(s.context, c / s.heads.max(1))])?,
        })
    }

    pub fn bytes(&self) -> u64 {
        let n = [
            &self.dlogits,
            &self.dlnf,
            &self.dx,
            &self.dres2,
            &self.dhidden,
            &self.dhidden_gelu,
            &self.dln,
            &self.datty,
            &self.dqkv,
            &self.dqkv_raw,
            &self.att_row,
        ]
        .iter()
        .map(|v| v.len())
        .sum::<usize>();
        4 * n as u64
    }
}

/// What a batch of B windows holds, in f32s, from the shape alone:
/// (activations, attention probabilities, backward scratch). The same
/// sizes the buffers above take once a step has run (tested), so memory
/// limits are checked before anything is allocated.
///
/// Computed in u64 (the largest shapes the fields allow need about 2^58
/// floats) and saturated to `usize`: in WebAssembly, whose `usize` has 32
/// bits, a link's huge shape must read as huge, past every budget, not wrap
/// around to a small number that passes one.
pub fn memory_floats(s: &GptShape, batch: usize, checkpointing: bool) -> (usize, usize, usize) {
    let n = |x: usize| x as u64;
    let (t, c, v, h) = (n(s.context), n(s.embed), n(s.vocab_size), n(s.heads));
    let (rows, hidden) = (n(batch) * t, n(s.mlp_ratio) * c);
    let qk = if s.qk_layernorm { rows * 3 * c + 4 * rows * h } else { 0 };
    let normed = rows * c + 2 * rows;
    // ln1, qkv (+ raw and stats), atty, res2, ln2, fch, fch_gelu, res3.
    let block = normed + rows * 3 * c + qk + 3 * rows * c + normed + 2 * rows * hidden;
    let att = n(batch) * h * t * t;
    let kept = if checkpointing { 1 } else { n(s.blocks) };
    let outs = if checkpointing { n(s.blocks) * rows * c } else { 0 };
    let acts = rows * c + kept * block + outs + normed + rows * v + rows;
    let scratch = rows * v
        + 5 * rows * c
        + 2 * rows * hidden
        + rows * 3 * c
        + qk.min(rows * 3 * c)
        + n(attention_scratch(s.context, s.embed / s.heads.max(1)));
    let size = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
    (size(acts), size(kept * att), size(scratch))
}

/// The product of `factors`, saturated: a huge shape asks for more than
/// any machine has (an error), never for a wrapped-around small size.
fn times(factors: &[usize]) -> usize {
    factors.iter().fold(1, |a: usize, &x| a.saturating_mul(x))
}

/// A LayerNorm's output and the per-row mean and 1/σ backward needs.
#[derive(Default)]
pub(super) struct Normed {
    pub(super) out: Vec<f32>,
    pub(super) mean: Vec<f32>,
    pub(super) rstd: Vec<f32>,
}

impl Normed {
    fn allocate(rows: usize, c: usize) -> Result<Normed> {
        let f = |n: usize| zeros(n, "the activations");
        Ok(Normed { out: f(times(&[rows, c]))?, mean: f(rows)?, rstd: f(rows)? })
    }

    pub(super) fn forward(&mut self, x: &[f32], weight: &[f32], bias: &[f32], rows: usize, c: usize) {
        sized(&mut self.out, rows * c);
        sized(&mut self.mean, rows);
        sized(&mut self.rstd, rows);
        layernorm_forward(&mut self.out, &mut self.mean, &mut self.rstd, x, weight, bias, rows, c);
    }

    pub(super) fn floats(&self) -> usize {
        self.out.len() + self.mean.len() + self.rstd.len()
    }
}
