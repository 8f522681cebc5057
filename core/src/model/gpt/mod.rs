//! The character-level GPT (nanoGPT's model): its ops, each a
//! forward/backward pair (`ops`). The model kind's layout, engine and data
//! build on these (ARCHITECTURE.md, "Two kinds of model, one house").

pub mod layout;
pub mod model;
pub mod ops;

pub use layout::{fill_parameters, init_parameters, GptShape, GptTensor, Init};
pub use model::{
    inspect_window, memory_floats, Gpt, GptActivations, GptScratch, OpKind, OpTimes, Stage, WindowInspection,
    BLOCK_OPS, OP_OUTPUTS,
};

#[cfg(test)]
pub(crate) mod testing {
    /// Values in [-1, 1) from a small LCG (the tests need no RNG streams).
    pub fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Σ g ⊙ y in f64: the objective J of the finite-difference checks.
    pub fn dot(g: &[f32], y: &[f32]) -> f64 {
        g.iter().zip(y).map(|(&a, &b)| a as f64 * b as f64).sum()
    }

    /// Checks `analytic` (∂J/∂x) against central differences of `objective`
    /// over each element of `x` (h = 1e-2, J in f64): accepted
    /// |analytic − numeric| ≤ 2e-3 + 1e-2·|numeric|.
    pub fn check(name: &str, x: &[f32], analytic: &[f32], objective: impl Fn(&[f32]) -> f64) {
        const H: f32 = 1e-2;
        assert_eq!(x.len(), analytic.len(), "{name}");
        for i in 0..x.len() {
            let (mut plus, mut minus) = (x.to_vec(), x.to_vec());
            plus[i] += H;
            minus[i] -= H;
            let numeric = (objective(&plus) - objective(&minus)) / (2.0 * H as f64);
            let a = analytic[i] as f64;
            assert!((a - numeric).abs() <= 2e-3 + 1e-2 * numeric.abs(), "{name}[{i}]: analytic {a}, numeric {numeric}");
        }
    }
}
