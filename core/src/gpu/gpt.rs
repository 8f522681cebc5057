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

use std::sync::Mutex;

use wgpu::util::DeviceExt;

use super::buffers::Buffers;
use super::engine::GpuEngine;
use super::launch::{self, EmbeddingsAt, NormAt};
use super::matmul::{self, LayerMatmuls, MatmulVariant};
use super::params::ATTENTION_MAX_T;
use super::plan::Dispatch;
use super::probe::seconds_per_dispatch;
use super::GpuContext;
use crate::error::Result;
use crate::experiment::{Activation, Experiment};
use crate::model::gpt::{Gpt, GptShape};
use crate::model::LayerShape;
use crate::rng::Rng;

/// A LayerNorm's output and the per-row mean and 1/σ backward needs.
#[derive(Clone)]
pub struct NormBuffers {
    pub out: wgpu::Buffer,
    pub mean: wgpu::Buffer,
    pub rstd: wgpu::Buffer,
}

/// What forward keeps of one block for backward (`BlockActs`). With
/// activation checkpointing every block's are the same buffers but its
/// output, `res3`: backward runs the block's forward again into them.
#[derive(Clone)]
pub struct BlockBuffers {
    pub ln1: NormBuffers,
    pub qkv: wgpu::Buffer,
    /// With q/k LayerNorm: c_attn's output before it, and each head's q
    /// and k mean and 1/σ (16 bytes each without).
    pub qkv_raw: wgpu::Buffer,
    pub qk_mean: wgpu::Buffer,
    pub qk_rstd: wgpu::Buffer,
    pub att: wgpu::Buffer,
    pub atty: wgpu::Buffer,
    pub res2: wgpu::Buffer,
    pub ln2: NormBuffers,
    pub fch: wgpu::Buffer,
    pub fch_gelu: wgpu::Buffer,
    pub res3: wgpu::Buffer,
}

/// The transformer's buffers for a micro-batch of B windows.
pub struct GptBuffers {
    pub shape: GptShape,
    pub batch: usize,
    /// Activation checkpointing: the blocks share their buffers but their
    /// outputs, and backward recomputes each block's forward.
    pub checkpointing: bool,
    pub encoded: wgpu::Buffer,
    pub blocks: Vec<BlockBuffers>,
    pub lnf: NormBuffers,
    pub logits: wgpu::Buffer,
    /// Per position: its cross-entropy and logsumexp.
    pub losses: wgpu::Buffer,
    // Backward's working buffers.
    pub dlogits: wgpu::Buffer,
    pub dlnf: wgpu::Buffer,
    /// ∂L/∂(the residual stream), through every block.
    pub dx: wgpu::Buffer,
    pub dhidden: wgpu::Buffer,
    pub dhidden_gelu: wgpu::Buffer,
    pub dln: wgpu::Buffer,
    pub datty: wgpu::Buffer,
    pub dqkv: wgpu::Buffer,
    /// ∂L/∂(c_attn's output) through the q/k LayerNorm (16 bytes without).
    pub dqkv_raw: wgpu::Buffer,
    /// ∂L/∂(attention scores) of one block, (B, H, T, T).
    pub ds: wgpu::Buffer,
    /// The dense kernels' second output where the layer is linear: written,
    /// never read (and bound, unread, as their z_in and a_in in backward).
    pub discard: wgpu::Buffer,
    /// Bytes: (activations, attention probabilities, backward scratch).
    pub bytes: (u64, u64, u64),
    /// Which attention kernels the plan records (`AttentionVariant`).
    pub attention: AttentionVariant,
}

/// Two ways to run attention's forward and its query rows' backward, the
/// same sums in the same order (the same values): a workgroup of 64 per
/// query row, its scores in workgroup memory behind barriers, or an
/// invocation per query row that takes its scores again instead of keeping
/// them and needs no barrier. The engine times both at the run's shape on
/// the adapter and keeps the faster (`GpuEngine::choose_attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionVariant {
    Workgroup,
    Rows,
}

impl AttentionVariant {
    pub const ALL: [AttentionVariant; 2] = [AttentionVariant::Workgroup, AttentionVariant::Rows];

    pub fn name(self) -> &'static str {
        match self {
            AttentionVariant::Workgroup => "a workgroup per query row",
            AttentionVariant::Rows => "an invocation per query row",
        }
    }
}

/// Why the GPU engine cannot train this transformer yet, or None.
pub fn unsupported(e: &Experiment) -> Option<String> {
    unsupported_shape(&e.gpt()?.shape())
}

/// Why the GPU engine's kernels cannot run this transformer yet, or None.
pub fn unsupported_shape(g: &GptShape) -> Option<String> {
    if g.context > ATTENTION_MAX_T {
        return Some(format!(
            "the GPU engine's attention keeps a query row's scores in workgroup memory, so a context of at most \
             {ATTENTION_MAX_T} (model.context is {})",
            g.context
        ));
    }
    None
}

/// Refuses, by name, a transformer whose largest buffer passes what the
/// device binds (WebGPU guarantees 128 MiB a storage binding and 256 MiB
/// a buffer): one block's attention probabilities (B·H·T²), the logits
/// (B·T·V), the MLP's hidden activations (B·T·4C) grow past it first.
pub fn check_limits(limits: &wgpu::Limits, s: &GptShape, batch: usize) -> Result<()> {
    let rows = (batch * s.context) as u64;
    let (t, c, v, h) = (s.context as u64, s.embed as u64, s.vocab_size as u64, s.heads as u64);
    let hidden = s.mlp_ratio as u64 * c;
    let largest = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size);
    let buffers = [
        ("one block's attention probabilities (B·H·T²)", batch as u64 * h * t * t),
        ("the logits (B·T·V)", rows * v),
        ("the MLP's hidden activations (B·T·hidden)", rows * hidden),
        ("q, k and v (B·T·3C)", rows * 3 * c),
    ];
    for (what, floats) in buffers {
        if 4 * floats > largest {
            return Err(crate::Error::Experiment(format!(
                "{what} take {:.1} MiB, past the {:.0} MiB this GPU binds at once: a smaller batch_size or \
                 context trains on the GPU engine, or this one on the CPU engine",
                (4 * floats) as f64 / f64::from(1 << 20),
                largest as f64 / f64::from(1 << 20)
            )));
        }
    }
    Ok(())
}

fn storage(device: &wgpu::Device, label: &str, floats: usize, bytes: &mut u64) -> wgpu::Buffer {
    let size = (4 * floats as u64).max(16);
    *bytes += 4 * floats as u64;
    device.create_buffer(&wgpu::BufferDescriptor {
        label: Some(label),
        size,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    })
}

impl GptBuffers {
    pub fn new(device: &wgpu::Device, shape: &GptShape, batch: usize, checkpointing: bool) -> GptBuffers {
        let (t, c, v, h) = (shape.context, shape.embed, shape.vocab_size, shape.heads);
        let rows = batch * t;
        let hidden = shape.mlp_ratio * c;
        let qk = |n: usize| if shape.qk_layernorm { n } else { 0 };
        let (mut acts, mut att, mut scratch) = (0u64, 0u64, 0u64);
        let norm = |label: &str, acts: &mut u64| NormBuffers {
            out: storage(device, &format!("{label} out"), rows * c, acts),
            mean: storage(device, &format!("{label} mean"), rows, acts),
            rstd: storage(device, &format!("{label} rstd"), rows, acts),
        };
        let encoded = storage(device, "encoded", rows * c, &mut acts);
        let block = |l: usize, acts: &mut u64, att: &mut u64| {
            let name = |s: &str| format!("block {l} {s}");
            BlockBuffers {
                ln1: norm(&name("ln_1"), acts),
                qkv: storage(device, &name("qkv"), rows * 3 * c, acts),
                qkv_raw: storage(device, &name("qkv before q/k LayerNorm"), qk(rows * 3 * c), acts),
                qk_mean: storage(device, &name("q/k mean"), qk(rows * 2 * h), acts),
                qk_rstd: storage(device, &name("q/k rstd"), qk(rows * 2 * h), acts),
                att: storage(device, &name("att"), batch * h * t * t, att),
                atty: storage(device, &name("atty"), rows * c, acts),
                res2: storage(device, &name("res2"), rows * c, acts),
                ln2: norm(&name("ln_2"), acts),
                fch: storage(device, &name("fch"), rows * hidden, acts),
                fch_gelu: storage(device, &name("fch_gelu"), rows * hidden, acts),
                res3: storage(device, &name("res3"), rows * c, acts),
            }
        };
        let blocks: Vec<BlockBuffers> = if checkpointing && shape.blocks > 0 {
            // One block's buffers for all, each block its own output.
            let shared = block(0, &mut acts, &mut att);
            let mut blocks = vec![shared.clone()];
            for l in 1..shape.blocks {
                let res3 = storage(device, &format!("block {l} res3"), rows * c, &mut acts);
                blocks.push(BlockBuffers { res3, ..shared.clone() });
            }
            blocks
        } else {
            (0..shape.blocks).map(|l| block(l, &mut acts, &mut att)).collect()
        };
        let lnf = norm("ln_f", &mut acts);
        let logits = storage(device, "logits", rows * v, &mut acts);
        let losses = storage(device, "losses", 2 * rows, &mut acts);
        let widest = (3 * c).max(hidden).max(v);
        GptBuffers {
            shape: *shape,
            batch,
            checkpointing,
            encoded,
            blocks,
            lnf,
            logits,
            losses,
            dlogits: storage(device, "dlogits", rows * v, &mut scratch),
            dlnf: storage(device, "dlnf", rows * c, &mut scratch),
            dx: storage(device, "dx", rows * c, &mut scratch),
            dhidden: storage(device, "dhidden", rows * hidden, &mut scratch),
            dhidden_gelu: storage(device, "dhidden_gelu", rows * hidden, &mut scratch),
            dln: storage(device, "dln", rows * c, &mut scratch),
            datty: storage(device, "datty", rows * c, &mut scratch),
            dqkv: storage(device, "dqkv", rows * 3 * c, &mut scratch),
            dqkv_raw: storage(device, "dqkv before q/k LayerNorm", qk(rows * 3 * c), &mut scratch),
            ds: storage(device, "ds", batch * h * t * t, &mut scratch),
            discard: storage(device, "discard", rows * widest, &mut scratch),
            bytes: (0, 0, 0),
            attention: AttentionVariant::Workgroup,
        }
        .with_bytes(acts, att, scratch)
    }

    fn with_bytes(mut self, acts: u64, att: u64, scratch: u64) -> GptBuffers {
        self.bytes = (acts, att, scratch);
        self
    }
}

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

/// Seconds by adapter and attention shape (B, T, C, H): [workgroup, rows].
static ATTENTION_TIMES: Mutex<Vec<(String, [f64; 2])>> = Mutex::new(Vec::new());

/// Seconds of one attention forward and one query-row backward of
/// `variant` at (B, T, C, H) on seeded data.
pub async fn time_attention(
    ctx: &GpuContext,
    variant: AttentionVariant,
    (b, t, c, h): (usize, usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let mut rng = Rng::new((b * 31 + t * 7 + c) as u64, 9);
    let mut values = |count: usize| -> Vec<f32> { (0..count).map(|_| rng.uniform(-1.0, 1.0) as f32).collect() };
    let storage = |label: &str, v: &[f32]| {
        ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(v),
            usage: wgpu::BufferUsages::STORAGE,
        })
    };
    let rows = b * t;
    let (qkv, y, att) = (
        storage("qkv", &values(rows * 3 * c)),
        storage("y", &values(rows * c)),
        storage("att", &values(b * h * t * t)),
    );
    let (dqkv, ds, dy) = (
        storage("dqkv", &values(rows * 3 * c)),
        storage("ds", &values(b * h * t * t)),
        storage("dy", &values(rows * c)),
    );
    let (forward, query) = match variant {
        AttentionVariant::Workgroup => {
            (launch::attention_forward(b, t, c, h), launch::attention_backward_query(b, t, c, h))
        }
        AttentionVariant::Rows => {
            (launch::attention_forward_rows(b, t, c, h), launch::attention_backward_query_rows(b, t, c, h))
        }
    };
    let forward = forward.bind(ctx, "timed attention forward", [&y, &att, &qkv]);
    let query = query.bind(ctx, "timed attention backward", [&dqkv, &ds, &dy, &qkv, &att]);
    let mut seconds = 0.0;
    for d in [forward, query] {
        seconds += seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await?;
    }
    Ok(seconds)
}

/// Seconds of one key-column backward (`attention_backward_key`, the same
/// in both variants) at (B, T, C, H) on seeded data.
pub async fn time_attention_key(
    ctx: &GpuContext,
    (b, t, c, h): (usize, usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let mut rng = Rng::new((b * 31 + t * 7 + c) as u64, 10);
    let mut values = |count: usize| -> Vec<f32> { (0..count).map(|_| rng.uniform(-1.0, 1.0) as f32).collect() };
    let storage = |label: &str, v: &[f32]| {
        ctx.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: bytemuck::cast_slice(v),
            usage: wgpu::BufferUsages::STORAGE,
        })
    };
    let rows = b * t;
    let (dqkv, dy, qkv) = (
        storage("dqkv", &values(rows * 3 * c)),
        storage("dy", &values(rows * c)),
        storage("qkv", &values(rows * 3 * c)),
    );
    let (att, ds) = (storage("att", &values(b * h * t * t)), storage("ds", &values(b * h * t * t)));
    let d = launch::attention_backward_key(b, t, c, h).bind(ctx, "timed attention key", [&dqkv, &dy, &qkv, &att, &ds]);
    seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await
}

impl GpuEngine {
    /// The attention kernels the plan records (a transformer's).
    pub fn attention(&self) -> Option<AttentionVariant> {
        self.buffers.gpt.as_ref().map(|g| g.attention)
    }

    /// Records `variant`'s attention kernels from the next step on: the
    /// same values either way (twin-tested), only the speed differs.
    pub fn set_attention(&mut self, variant: AttentionVariant) -> Result<()> {
        match self.buffers.gpt.as_mut() {
            Some(g) if g.attention != variant => g.attention = variant,
            _ => return Ok(()),
        }
        self.rebuild_plan()
    }

    /// Times both attention variants at this run's shape on this adapter
    /// (or takes the figures measured before) and records the faster:
    /// [workgroup, rows] seconds of a forward and a query-row backward, or
    /// None for an MLP.
    pub async fn choose_attention(&mut self) -> Result<Option<[f64; 2]>> {
        let Some(shape) = self.layout.gpt else { return Ok(None) };
        let dims = (self.experiment.batch_size, shape.context, shape.embed, shape.heads);
        let key = format!("{}|{dims:?}", self.ctx.describe());
        let cached =
            ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).map(|c| c.1);
        let seconds = match cached {
            Some(s) => s,
            None => {
                let mut s = [0.0; 2];
                for (i, v) in AttentionVariant::ALL.into_iter().enumerate() {
                    s[i] = time_attention(&self.ctx, v, dims, 2e-3).await?;
                }
                ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).push((key, s));
                s
            }
        };
        // Ties (within 5 %) keep a workgroup per row, the one that scales to long windows.
        let variant = if seconds[1] < 0.95 * seconds[0] { AttentionVariant::Rows } else { AttentionVariant::Workgroup };
        self.set_attention(variant)?;
        Ok(Some(seconds))
    }
}
