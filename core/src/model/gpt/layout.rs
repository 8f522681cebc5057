//! The GPT's named tensors in one flat layout (the seam every other part
//! of Stepscope sees, ARCHITECTURE.md): nanoGPT's `state_dict` names and
//! shapes, in its order, and its weight-decay groups (tensors of two or
//! more dimensions decay; biases and LayerNorm parameters do not).

/// The model's shape (`"model": {"kind": "gpt", …}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptShape {
    pub vocab_size: usize,
    /// T, tokens per window.
    pub context: usize,
    /// C, the model width.
    pub embed: usize,
    pub heads: usize,
    pub blocks: usize,
    /// The MLP's hidden width as a multiple of C.
    pub mlp_ratio: usize,
    /// The output head is the token embedding (one tensor, `wte`).
    pub tie_embeddings: bool,
    /// LayerNorm over the head dimension on q and k.
    pub qk_layernorm: bool,
}

impl crate::experiment::GptSpec {
    /// The transformer's shape, as the engine and the estimates read it.
    pub fn shape(&self) -> GptShape {
        GptShape {
            vocab_size: self.vocab_size,
            context: self.context,
            embed: self.embed,
            heads: self.heads,
            blocks: self.blocks,
            mlp_ratio: self.mlp_ratio,
            tie_embeddings: self.tie_embeddings,
            qk_layernorm: self.qk_layernorm,
        }
    }
}

/// One named tensor of the flat layout.
#[derive(Clone, Debug, PartialEq)]
pub struct GptTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
    pub len: usize,
    /// nanoGPT's groups: two or more dimensions decay.
    pub decays: bool,
    /// How it is initialised.
    pub init: Init,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// N(0, std²).
    Normal(f32),
    Zeros,
    Ones,
}

impl GptShape {
    /// The tensors, in nanoGPT's `state_dict` order, at their offsets.
    pub fn tensors(&self) -> Vec<GptTensor> {
        let (v, t, c) = (self.vocab_size, self.context, self.embed);
        let (hidden, hs) = (self.mlp_ratio * c, c / self.heads.max(1));
        // nanoGPT: N(0, 0.02) for linear weights and embeddings,
        // N(0, 0.02/√(2L)) for both residual projections (`c_proj`).
        let std = Init::Normal(0.02);
        let proj = Init::Normal(0.02 / (2.0 * self.blocks as f32).sqrt());
        let mut specs: Vec<(String, Vec<usize>, Init)> = vec![
            ("transformer.wte.weight".into(), vec![v, c], std),
            ("transformer.wpe.weight".into(), vec![t, c], std),
        ];
        let norm = |specs: &mut Vec<(String, Vec<usize>, Init)>, name: String, n: usize| {
            specs.push((format!("{name}.weight"), vec![n], Init::Ones));
            specs.push((format!("{name}.bias"), vec![n], Init::Zeros));
        };
        for i in 0..self.blocks {
            let block = format!("transformer.h.{i}");
            norm(&mut specs, format!("{block}.ln_1"), c);
            specs.push((format!("{block}.attn.c_attn.weight"), vec![3 * c, c], std));
            specs.push((format!("{block}.attn.c_attn.bias"), vec![3 * c], Init::Zeros));
            specs.push((format!("{block}.attn.c_proj.weight"), vec![c, c], proj));
            specs.push((format!("{block}.attn.c_proj.bias"), vec![c], Init::Zeros));
            if self.qk_layernorm {
                norm(&mut specs, format!("{block}.attn.q_ln"), hs);
                norm(&mut specs, format!("{block}.attn.k_ln"), hs);
            }
            norm(&mut specs, format!("{block}.ln_2"), c);
            specs.push((format!("{block}.mlp.c_fc.weight"), vec![hidden, c], std));
            specs.push((format!("{block}.mlp.c_fc.bias"), vec![hidden], Init::Zeros));
            specs.push((format!("{block}.mlp.c_proj.weight"), vec![c, hidden], proj));
            specs.push((format!("{block}.mlp.c_proj.bias"), vec![c], Init::Zeros));
        }
        norm(&mut specs, "transformer.ln_f".into(), c);
        if !self.tie_embeddings {
            specs.push(("lm_head.weight".into(), vec![v, c], std));
        }
        let mut offset = 0;
        specs
            .into_iter()
            .map(|(name, shape, init)| {
                let len = shape.iter().product();
                let tensor = GptTensor { name, decays: shape.len() >= 2, shape, offset, len, init };
                offset += len;
                tensor
            })
            .collect()
    }

    /// P, the parameters of the flat buffer.
    pub fn parameter_count(&self) -> usize {
        self.tensors().last().map_or(0, |t| t.offset + t.len)
    }

    /// FLOPs of one block's forward over `batch` windows (2 per
    /// multiply-add): its matmuls, 2·B·T·(3C² + C² + 2·C·rC), and
    /// attention's q·kᵀ and P·v over the causal pairs it computes,
    /// 2·2·B·C·T(T+1)/2. LayerNorms, GELU and the softmax are left out, as
    /// in nanoGPT's `estimate_mfu`.
    pub fn block_forward_flops(&self, batch: usize) -> f64 {
        let (b, t, c) = (batch as f64, self.context as f64, self.embed as f64);
        let hidden = self.mlp_ratio as f64 * c;
        2.0 * b * t * (4.0 * c * c + 2.0 * c * hidden) + 2.0 * b * c * t * (t + 1.0)
    }

    /// FLOPs of one forward and one backward over `batch` windows: every
    /// block's and the head's, 2·B·T·C·V; backward twice forward (each
    /// product has two gradients; the embedding's backward is a gather).
    pub fn step_flops(&self, batch: usize) -> (f64, f64) {
        let head = 2.0 * (batch * self.context) as f64 * (self.embed * self.vocab_size) as f64;
        let forward = self.blocks as f64 * self.block_forward_flops(batch) + head;
        (forward, 2.0 * forward)
    }
}

/// nanoGPT's `_init_weights`, tensor by tensor in layout order from
/// `rng` (the seed's init stream): N(0, 0.02) for linear weights and
/// embeddings, N(0, 0.02/√(2L)) for the residual projections, zero
/// biases, LayerNorm weight 1 and bias 0. Normals come from
/// `Rng::normal_portable` (f64, rounded to f32 once).
pub fn init_parameters(shape: &GptShape, rng: &mut crate::rng::Rng) -> Vec<f32> {
    let mut params = vec![0.0f32; shape.parameter_count()];
    fill_parameters(&mut params, shape, rng);
    params
}

/// `init_parameters` into `params` (`shape.parameter_count()` of them).
pub fn fill_parameters(params: &mut [f32], shape: &GptShape, rng: &mut crate::rng::Rng) {
    for t in &shape.tensors() {
        let values = &mut params[t.offset..t.offset + t.len];
        match t.init {
            Init::Normal(std) => {
                values.iter_mut().for_each(|p| *p = rng.normal_portable(0.0, (std as f64).powi(2)) as f32)
            }
            Init::Zeros => values.fill(0.0),
            Init::Ones => values.fill(1.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FLOPs counted by hand for T 2, C 4, H 2, V 3, one block, one
    /// window: per token the block's matmuls are 3C² + C² + 2·C·4C = 192
    /// multiply-adds, attention's 3 causal pairs q·k and P·v over C 24 in
    /// all, the head C·V = 12 a token.
    #[test]
    fn flops_are_counted_from_the_shape() {
        let s =
            GptShape { vocab_size: 3, context: 2, embed: 4, heads: 2, blocks: 1, mlp_ratio: 4, ..shape(true, false) };
        assert_eq!(s.block_forward_flops(1), 2.0 * (192.0 * 2.0 + 24.0));
        assert_eq!(s.step_flops(1), (816.0 + 48.0, 2.0 * 864.0));
        assert_eq!(s.step_flops(3).0, 3.0 * 864.0);
    }

    fn shape(tie: bool, qk: bool) -> GptShape {
        GptShape {
            vocab_size: 65,
            context: 64,
            embed: 128,
            heads: 4,
            blocks: 4,
            mlp_ratio: 4,
            tie_embeddings: tie,
            qk_layernorm: qk,
        }
    }

    #[test]
    fn nanogpts_macbook_configuration_has_its_parameter_count() {
        // nanoGPT's Shakespeare-char "macbook" model (4 blocks, 4 heads,
        // embed 128, context 64, 65 characters, bias, tied head):
        // wte 65·128 + wpe 64·128 + 4 blocks of 12·128² + 13·128 (the
        // linears 4C² + 8C², their biases 3C + C + 4C + C, two LayerNorms
        // 4C) + ln_f 2C = 8,320 + 8,192 + 4·198,272 + 256 = 809,856,
        // which nanoGPT prints as 0.80M less wpe's 8,192: 801,664.
        let s = shape(true, false);
        assert_eq!(s.parameter_count(), 809_856);
        assert_eq!(s.parameter_count() - 64 * 128, 801_664);
    }

    #[test]
    fn names_offsets_and_decay_groups_follow_nanogpt() {
        let tensors = shape(false, true).tensors();
        let names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names[..4],
            [
                "transformer.wte.weight",
                "transformer.wpe.weight",
                "transformer.h.0.ln_1.weight",
                "transformer.h.0.ln_1.bias"
            ]
        );
        assert!(
            names.contains(&"transformer.h.3.attn.q_ln.weight") && names.contains(&"transformer.h.0.attn.k_ln.bias")
        );
        assert_eq!(names.last(), Some(&"lm_head.weight"));
        // Contiguous, no gaps.
        for pair in tensors.windows(2) {
            assert_eq!(pair[0].offset + pair[0].len, pair[1].offset);
        }
        for t in &tensors {
            assert_eq!(t.decays, t.shape.len() >= 2, "{}", t.name);
            let is_proj = t.name.ends_with("c_proj.weight");
            assert_eq!(
                matches!(t.init, Init::Normal(s) if (s - 0.02 / 8f32.sqrt()).abs() < 1e-9),
                is_proj,
                "{}",
                t.name
            );
        }
        let q_ln = tensors.iter().find(|t| t.name == "transformer.h.0.attn.q_ln.weight").unwrap();
        assert_eq!((q_ln.shape.clone(), q_ln.init), (vec![32], Init::Ones));
        // The initial values follow the same rules.
        let s = shape(false, true);
        let p = init_parameters(&s, &mut crate::rng::Rng::new(3, crate::rng::stream::INIT));
        for t in &tensors {
            let v = &p[t.offset..t.offset + t.len];
            match t.init {
                Init::Ones => assert!(v.iter().all(|&x| x == 1.0), "{}", t.name),
                Init::Zeros => assert!(v.iter().all(|&x| x == 0.0), "{}", t.name),
                Init::Normal(std) => {
                    let sd = (v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
                    assert!((sd / std as f64 - 1.0).abs() < 0.1, "{}: sd {sd} against {std}", t.name);
                }
            }
        }
        // Tied: no lm_head; untied adds V·C.
        assert_eq!(shape(false, false).parameter_count() - shape(true, false).parameter_count(), 65 * 128);
    }
}
