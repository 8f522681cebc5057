//! What the page's default MLP step spends its time on, piece by piece:
//! each function the profiled step's forward and backward bursts call
//! (`engine::forward_layer`, `CpuEngine::backward_layer`), timed alone on
//! the default network's shapes (2-16-16-1 tanh, BCE with logits, batch
//! 32), µs per step, the fastest of several rounds. Shared by the native
//! example (`main.rs`) and the browser's print (tests/tests/cpu_engine.rs),
//! each with its own clock (ms).

use std::hint::black_box;

use stepscope_core::experiment::{Activation, Loss};
use stepscope_core::model::{
    activation_backward, activation_forward, all_finite, dense_backward, dense_forward, loss_backward, loss_forward,
};

const BATCH: usize = 32;
const WIDTHS: [usize; 4] = [2, 16, 16, 1];

/// µs per call of `f`: the fastest of 7 rounds, each of enough calls to
/// last about `round_ms` on `now`'s clock.
fn time(now: &impl Fn() -> f64, round_ms: f64, mut f: impl FnMut()) -> f64 {
    let mut calls = 1usize;
    loop {
        let start = now();
        for _ in 0..calls {
            f();
        }
        if now() - start >= round_ms / 10.0 {
            break;
        }
        calls *= 4;
    }
    calls *= 10;
    let mut best = f64::MAX;
    for _ in 0..7 {
        let start = now();
        for _ in 0..calls {
            f();
        }
        best = best.min((now() - start) / calls as f64 * 1e3);
    }
    best
}

/// (piece, µs per step), forward's pieces first.
pub fn measure(now: &impl Fn() -> f64, round_ms: f64) -> Vec<(&'static str, f64)> {
    let (b, w) = (BATCH, WIDTHS);
    let fill = |n: usize, k: usize| -> Vec<f32> { (0..n).map(|i| ((i * k % 101) as f32 / 50.0) - 1.0).collect() };
    let xs: Vec<Vec<f32>> = (0..3).map(|l| fill(b * w[l], 37)).collect();
    let weights: Vec<Vec<f32>> = (0..3).map(|l| fill(w[l] * w[l + 1], 13).iter().map(|v| v * 0.5).collect()).collect();
    let biases: Vec<Vec<f32>> = (0..3).map(|l| vec![0.1; w[l + 1]]).collect();
    let mut zs: Vec<Vec<f32>> = (0..3).map(|l| fill(b * w[l + 1], 7)).collect();
    let mut acts = zs.clone();
    let targets: Vec<f32> = (0..b).map(|i| (i % 2) as f32).collect();
    let mut grads: Vec<Vec<f32>> = zs.clone();
    let mut dweights: Vec<Vec<f32>> = weights.iter().map(|w| vec![0.0; w.len()]).collect();
    let mut dbiases = biases.clone();
    let mut dxs: Vec<Vec<f32>> = (0..3).map(|l| vec![0.0; b * w[l]]).collect();
    let mut found = Vec::new();
    found.push((
        "forward: dense (Wᵀ and the gemm), 3 layers",
        time(now, round_ms, || {
            for l in 0..3 {
                dense_forward(&mut zs[l], black_box(&xs[l]), &weights[l], &biases[l], b, w[l], w[l + 1]);
            }
        }),
    ));
    found.push((
        "forward: tanh, 2 × 512",
        time(now, round_ms, || {
            for l in 0..2 {
                activation_forward(&mut acts[l], black_box(&zs[l]), Activation::Tanh);
            }
        }),
    ));
    found.push((
        "forward: NaN/Inf check of z, 3 layers",
        time(now, round_ms, || {
            for z in &zs {
                black_box(all_finite(black_box(z)));
            }
        }),
    ));
    found.push((
        "forward: loss (BCE with logits, 32)",
        time(now, round_ms, || {
            black_box(loss_forward(black_box(&zs[2]), &targets, Loss::BceWithLogits, b, 1));
        }),
    ));
    found.push((
        "backward: loss (32)",
        time(now, round_ms, || {
            loss_backward(&mut grads[2], black_box(&zs[2]), &targets, Loss::BceWithLogits, b, 1, 1.0)
        }),
    ));
    found.push((
        "backward: tanh′ = 1 − a², 2 × 512",
        time(now, round_ms, || {
            for l in 0..2 {
                // From 1 each time, so that repeated products stay normal.
                grads[l].fill(1.0);
                activation_backward(&mut grads[l], &zs[l], black_box(&acts[l]), Activation::Tanh);
            }
        }),
    ));
    found.push((
        "backward: dense (dW, db, dX but layer 0's), 3 layers",
        time(now, round_ms, || {
            for l in 0..3 {
                let dx = if l == 0 { None } else { Some(dxs[l].as_mut_slice()) };
                dense_backward(
                    dx,
                    &mut dweights[l],
                    &mut dbiases[l],
                    black_box(&zs[l]),
                    &xs[l],
                    &weights[l],
                    b,
                    w[l],
                    w[l + 1],
                );
            }
        }),
    ));
    found.push((
        "backward: NaN/Inf check of dW and db, 3 layers",
        time(now, round_ms, || {
            for (dw, db) in dweights.iter().zip(&dbiases) {
                black_box(all_finite(black_box(dw)) && all_finite(black_box(db)));
            }
        }),
    ));
    found
}

/// A Markdown table of `measure`'s pieces, with forward's and backward's
/// totals.
pub fn table(found: &[(&str, f64)]) -> String {
    let mut out = String::from("| piece | µs per step |\n|---|---|\n");
    for (name, us) in found {
        out += &format!("| {name} | {us:.3} |\n");
    }
    let total = |side: &str| found.iter().filter(|(n, _)| n.starts_with(side)).map(|(_, us)| us).sum::<f64>();
    let (f, b) = (total("forward"), total("backward"));
    out += &format!("| **forward** | **{f:.3}** |\n| **backward** | **{b:.3}** |\n");
    out += &format!("\nforward : backward = 1 : {:.2} (FLOPs 1 : 1.89)\n", b / f);
    out
}
