//! The transformer's buffers on the GPU engine (what forward keeps for
//! backward, per block or shared by all with activation checkpointing),
//! and the limits that refuse, by name, a transformer the device cannot
//! hold.

use super::gpt_attention::AttentionVariant;
use super::params::ATTENTION_MAX_T;
use crate::error::Result;
use crate::experiment::Experiment;
use crate::model::gpt::GptShape;

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
