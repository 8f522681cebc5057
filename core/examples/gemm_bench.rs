//! Times `model::gemm` (one thread) on the products of a transformer step,
//! for `scripts/bench_gpt.py`, which times `torch.mm` on the same shapes
//! beside it. Prints one JSON line: GFLOP/s per shape.
//!
//!   cargo run --release -p stepscope-core --example gemm_bench -- [seconds per shape]

use stepscope_core::model::{gemm, Lhs};
use web_time::Instant;

/// (m, n, k, A transposed): the 0.8 M model's forward (x·Wᵀ as x by a
/// transposed copy of W), ∂x and ∂W (A = ∂zᵀ) products at B·T = 768.
const SHAPES: [(usize, usize, usize, bool); 6] = [
    (768, 384, 128, false),
    (768, 512, 128, false),
    (768, 128, 512, false),
    (768, 128, 128, false),
    (512, 128, 768, true),
    (384, 128, 768, true),
];

fn main() {
    let seconds: f64 = std::env::args().nth(1).map(|s| s.parse().expect("seconds")).unwrap_or(1.0);
    let mut rows = Vec::new();
    for (m, n, k, transposed) in SHAPES {
        let a: Vec<f32> = (0..m * k).map(|i| ((i * 7) % 13) as f32 * 0.1 - 0.6).collect();
        let b: Vec<f32> = (0..k * n).map(|i| ((i * 5) % 11) as f32 * 0.1 - 0.5).collect();
        let mut c = vec![0.0f32; m * n];
        let lhs = if transposed {
            Lhs { data: &a, row_stride: 1, k_stride: m }
        } else {
            Lhs { data: &a, row_stride: k, k_stride: 1 }
        };
        gemm(&mut c, n, lhs, &b, n, m, n, k);
        let (started, mut reps) = (Instant::now(), 0u64);
        while started.elapsed().as_secs_f64() < seconds {
            c.fill(0.0);
            gemm(&mut c, n, lhs, &b, n, m, n, k);
            reps += 1;
        }
        let gflops = 2.0 * (m * n * k) as f64 * reps as f64 / started.elapsed().as_secs_f64() / 1e9;
        rows.push(serde_json::json!({"m": m, "n": n, "k": k, "transposed": transposed, "gflops": gflops}));
    }
    println!("{}", serde_json::Value::Array(rows));
}
