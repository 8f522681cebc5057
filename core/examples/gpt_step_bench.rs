//! Times the CPU GPT's forward and backward (`model::gpt`, one thread) on
//! windows of Tiny Shakespeare, for `scripts/bench_gpt.py`, which runs
//! PyTorch eager on the same model and batch beside it. Prints one JSON
//! line: tokens per second and ms per forward+backward.
//!
//!   cargo run --release -p stepscope-core --example gpt_step_bench -- \
//!       [blocks heads embed context batch seconds]

use stepscope_core::data::TokenText;
use stepscope_core::model::gpt::{Gpt, GptActivations, GptScratch, GptShape};
use web_time::Instant;

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().expect("whole numbers")).collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let (blocks, heads, embed, context, batch, seconds) =
        (arg(0, 4), arg(1, 4), arg(2, 128), arg(3, 64), arg(4, 12), arg(5, 5));
    let text = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare.txt")).unwrap();
    let tokens = TokenText::read(&text, context, 256).unwrap();
    let shape = GptShape {
        vocab_size: tokens.vocabulary.len(),
        context,
        embed,
        heads,
        blocks,
        mlp_ratio: 4,
        tie_embeddings: true,
        qk_layernorm: false,
    };
    let gpt = Gpt::new(shape);
    // nanoGPT's initialisation's scale (N(0, 0.02), LayerNorm 1), from a
    // small generator: the timing does not depend on the values.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut p: Vec<f32> = (0..shape.parameter_count())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.07
        })
        .collect();
    for t in gpt.tensors.iter().filter(|t| t.name.contains("ln") && t.name.ends_with("weight")) {
        p[t.offset..t.offset + t.len].fill(1.0);
    }
    let windows = tokens.windows(context);
    let (mut acts, mut scratch, mut g) = (GptActivations::default(), GptScratch::default(), vec![0.0f32; p.len()]);
    let (mut inp, mut targets) = (Vec::new(), Vec::new());
    let mut step = |k: usize| {
        inp.clear();
        targets.clear();
        for b in 0..batch {
            let (x, y) = tokens.window((k * batch + b) * 7919 % windows, context);
            inp.extend_from_slice(x);
            targets.extend_from_slice(y);
        }
        g.fill(0.0);
        let (loss, _) = gpt.forward(&mut acts, &p, &inp, &targets);
        gpt.backward(&mut g, &mut acts, &mut scratch, &p, &inp, &targets, 0.0, 1.0);
        loss
    };
    step(0); // warm-up
    let started = Instant::now();
    let mut steps = 0;
    let mut loss = 0.0;
    while started.elapsed().as_secs_f64() < seconds as f64 {
        loss = step(steps + 1);
        steps += 1;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{{\"engine\": \"stepscope-cpu\", \"parameters\": {}, \"steps\": {steps}, \"ms_per_step\": {:.3}, \"tokens_per_second\": {:.1}, \"loss\": {loss}}}",
        shape.parameter_count(),
        1e3 * secs / steps as f64,
        (steps * batch * context) as f64 / secs
    );
}
