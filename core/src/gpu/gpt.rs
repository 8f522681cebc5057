//! The transformer on the GPU engine: its buffers, and the dispatches of
//! its forward and backward, op for op the CPU's `Gpt::forward` and
//! `Gpt::backward` (`model::gpt::model`), each op a kernel with its CPU
//! twin. The data, the optimizer, clipping, the readback and the phases
//! are the engine's own, shared with the MLP (`Plan`): only these two
//! dispatch lists and their buffers are the transformer's.
//!
//! Where the GPU differs from the CPU in buffers, not in maths:
//! - one buffer carries ∂L/∂(the residual stream) through a block (the
//!   CPU copies it into a second for the step-by-phase view): the MLP's
//!   backward reads it, ln_2's adds into it, attention's reads it, ln_1's
//!   adds into it; the same sums in the same order;
//! - where the CPU zeroes a buffer and adds into it, the kernel overwrites
//!   (0 + x is x);
//! - the linear layers are the dense kernels (`gpu::matmul`), whose second
//!   output (the activation, here the identity) goes to `discard`;
//! - with activation checkpointing the blocks share one block's buffers but
//!   their outputs (the CPU copies each output aside); backward runs the
//!   block's forward dispatches again first.

use super::buffers::Buffers;
use super::dispatch::Dispatch;
use super::launch::{self, EmbeddingsAt, NormAt};
use super::matmul::{self, LayerMatmuls, MatmulVariant};
use super::GpuContext;

pub use super::gpt_attention::{time_attention, time_attention_key, AttentionVariant};
pub use super::gpt_buffers::{check_limits, unsupported, unsupported_shape, BlockBuffers, GptBuffers, NormBuffers};
use crate::experiment::{Activation, Experiment};
use crate::model::gpt::{Gpt, GptShape};
use crate::model::LayerShape;

/// The transformer's linear layers as the dense kernels see them, in
/// forward order: per block c_attn, attn.c_proj, c_fc, mlp.c_proj, then the
/// head (no bias). Their index is their place in a non-finite code.
pub fn matmul_shapes(gpt: &Gpt) -> Vec<LayerShape> {
    let s = &gpt.shape;
    let (c, hidden, v) = (s.embed, s.mlp_ratio * s.embed, s.vocab_size);
    let shape = |inputs: usize, units: usize, (weight_offset, bias_offset): (usize, usize)| LayerShape {
        inputs,
        units,
        weight_offset,
        bias_offset,
        op: crate::model::LayerOp::Dense,
    };
    let mut shapes = Vec::new();
    for l in 0..s.blocks {
        let at = gpt.block_at(l);
        shapes.push(shape(c, 3 * c, at.attn));
        shapes.push(shape(c, c, at.attn_proj));
        shapes.push(shape(c, hidden, at.fc));
        shapes.push(shape(hidden, c, at.fc_proj));
    }
    let (.., head) = gpt.embedding_and_head_at();
    shapes.push(shape(c, v, (head, NO_BIAS)));
    shapes
}

/// `bias_offset` of a linear layer without a bias (the dense kernels'
/// `NO_BIAS`).
pub const NO_BIAS: usize = u32::MAX as usize;

/// The names of the places in a non-finite code: each linear layer
/// (`matmul_shapes`), then the loss.
pub fn op_name(shape: &GptShape, order: usize) -> String {
    const OPS: [&str; 4] = ["attention (c_attn)", "attention (c_proj)", "MLP (c_fc)", "MLP (c_proj)"];
    match order {
        o if o < 4 * shape.blocks => format!("block {} · {}", o / 4 + 1, OPS[o % 4]),
        o if o == 4 * shape.blocks => "the head (logits)".into(),
        _ => "the loss".into(),
    }
}

/// The engine's buffers a transformer's dispatches bind besides its own.
pub struct Shared<'a> {
    pub params: &'a wgpu::Buffer,
    pub grads: &'a wgpu::Buffer,
    pub flags: &'a wgpu::Buffer,
    /// Where recomputed forwards report a non-finite value: never read.
    pub recompute_flags: &'a wgpu::Buffer,
    pub stats: &'a wgpu::Buffer,
    /// The micro-batch's token ids and next tokens, as f32 (gathered).
    pub tokens: &'a wgpu::Buffer,
    pub targets: &'a wgpu::Buffer,
}

impl<'a> Shared<'a> {
    pub fn of(b: &'a Buffers) -> Shared<'a> {
        Shared {
            params: &b.params,
            grads: &b.grads,
            flags: &b.flags,
            recompute_flags: &b.recompute_flags,
            stats: &b.stats,
            tokens: &b.batch_inputs,
            targets: &b.batch_targets,
        }
    }
}

/// What the loss needs: the z-loss coefficient and the micro-batches a
/// step averages over. None: forward stops at the logits (sampling), and
/// there is no backward.
#[derive(Clone, Copy, Debug)]
pub struct LossSpec {
    pub z_loss: f32,
    pub micro_batches: usize,
}

impl LossSpec {
    pub fn of(e: &Experiment) -> LossSpec {
        LossSpec { z_loss: e.z_loss as f32, micro_batches: e.grad_accumulation }
    }
}

/// The forward and backward dispatch lists of one micro-batch.
pub fn dispatches(
    ctx: &GpuContext,
    b: &Shared,
    g: &GptBuffers,
    loss: Option<LossSpec>,
    matmuls: &[LayerMatmuls],
) -> (Vec<Dispatch>, Vec<Dispatch>) {
    let gpt = Gpt::new(g.shape);
    let s = &g.shape;
    let (t, c, v, h, batch) = (s.context, s.embed, s.vocab_size, s.heads, g.batch);
    let rows = batch * t;
    let hidden = s.mlp_ratio * c;
    let shapes = matmul_shapes(&gpt);
    // The variant of each linear layer's matmuls (tiled where none was chosen).
    let tiled = LayerMatmuls::all(MatmulVariant::Tiled);
    let matmuls: Vec<LayerMatmuls> = (0..shapes.len()).map(|i| matmuls.get(i).copied().unwrap_or(tiled)).collect();
    let (wte, wpe, ln_f, _) = gpt.embedding_and_head_at();
    let norm_at = |(weight, bias): (usize, usize)| NormAt { weight, bias };
    let emb = EmbeddingsAt { wte, wpe };
    let linear = Activation::Linear;
    let mut fwd = Vec::new();

    fwd.push(launch::encoder_forward(rows, t, c, v, emb).bind(
        ctx,
        "encoder_forward",
        [&g.encoded, b.tokens, b.params],
    ));
    // Block l's forward (`block_op_forward`'s four ops), its non-finite
    // codes into `flags`: forward's, or a buffer nobody reads when
    // backward recomputes it (forward reported any NaN already).
    let block_fwd = |fwd: &mut Vec<Dispatch>, l: usize, flags: &wgpu::Buffer| {
        let (a, at) = (&g.blocks[l], gpt.block_at(l));
        let x = if l == 0 { &g.encoded } else { &g.blocks[l - 1].res3 };
        let dense = |fwd: &mut Vec<Dispatch>, i: usize, out: &wgpu::Buffer, x: &wgpu::Buffer| {
            let m = matmul::forward(matmuls[i].forward, rows, &shapes[i], linear, i);
            fwd.push(m.bind(ctx, &format!("dense_forward {}", op_name(s, i)), [out, &g.discard, x, b.params, flags]));
        };
        let ln = |n: &NormBuffers, inp: &wgpu::Buffer, wb: (usize, usize), name: &str| {
            launch::layernorm_forward(rows, c, norm_at(wb)).bind(
                ctx,
                &format!("layernorm_forward block {l} {name}"),
                [&n.out, &n.mean, &n.rstd, inp, b.params],
            )
        };
        fwd.push(ln(&a.ln1, x, at.ln1, "ln_1"));
        if let (Some(q), Some(k)) = (at.q_ln, at.k_ln) {
            // c_attn, then each head's q and k through their LayerNorms.
            dense(fwd, 4 * l, &a.qkv_raw, &a.ln1.out);
            let qk = launch::qk_layernorm_forward(rows, c, h, norm_at(q), norm_at(k));
            let label = format!("qk_layernorm_forward block {l}");
            fwd.push(qk.bind(ctx, &label, [&a.qkv, &a.qk_mean, &a.qk_rstd, &a.qkv_raw, b.params]));
        } else {
            dense(fwd, 4 * l, &a.qkv, &a.ln1.out);
        }
        let attn = match g.attention {
            AttentionVariant::Workgroup => launch::attention_forward(batch, t, c, h),
            AttentionVariant::Rows => launch::attention_forward_rows(batch, t, c, h),
        };
        fwd.push(attn.bind(ctx, &format!("attention_forward block {l}"), [&a.atty, &a.att, &a.qkv]));
        dense(fwd, 4 * l + 1, &a.res2, &a.atty);
        let label = format!("residual_forward block {l} (attention)");
        fwd.push(launch::residual_forward(rows * c).bind(ctx, &label, [&a.res2, x]));
        fwd.push(ln(&a.ln2, &a.res2, at.ln2, "ln_2"));
        dense(fwd, 4 * l + 2, &a.fch, &a.ln2.out);
        let label = format!("gelu_forward block {l}");
        fwd.push(launch::gelu_forward(rows * hidden).bind(ctx, &label, [&a.fch_gelu, &a.fch]));
        dense(fwd, 4 * l + 3, &a.res3, &a.fch_gelu);
        let label = format!("residual_forward block {l} (MLP)");
        fwd.push(launch::residual_forward(rows * c).bind(ctx, &label, [&a.res3, &a.res2]));
    };
    for l in 0..s.blocks {
        block_fwd(&mut fwd, l, b.flags);
    }
    let last = g.blocks.last().map_or(&g.encoded, |a| &a.res3);
    fwd.push(launch::layernorm_forward(rows, c, norm_at(ln_f)).bind(
        ctx,
        "layernorm_forward ln_f",
        [&g.lnf.out, &g.lnf.mean, &g.lnf.rstd, last, b.params],
    ));
    let head_i = 4 * s.blocks;
    let head = matmul::forward(matmuls[head_i].forward, rows, &shapes[head_i], linear, head_i);
    let label = format!("dense_forward {}", op_name(s, head_i));
    fwd.push(head.bind(ctx, &label, [&g.logits, &g.discard, &g.lnf.out, b.params, b.flags]));
    let Some(loss) = loss else { return (fwd, Vec::new()) };
    // The loss and, in the same pass, ∂objective/∂logits (scaled by 1/k
    // for k micro-batches and 1/rows for the mean).
    let scale = 1.0 / (loss.micro_batches as f32 * rows as f32);
    fwd.push(launch::cross_entropy_forward_backward(rows, v, loss.z_loss, scale).bind(
        ctx,
        "cross_entropy_forward_backward",
        [&g.dlogits, &g.losses, &g.logits, b.targets],
    ));
    fwd.push(launch::cross_entropy_loss(rows, head_i + 1).bind(
        ctx,
        "cross_entropy_loss",
        [b.stats, b.flags, &g.losses],
    ));

    // Backward, from the head down.
    let mut bwd = Vec::new();
    // A linear layer's backward: dW (and db) += dyᵀ·x; dx = dy·W.
    let dense_bwd = |bwd: &mut Vec<Dispatch>, i: usize, dx: &wgpu::Buffer, dy: &wgpu::Buffer, x: &wgpu::Buffer| {
        let shape = &shapes[i];
        let name = op_name(s, i);
        let weight = matmuls[i].backward_weight;
        let l = matmul::backward_weight(weight, rows, shape, i);
        bwd.push(l.bind(ctx, &format!("dense_backward_weight {name}"), [b.grads, b.flags, dy, x]));
        if weight == MatmulVariant::Tiled && shape.bias_offset != NO_BIAS {
            let l = matmul::bias_backward(rows, shape, i);
            bwd.push(l.bind(ctx, &format!("bias_backward {name}"), [b.grads, b.flags, dy]));
        }
        let l = matmul::backward_input(matmuls[i].backward_input, rows, shape, linear);
        bwd.push(l.bind(ctx, &format!("dense_backward_input {name}"), [dx, dy, b.params, &g.discard, &g.discard]));
    };
    // A LayerNorm's backward from dout into dx (added, or overwriting it
    // at ln_f, the first) and its dγ, dβ.
    let ln_bwd = |bwd: &mut Vec<Dispatch>,
                  n: &NormBuffers,
                  dout: &wgpu::Buffer,
                  inp: &wgpu::Buffer,
                  wb: (usize, usize),
                  first: bool,
                  name: &str| {
        let l = launch::layernorm_backward_input(rows, c, norm_at(wb), !first);
        let label = format!("layernorm_backward_input {name}");
        bwd.push(l.bind(ctx, &label, [&g.dx, dout, inp, b.params, &n.mean, &n.rstd]));
        let l = launch::layernorm_backward_params(rows, c, norm_at(wb));
        let label = format!("layernorm_backward_params {name}");
        bwd.push(l.bind(ctx, &label, [b.grads, dout, inp, &n.mean, &n.rstd]));
    };
    dense_bwd(&mut bwd, head_i, &g.dlnf, &g.dlogits, &g.lnf.out);
    ln_bwd(&mut bwd, &g.lnf, &g.dlnf, last, ln_f, true, "ln_f");
    for (l, a) in g.blocks.iter().enumerate().rev() {
        if g.checkpointing {
            // The block's forward again, from its kept input, into the
            // shared buffers: the same kernels on the same inputs, the
            // same bits as forward wrote.
            block_fwd(&mut bwd, l, b.recompute_flags);
        }
        let at = gpt.block_at(l);
        let x = if l == 0 { &g.encoded } else { &g.blocks[l - 1].res3 };
        // The MLP: res3 = res2 + mlp(ln_2(res2)); dx is ∂/∂res3.
        dense_bwd(&mut bwd, 4 * l + 3, &g.dhidden_gelu, &g.dx, &a.fch_gelu);
        let gelu = launch::gelu_backward(rows * hidden, false);
        bwd.push(gelu.bind(ctx, &format!("gelu_backward block {l}"), [&g.dhidden, &a.fch, &g.dhidden_gelu]));
        dense_bwd(&mut bwd, 4 * l + 2, &g.dln, &g.dhidden, &a.ln2.out);
        // ln_2 adds into dx, which becomes ∂/∂res2.
        ln_bwd(&mut bwd, &a.ln2, &g.dln, &a.res2, at.ln2, false, &format!("block {l} ln_2"));
        // Attention: res2 = x + attn(ln_1(x)).
        dense_bwd(&mut bwd, 4 * l + 1, &g.datty, &g.dx, &a.atty);
        let q = match g.attention {
            AttentionVariant::Workgroup => launch::attention_backward_query(batch, t, c, h),
            AttentionVariant::Rows => launch::attention_backward_query_rows(batch, t, c, h),
        };
        bwd.push(q.bind(
            ctx,
            &format!("attention_backward_query block {l}"),
            [&g.dqkv, &g.ds, &g.datty, &a.qkv, &a.att],
        ));
        let k = launch::attention_backward_key(batch, t, c, h);
        bwd.push(k.bind(ctx, &format!("attention_backward_key block {l}"), [&g.dqkv, &g.datty, &a.qkv, &a.att, &g.ds]));
        if let (Some(q), Some(k)) = (at.q_ln, at.k_ln) {
            // v passes through; q and k through their LayerNorms.
            let (q, k) = (norm_at(q), norm_at(k));
            let label = format!("qk_layernorm_backward_params block {l}");
            let p = launch::qk_layernorm_backward_params(rows, c, h, q, k);
            bwd.push(p.bind(ctx, &label, [b.grads, &g.dqkv, &a.qkv_raw, &a.qk_mean, &a.qk_rstd]));
            let label = format!("qk_layernorm_backward_input block {l}");
            let i = launch::qk_layernorm_backward_input(rows, c, h, q, k);
            bwd.push(i.bind(ctx, &label, [&g.dqkv_raw, &g.dqkv, &a.qkv_raw, b.params, &a.qk_mean, &a.qk_rstd]));
            dense_bwd(&mut bwd, 4 * l, &g.dln, &g.dqkv_raw, &a.ln1.out);
        } else {
            dense_bwd(&mut bwd, 4 * l, &g.dln, &g.dqkv, &a.ln1.out);
        }
        // ln_1 adds into dx, which becomes ∂/∂x, the block's input.
        ln_bwd(&mut bwd, &a.ln1, &g.dln, x, at.ln1, false, &format!("block {l} ln_1"));
    }
    bwd.push(launch::encoder_backward(rows, t, c, v, emb).bind(ctx, "encoder_backward", [b.grads, &g.dx, b.tokens]));
    (fwd, bwd)
}
