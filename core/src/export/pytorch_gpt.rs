//! The transformer's part of the PyTorch script: nanoGPT's module with
//! Stepscope's options (untied head, q/k LayerNorm) and the loss with its
//! z-loss.

use super::py;
use crate::experiment::GptSpec;

/// nanoGPT's model (`bias=True`, no dropout) with Stepscope's options,
/// its parameters named as the checkpoint's tensors
/// (core/src/model/gpt/layout.rs).
pub(super) fn gpt_model(g: &GptSpec) -> String {
    let py_bool = |b: bool| if b { "True" } else { "False" };
    format!(
        r#"
VOCAB_SIZE, CONTEXT, EMBED, HEADS, BLOCKS, MLP_RATIO = {v}, {t}, {c}, {h}, {l}, {r}
TIE_EMBEDDINGS, QK_LAYERNORM = {tie}, {qk}


class CausalSelfAttention(nn.Module):
    """c_attn (3C, C) split into q, k, v; heads of C/H; with QK_LAYERNORM a
    LayerNorm over the head dimension on q and on k, shared by the heads;
    softmax(q k^T / sqrt(C/H)) with the causal mask; c_proj (C, C)
    (core/src/model/gpt/ops.rs)."""

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBED, 3 * EMBED)
        self.c_proj = nn.Linear(EMBED, EMBED)
        if QK_LAYERNORM:
            self.q_ln = nn.LayerNorm(EMBED // HEADS)
            self.k_ln = nn.LayerNorm(EMBED // HEADS)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        if QK_LAYERNORM:
            q, k = self.q_ln(q), self.k_ln(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    """c_fc (rC, C), exact GELU (erf), c_proj (C, rC)."""

    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(EMBED, MLP_RATIO * EMBED)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(MLP_RATIO * EMBED, EMBED)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(EMBED)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(EMBED)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """x = wte[idx] + wpe[0..T); the blocks; ln_f; logits = x head^T, the
    head being wte when TIE_EMBEDDINGS (one tensor, named
    transformer.wte.weight, as the checkpoint stores it)."""

    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB_SIZE, EMBED),
            wpe=nn.Embedding(CONTEXT, EMBED),
            h=nn.ModuleList([Block() for _ in range(BLOCKS)]),
            ln_f=nn.LayerNorm(EMBED),
        ))
        self.lm_head = nn.Linear(EMBED, VOCAB_SIZE, bias=False)
        if TIE_EMBEDDINGS:
            self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        idx = idx.long()  # the rows hold token ids as floats
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


Net = GPT

"#,
        v = g.vocab_size,
        t = g.context,
        c = g.embed,
        h = g.heads,
        l = g.blocks,
        r = g.mlp_ratio,
        tie = py_bool(g.tie_embeddings),
        qk = py_bool(g.qk_layernorm),
    )
}

pub(super) fn gpt_loss(z_loss: f64) -> String {
    format!(
        r#"
Z_LOSS = {z}


def data_loss(outputs, targets, rows):
    """Mean cross-entropy over the positions of `rows` windows (the reported
    loss) and the objective, which adds Z_LOSS * mean(logsumexp(logits)^2)
    (core/src/model/gpt/ops.rs): (loss, objective). Summed over the windows
    given and divided by rows * T, so parts held by several processes add up
    to the micro-batch's mean."""
    logits = outputs.reshape(-1, outputs.shape[-1])
    positions = rows * outputs.shape[1]
    loss = F.cross_entropy(logits, targets.reshape(-1).long(), reduction="sum") / positions
    if Z_LOSS == 0.0:
        return loss, loss
    lse = torch.logsumexp(logits, dim=-1)
    return loss, loss + Z_LOSS * (lse * lse).sum() / positions

"#,
        z = py(z_loss)
    )
}
