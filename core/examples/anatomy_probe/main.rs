//! `cargo run --release -p stepscope-core --example anatomy_probe`: the page's
//! default MLP step, piece by piece (`pieces`), natively. The browser's
//! figures: `default_mlp_pieces` in tests/tests/cpu_engine.rs. Figures in
//! bench/anatomy.md.

mod pieces;

fn main() {
    let start = std::time::Instant::now();
    let now = move || start.elapsed().as_secs_f64() * 1e3;
    for _ in 0..2 {
        println!("{}", pieces::table(&pieces::measure(&now, 50.0)));
    }
}
