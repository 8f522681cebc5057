//! Nanoseconds per element of each activation that takes an exp, forward
//! and backward, on one (rows, units) buffer: the engine's loops
//! (`activation_forward`, `activation_backward`) beside the loops they
//! replaced (f32::tanh and f32::exp, the platform's libm natively and
//! compiler-builtins' in WebAssembly, inside a per-element match), kept
//! here verbatim for the comparison. Shared by the native example
//! (`main.rs`) and the browser's timing print (tests/tests/cpu_engine.rs),
//! each with its own clock.

use std::hint::black_box;

use stepscope_core::experiment::Activation;
use stepscope_core::model::{activation_backward, activation_forward};

const GELU_K: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;

fn libm_sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The forward as it was: the match inside the loop, libm's tanh and exp.
fn libm_forward(a: &mut [f32], z: &[f32], act: Activation) {
    for (a, &z) in a.iter_mut().zip(z) {
        *a = match act {
            Activation::Tanh => z.tanh(),
            Activation::Sigmoid => libm_sigmoid(z),
            Activation::GeluTanh => 0.5 * z * (1.0 + (GELU_K * (z + GELU_C * z * z * z)).tanh()),
            Activation::Silu => z * libm_sigmoid(z),
            _ => z,
        };
    }
}

/// The backward as it was (tanh's and σ's from the stored output, as now).
fn libm_backward(grad: &mut [f32], z: &[f32], a: &[f32], act: Activation) {
    for i in 0..grad.len() {
        let (z, a) = (z[i], a[i]);
        let derivative = match act {
            Activation::Tanh => 1.0 - a * a,
            Activation::Sigmoid => a * (1.0 - a),
            Activation::GeluTanh => {
                let t = (GELU_K * (z + GELU_C * z * z * z)).tanh();
                0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * z * z)
            }
            Activation::Silu => {
                let s = libm_sigmoid(z);
                s * (1.0 + z * (1.0 - s))
            }
            _ => 1.0,
        };
        grad[i] *= derivative;
    }
}

/// One activation's four timings, in ns per element: the loops as they
/// were (`libm_*`) and the engine's now.
pub struct Row {
    pub activation: Activation,
    pub forward_libm: f64,
    pub forward: f64,
    pub backward_libm: f64,
    pub backward: f64,
}

/// The best of five runs of `f`, each repeated until `target_ms` has
/// passed, in ns per call of f over `elements` elements. `now` is in ms.
fn best_ns(now: &dyn Fn() -> f64, target_ms: f64, elements: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let (start, mut reps) = (now(), 0u64);
        while now() - start < target_ms {
            for _ in 0..64 {
                f();
            }
            reps += 64;
        }
        best = best.min((now() - start) * 1e6 / (reps as f64 * elements as f64));
    }
    best
}

/// Each activation on `rows`·`units` pre-activations spread over [−3, 3]
/// (where a small network's sit; libm's cost depends on the range), after
/// a shorter pass that is thrown away: a browser first runs WebAssembly
/// in its baseline compiler and optimises a function only once it is hot.
pub fn measure(now: &dyn Fn() -> f64, rows: usize, units: usize, target_ms: f64) -> Vec<Row> {
    timed(now, rows, units, target_ms / 5.0);
    timed(now, rows, units, target_ms)
}

fn timed(now: &dyn Fn() -> f64, rows: usize, units: usize, target_ms: f64) -> Vec<Row> {
    let n = rows * units;
    let z: Vec<f32> = (0..n).map(|i| -3.0 + 6.0 * ((i * 7919) % n) as f32 / n as f32).collect();
    let mut a = vec![0.0f32; n];
    let mut g = vec![1.0f32; n];
    let mut rows_out = Vec::new();
    for act in [Activation::Tanh, Activation::Sigmoid, Activation::GeluTanh, Activation::Silu] {
        activation_forward(&mut a, &z, act);
        let forward_libm = best_ns(now, target_ms, n, || libm_forward(black_box(&mut a), black_box(&z), act));
        let forward = best_ns(now, target_ms, n, || activation_forward(black_box(&mut a), black_box(&z), act));
        // Backward multiplies g in place: reset it now and then so that it
        // stays normal (a derivative ≤ 1.2 repeated 64 times at most).
        let backward_libm = best_ns(now, target_ms, n, || {
            g.fill(1.0);
            libm_backward(black_box(&mut g), black_box(&z), black_box(&a), act)
        });
        let backward = best_ns(now, target_ms, n, || {
            g.fill(1.0);
            activation_backward(black_box(&mut g), black_box(&z), black_box(&a), act)
        });
        rows_out.push(Row { activation: act, forward_libm, forward, backward_libm, backward });
    }
    rows_out
}

/// The Markdown table of `measure`'s rows.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| activation | forward before, ns | forward now, ns | × | backward before, ns | backward now, ns | × |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        s += &format!(
            "| {:?} | {:.2} | {:.2} | {:.1}× | {:.2} | {:.2} | {:.1}× |\n",
            r.activation,
            r.forward_libm,
            r.forward,
            r.forward_libm / r.forward,
            r.backward_libm,
            r.backward,
            r.backward_libm / r.backward
        );
    }
    s
}
