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
}
