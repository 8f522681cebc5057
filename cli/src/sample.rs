//! `stepscope sample CHECKPOINT [--prompt TEXT] [--tokens N]
//! [--temperature T] [--top-k K] [--seed S]`: text from a trained
//! transformer (nanoGPT's `sample.py`). The checkpoint carries its
//! vocabulary, so no data is needed; the same seed gives the same text.
//! `--backend gpu` runs the forward on the GPU engine (`GpuSampler`); a
//! draw that fell within what the GPU's logit tolerance can turn is checked
//! against the CPU's forward of the same window, and the command says
//! whether the CPU engine writes the same text or from which token not.

use std::sync::Arc;

use stepscope_core::engine::{Sampler, Sampling};
use stepscope_core::gpu::{logit_bound, GpuContext, GpuSampler, LOGIT_TOLERANCE};
use stepscope_core::model::gpt::{Gpt, GptActivations};
use stepscope_core::trainer::{block_on, Backend};
use stepscope_core::Error;

use crate::export::read_checkpoint;
use crate::Failure;

/// Most tokens one call writes: about a minute of the largest model's
/// forward passes, and a bound on what a typo can ask for.
pub const MAX_SAMPLE_TOKENS: usize = 100_000;

pub fn run(path: &str, prompt: &str, how: Sampling, backend: Backend) -> Result<(), Failure> {
    if !(how.temperature.is_finite() && how.temperature > 0.0) {
        return Err(Failure::usage(format!("--temperature must be a finite number > 0, got {}", how.temperature)));
    }
    if how.top_k == Some(0) {
        return Err(Failure::usage("--top-k must be at least 1"));
    }
    if how.tokens > MAX_SAMPLE_TOKENS {
        return Err(Failure::usage(format!("--tokens must be at most {MAX_SAMPLE_TOKENS}, got {}", how.tokens)));
    }
    let state = read_checkpoint(path)?;
    let Some(spec) = state.experiment.gpt() else {
        return Err(Failure::usage(format!("`{path}` is an MLP's checkpoint: sample reads a gpt model's")));
    };
    let Some(vocabulary) = &state.vocabulary else {
        return Err(Failure::usage(format!("`{path}` stores no vocabulary: the tokens cannot be turned into text")));
    };
    if prompt.is_empty() {
        return Err(Failure::usage("--prompt must hold at least one character"));
    }
    let ids = vocabulary.encode(prompt).map_err(|e| {
        let why = match e {
            Error::Text(why) => why,
            other => other.to_string(),
        };
        Failure::usage(format!("--prompt: {why}"))
    })?;
    let model = Gpt::new(spec.shape());
    let mut sampler = Sampler::new(&ids, &how);
    // GPU draws that logits within the tolerance could have turned are
    // checked against the CPU's own forward of the same window.
    let (mut checked, mut differs) = (0, None);
    match backend {
        Backend::Cpu => {
            while !sampler.done() {
                sampler.next_token(&model, &state.params, 0);
            }
        }
        Backend::Gpu => {
            let ctx = Arc::new(GpuContext::new_blocking()?);
            let mut gpu = GpuSampler::new(ctx, spec.shape(), &state.params)?;
            let mut acts = GptActivations::default();
            while !sampler.done() {
                let window = sampler.window(spec.context).to_vec();
                let logits = block_on(gpu.logits(&window))?;
                let token = sampler.draw(&logits, 0).token;
                if differs.is_none() && sampler.last_margin() < logit_bound(&logits, how.temperature) {
                    checked += 1;
                    let (t, v) = (window.len(), spec.vocab_size);
                    model.forward_windows(&mut acts, &state.params, &window, &vec![0; t], t);
                    if sampler.redraw(&acts.logits[(t - 1) * v..t * v]) != token {
                        differs = Some(sampler.written().len());
                    }
                }
            }
        }
    }
    let written = sampler.written();
    let text = vocabulary.decode(written)?;
    print!("{prompt}{text}");
    if !text.ends_with('\n') {
        println!();
    }
    if backend == Backend::Gpu {
        match differs {
            None => eprintln!(
                "the CPU engine writes the same text: {checked} of {} draws fell within what logits {LOGIT_TOLERANCE:e} (relative) apart can turn, and the CPU's forward picked the same token there",
                written.len()
            ),
            Some(n) => eprintln!(
                "from token {n} on the CPU engine writes another text: that draw fell within what logits {LOGIT_TOLERANCE:e} (relative) apart can turn, and the CPU's forward picked another token"
            ),
        }
    }
    Ok(())
}
