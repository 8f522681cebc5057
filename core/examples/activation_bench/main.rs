//! `cargo run --release -p stepscope-core --example activation_bench`:
//! nanoseconds per element of tanh, σ, GELU (tanh form) and SiLU, forward
//! and backward, the engine's straight-line loops against the libm loops
//! they replaced, on the page's default layer (batch 32 × 16 units) and on
//! a wide one (256 × 256). Figures in bench/activations.md.

mod timing;

fn main() {
    let start = std::time::Instant::now();
    let now = move || start.elapsed().as_secs_f64() * 1e3;
    for (rows, units) in [(32, 16), (256, 256)] {
        println!("{rows} × {units}:\n");
        println!("{}", timing::table(&timing::measure(&now, rows, units, 100.0)));
    }
}
