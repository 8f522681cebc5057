//! `stepscope sample CHECKPOINT [--prompt TEXT] [--tokens N]
//! [--temperature T] [--top-k K] [--seed S]`: text from a trained
//! transformer (nanoGPT's `sample.py`). The checkpoint carries its
//! vocabulary, so no data is needed; the same seed gives the same text.

use stepscope_core::engine::{sample, Sampling};
use stepscope_core::model::gpt::Gpt;
use stepscope_core::Error;

use crate::export::read_checkpoint;
use crate::Failure;

/// Most tokens one call writes: about a minute of the largest model's
/// forward passes, and a bound on what a typo can ask for.
pub const MAX_SAMPLE_TOKENS: usize = 100_000;

pub fn run(path: &str, prompt: &str, how: Sampling) -> Result<(), Failure> {
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
    let written = sample(&model, &state.params, &ids, &how);
    let text = vocabulary.decode(&written)?;
    print!("{prompt}{text}");
    if !text.ends_with('\n') {
        println!();
    }
    Ok(())
}
