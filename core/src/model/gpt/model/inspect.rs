//! What the page shows of one window of text (issue 28, "Inside
//! attention"), from the model's own forward: every block's attention
//! probabilities P as the forward computed them, and the numbers that come
//! before a loss spike in the literature (attention entropy collapse, the
//! growth of the largest attention logit, Zhai et al. 2023, Wortsman et
//! al. 2023, Dehghani et al. 2023; the residual stream's norm; the output
//! logits' logsumexp, which the z-loss penalises).

use super::{Gpt, GptActivations};

/// One window seen through the model. Per block `l`: `attention[l]` is
/// (H, T, T) row-major, row `i` the query at position `i` (zeros past it,
/// the causal mask).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WindowInspection {
    pub t: usize,
    pub heads: usize,
    pub attention: Vec<Vec<f32>>,
    /// Per block, per head: the mean over the T queries of the entropy of
    /// the query's attention row, −Σ p·ln p in nats (0: each query looks at
    /// one key; ln(i + 1) at most for the query at position i).
    pub entropy: Vec<Vec<f32>>,
    /// Per block, per head: the largest attention logit q·k/√hs over the
    /// causal pairs (before the softmax; with `qk_layernorm`, of the
    /// normalised q and k, as the forward uses them).
    pub max_logit: Vec<Vec<f32>>,
    /// Per block: the mean over positions of the residual stream's L2 norm
    /// after the block.
    pub residual_norm: Vec<f32>,
    /// The mean over positions of the output logits' logsumexp.
    pub lse: f32,
    /// The window's cross-entropy (mean over its positions).
    pub loss: f32,
}

/// Runs the forward over one window (`ids`, its next tokens `targets`, of
/// equal length t ≤ T) into `acts`, which must not be checkpointing (P is
/// kept per block only without it), and reads the window's views off it.
pub fn inspect_window(
    model: &Gpt,
    acts: &mut GptActivations,
    params: &[f32],
    ids: &[u32],
    targets: &[u32],
) -> WindowInspection {
    let t = ids.len();
    let s = &model.shape;
    let (c, h) = (s.embed, s.heads);
    let hs = c / h;
    acts.checkpointing = false;
    let (loss, _) = model.forward_windows(acts, params, ids, targets, t);
    let scale = 1.0 / (hs as f32).sqrt();
    let mut out = WindowInspection { t, heads: h, loss, ..WindowInspection::default() };
    for block in &acts.blocks {
        let att = &block.att[..h * t * t];
        out.attention.push(att.to_vec());
        out.entropy.push(
            att.chunks_exact(t * t)
                .map(|head| {
                    let total: f64 = head
                        .chunks_exact(t)
                        .map(|row| {
                            row.iter().filter(|&&p| p > 0.0).map(|&p| -(p as f64) * (p as f64).ln()).sum::<f64>()
                        })
                        .sum();
                    (total / t as f64) as f32
                })
                .collect(),
        );
        let qkv = &block.qkv;
        out.max_logit.push(
            (0..h)
                .map(|hi| {
                    let mut max = f32::NEG_INFINITY;
                    for i in 0..t {
                        let q = &qkv[i * 3 * c + hi * hs..][..hs];
                        for j in 0..=i {
                            let k = &qkv[j * 3 * c + c + hi * hs..][..hs];
                            let dot: f32 = q.iter().zip(k).map(|(a, b)| a * b).sum();
                            max = max.max(dot * scale);
                        }
                    }
                    max
                })
                .collect(),
        );
        let norms: f64 =
            block.res3.chunks_exact(c).map(|x| x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt()).sum();
        out.residual_norm.push((norms / t as f64) as f32);
    }
    out.lse = (acts.lse[..t].iter().map(|&l| l as f64).sum::<f64>() / t as f64) as f32;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::gpt::{init_parameters, GptShape};
    use crate::rng::{stream, Rng};

    fn shape(qk_layernorm: bool) -> GptShape {
        GptShape {
            vocab_size: 7,
            context: 5,
            embed: 6,
            heads: 2,
            blocks: 2,
            mlp_ratio: 4,
            tie_embeddings: true,
            qk_layernorm,
        }
    }

    /// P is the forward's own (each row a distribution over the keys up to
    /// the query); entropy, the largest logit and the residual norm agree
    /// with their definitions computed here another way; the loss is the
    /// forward's.
    #[test]
    fn a_window_is_read_off_the_forward() {
        for qk in [false, true] {
            let shape = shape(qk);
            let model = Gpt::new(shape);
            let params = init_parameters(&shape, &mut Rng::new(3, stream::INIT));
            let ids = [1u32, 4, 2, 6];
            let targets = [4u32, 2, 6, 0];
            let mut acts = GptActivations::new(true);
            let seen = inspect_window(&model, &mut acts, &params, &ids, &targets);
            let mut plain = GptActivations::new(false);
            let (loss, _) = model.forward_windows(&mut plain, &params, &ids, &targets, 4);
            assert_eq!(seen.loss, loss);
            assert_eq!((seen.t, seen.heads, seen.attention.len()), (4, 2, 2));
            for l in 0..2 {
                assert_eq!(seen.attention[l], plain.attention(l).unwrap()[..2 * 16]);
                for hi in 0..2 {
                    let head = &seen.attention[l][hi * 16..][..16];
                    let mut entropy = 0.0f64;
                    for i in 0..4 {
                        let row = &head[i * 4..][..4];
                        assert!((row[..=i].iter().sum::<f32>() - 1.0).abs() < 1e-6);
                        assert!(row[i + 1..].iter().all(|&p| p == 0.0), "the causal mask");
                        entropy -= row[..=i].iter().map(|&p| p as f64 * (p as f64).ln()).sum::<f64>();
                    }
                    assert!((seen.entropy[l][hi] as f64 - entropy / 4.0).abs() < 1e-6);
                    // Logit differences are log-probability differences:
                    // s_ij − s_ik = ln p_ij − ln p_ik, and the largest
                    // logit is at the largest p of its row.
                    let qkv = &plain.blocks[l].qkv;
                    let logit = |i: usize, j: usize| -> f32 {
                        let q = &qkv[i * 18 + hi * 3..][..3];
                        let k = &qkv[j * 18 + 6 + hi * 3..][..3];
                        q.iter().zip(k).map(|(a, b)| a * b).sum::<f32>() * (1.0 / 3f32.sqrt())
                    };
                    let row = &head[3 * 4..][..4];
                    assert!(((logit(3, 0) - logit(3, 2)) - (row[0].ln() - row[2].ln())).abs() < 1e-4);
                    let best = (0..4).flat_map(|i| (0..=i).map(move |j| (i, j))).map(|(i, j)| logit(i, j));
                    assert_eq!(seen.max_logit[l][hi], best.fold(f32::NEG_INFINITY, f32::max));
                }
                let res = &plain.blocks[l].res3;
                let norm: f64 =
                    res.chunks_exact(6).map(|x| x.iter().map(|&v| (v * v) as f64).sum::<f64>().sqrt()).sum();
                assert!((seen.residual_norm[l] as f64 - norm / 4.0).abs() < 1e-5);
            }
            let lse: f64 = plain.lse.iter().map(|&l| l as f64).sum::<f64>() / 4.0;
            assert!((seen.lse as f64 - lse).abs() < 1e-6);
        }
    }
}
