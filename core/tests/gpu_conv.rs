//! The convolution and pooling kernels (`gpu::conv`) against their CPU
//! twins (`model::conv`), over awkward shapes: one channel and many,
//! kernels of 1 to 5, strides of 1 to 3, padding, windows that overlap or
//! leave a remainder, more filters than a workgroup's lanes. Runs on
//! whatever adapter wgpu finds (lavapipe in CI), and in Chromium on
//! WebGPU (`tests/tests/gpu_kernels.rs`).
//!
//! Each convolution kernel runs in both variants (`MatmulVariant`: direct
//! and blocked, implicit GEMM and tiled), each checked against the twin,
//! and the two against each other bit for bit (they state the same
//! operations in the same order).
//!
//! Tolerances are derived from the order each kernel states: a sum of n
//! terms in two orders differs by at most 2·γ_n·Σ|terms| (γ_n ≈ n·2⁻²⁴,
//! `sum_tolerance`), with Σ|terms| computed by the twin itself on the
//! terms' absolute values; an activation or its derivative (Lipschitz
//! below 1.2 on these values) adds its own few ulps (1e-6 relative). The
//! pools do the twin's operations in its order: their values are compared
//! bit for bit.

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::{flags, flags_at_step, random, run_launch, sum_tolerance};
use stepscope_core::experiment::Activation;
use stepscope_core::gpu::conv;
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::matmul::MatmulVariant;
use stepscope_core::gpu::params::{PHASE_BACKWARD, PHASE_FORWARD};
use stepscope_core::model::conv::{
    avg_pool2d_backward, avg_pool2d_forward, conv2d_backward, conv2d_forward, conv2d_forward_reference,
    max_pool2d_backward, max_pool2d_forward, Conv2d, Pool2d,
};
use stepscope_core::model::{activation_backward, activation_forward};

const ACTIVATIONS: [Activation; 7] = [
    Activation::Relu,
    Activation::Linear,
    Activation::Tanh,
    Activation::LeakyRelu,
    Activation::Sigmoid,
    Activation::GeluTanh,
    Activation::Silu,
];

fn conv(c_in: usize, h: usize, w: usize, filters: usize, kernel: usize, stride: usize, padding: usize) -> Conv2d {
    Conv2d { c_in, h, w, filters, kernel, stride, padding }
}

/// One channel and many, every kernel 1–5, stride 1–3, padding 0–2, a
/// kernel as large as the padded image, ConvNetJS's MNIST layers, 65
/// filters (more than a workgroup of 64 outputs holds of one image's, and
/// five of the tiled ∂x's tiles of 16), and 70 channels (two of the tiled
/// ∂x's column tiles).
fn conv_cases() -> Vec<Conv2d> {
    vec![
        conv(1, 7, 6, 3, 3, 1, 1),
        conv(2, 9, 8, 5, 5, 2, 2),
        conv(3, 5, 5, 2, 1, 1, 0),
        conv(2, 4, 4, 3, 4, 1, 1),
        conv(1, 3, 3, 1, 3, 2, 1),
        conv(4, 6, 10, 65, 3, 3, 0),
        conv(1, 28, 28, 8, 5, 1, 2),
        conv(8, 14, 14, 16, 5, 1, 2),
        conv(70, 3, 4, 5, 2, 1, 0),
    ]
}

fn pool(c: usize, h: usize, w: usize, kernel: usize, stride: usize) -> Pool2d {
    Pool2d { c, h, w, kernel, stride }
}

/// Windows that tile, leave a remainder, overlap, slide by one, cover the
/// whole image; MNIST's 2 × 2 over 8 × 28 × 28.
fn pool_cases() -> Vec<Pool2d> {
    vec![
        pool(1, 4, 4, 2, 2),
        pool(3, 7, 9, 2, 2),
        pool(2, 7, 7, 3, 2),
        pool(2, 5, 6, 3, 1),
        pool(1, 3, 3, 3, 3),
        pool(8, 28, 28, 2, 2),
    ]
}

/// Asserts that both variants gave the same bits.
fn same_bits(what: &str, blocked: &[f32], tiled: &[f32]) {
    assert_eq!(blocked.len(), tiled.len(), "{what}: lengths");
    for (k, (b, t)) in blocked.iter().zip(tiled).enumerate() {
        assert_eq!(b.to_bits(), t.to_bits(), "{what} [{k}]: direct {b} vs implicit GEMM {t}");
    }
}

/// Asserts |gpu[k] − cpu[k]| ≤ tol(k) for every k.
fn check(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: lengths");
    for (k, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let t = tol(k);
        assert!((g - c).abs() <= t, "{what} [{k}]: gpu {g} vs cpu {c} (tol {t})");
    }
}

fn abs(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| x.abs()).collect()
}

/// conv2d_forward against the twin and its activation. Each z sums
/// C·K·K + 1 terms (the bias first) in the same order, the GPU fusing
/// multiply-adds; Σ|terms| is the reference convolution of |x| by |W|
/// plus |b|.
async fn conv2d_forward_matches_cpu() {
    for (case, s) in conv_cases().into_iter().enumerate() {
        for batch in [1, 3] {
            let act = ACTIVATIONS[(case + batch) % ACTIVATIONS.len()];
            let seed = (case * 10 + batch) as u64;
            let offset = 3; // parameters need not start at 0
            let weights = s.filters * s.patch();
            let mut params = random(offset + weights + s.filters, seed, 1.0 / (s.patch() as f64).sqrt());
            params[..offset].fill(f32::NAN); // must not be read
            let (w, b) = params[offset..].split_at(weights);
            let x = random(batch * s.in_len(), seed + 1, 1.0);
            let n = batch * s.out_len();
            let (mut z_cpu, mut a_cpu, mut mag) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            conv2d_forward(&mut z_cpu, &x, w, b, batch, &s, &mut Vec::new());
            activation_forward(&mut a_cpu, &z_cpu, act);
            conv2d_forward_reference(&mut mag, &abs(&x), &abs(w), &abs(b), batch, &s);
            let mut outs = Vec::new();
            for v in MatmulVariant::ALL {
                let launch = conv::conv2d_forward(v, batch, &s, (offset, offset + weights), act, 2);
                let zeros = vec![0u8; 4 * n];
                let (xb, pb, fb) = (f32_bytes(&x), f32_bytes(&params), flags());
                let args = [Arg::Out(&zeros), Arg::Out(&zeros), Arg::In(&xb), Arg::In(&pb), Arg::Out(&fb)];
                let out = run_launch(&launch, args).await;
                let what = format!("{s:?} B={batch} {act:?} {}", v.name());
                let tol = |k: usize| sum_tolerance(s.patch() + 1, mag[k]) + 1e-7;
                check(&format!("z {what}"), &to_f32(&out[0]), &z_cpu, tol);
                check(&format!("a {what}"), &to_f32(&out[1]), &a_cpu, |k| 1.2 * tol(k) + 1e-6 * a_cpu[k].abs() + 1e-7);
                assert_eq!(to_u32(&out[2])[0], u32::MAX, "{what}: no non-finite value");
                outs.push(out);
            }
            let what = format!("{s:?} B={batch} {act:?}");
            same_bits(&format!("z {what}"), &to_f32(&outs[1][0]), &to_f32(&outs[0][0]));
            same_bits(&format!("a {what}"), &to_f32(&outs[1][1]), &to_f32(&outs[0][1]));
        }
    }
}
gpu_common::twin_test!(conv2d_forward_matches_cpu);

/// conv2d_backward_input against the twin's dx, then the layer below's
/// activation backward. Each dx sums at most F·K·K terms, the inner sums
/// over f in the twin's order; Σ|terms| is the twin's dx of |dz| by |W|.
async fn conv2d_backward_input_matches_cpu() {
    for (case, s) in conv_cases().into_iter().enumerate() {
        for batch in [1, 3] {
            let below = ACTIVATIONS[(case + 2 * batch) % ACTIVATIONS.len()];
            let seed = (case * 10 + batch + 500) as u64;
            let weights = s.filters * s.patch();
            let params = random(weights + s.filters, seed, 1.0 / (s.patch() as f64).sqrt());
            let w = &params[..weights];
            let dz = random(batch * s.out_len(), seed + 1, 1.0);
            let z_in = random(batch * s.in_len(), seed + 2, 2.0);
            let mut a_in = vec![0.0; z_in.len()];
            activation_forward(&mut a_in, &z_in, below);
            let (mut dx_cpu, mut mag) = (vec![0.0; a_in.len()], vec![0.0; a_in.len()]);
            let (mut dw, mut db) = (vec![0.0; weights], vec![0.0; s.filters]);
            conv2d_backward(Some(&mut dx_cpu), &mut dw, &mut db, &dz, &a_in, w, batch, &s, &mut Vec::new());
            activation_backward(&mut dx_cpu, &z_in, &a_in, below);
            conv2d_backward(Some(&mut mag), &mut dw, &mut db, &abs(&dz), &a_in, &abs(w), batch, &s, &mut Vec::new());
            let mut outs = Vec::new();
            for v in MatmulVariant::ALL {
                let launch = conv::conv2d_backward_input(v, batch, &s, 0, below);
                // dx starts as NaN: every value must be written.
                let (dxb, dzb, pb) = (f32_bytes(&vec![f32::NAN; a_in.len()]), f32_bytes(&dz), f32_bytes(&params));
                let (zb, ab) = (f32_bytes(&z_in), f32_bytes(&a_in));
                let args = [Arg::Out(&dxb), Arg::In(&dzb), Arg::In(&pb), Arg::In(&zb), Arg::In(&ab)];
                let out = to_f32(&run_launch(&launch, args).await[0]);
                let n = s.filters * s.kernel * s.kernel;
                check(&format!("dx {s:?} B={batch} {below:?} {}", v.name()), &out, &dx_cpu, |k| {
                    1.2 * sum_tolerance(n, mag[k]) + 1e-6 * dx_cpu[k].abs() + 1e-7
                });
                outs.push(out);
            }
            same_bits(&format!("dx {s:?} B={batch} {below:?}"), &outs[1], &outs[0]);
        }
    }
}
gpu_common::twin_test!(conv2d_backward_input_matches_cpu);

/// ∂W's two passes (conv2d_backward_weight, then _sum) against the twin's
/// dW and db, both added onto gradients already there. The twin sums each
/// one's N = B·OH·OW terms in order onto its value; the kernels sum a
/// segment of L terms, then the S segments' partials, then add: together
/// at most N + L + S + 1 roundings deep. Σ|terms| is the twin's gradient of
/// |dz| and |x| onto |the value|. Batches up to 40: N past 256·64, where
/// the segments are longest.
async fn conv2d_backward_weight_matches_cpu() {
    for (case, s) in conv_cases().into_iter().enumerate() {
        for batch in [1, 3, if case == 6 { 40 } else { 2 }] {
            let seed = (case * 10 + batch + 900) as u64;
            let weights = s.filters * s.patch();
            let (offset, bias_offset) = (2, 2 + weights + 1); // a gap between W and b: untouched
            let grads = random(bias_offset + s.filters + 2, seed, 0.5);
            let before = grads.clone();
            let dz = random(batch * s.out_len(), seed + 1, 1.0);
            let x = random(batch * s.in_len(), seed + 2, 1.0);
            let w = vec![0.0; weights];
            let (mut dw, mut db) =
                (grads[offset..offset + weights].to_vec(), grads[bias_offset..][..s.filters].to_vec());
            conv2d_backward(None, &mut dw, &mut db, &dz, &x, &w, batch, &s, &mut Vec::new());
            let (mut dw_mag, mut db_mag) =
                (abs(&before[offset..offset + weights]), abs(&before[bias_offset..][..s.filters]));
            conv2d_backward(None, &mut dw_mag, &mut db_mag, &abs(&dz), &abs(&x), &w, batch, &s, &mut Vec::new());
            let mut cpu = before.clone();
            cpu[offset..offset + weights].copy_from_slice(&dw);
            cpu[bias_offset..bias_offset + s.filters].copy_from_slice(&db);
            let mut mag = vec![0.0; cpu.len()];
            mag[offset..offset + weights].copy_from_slice(&dw_mag);
            mag[bias_offset..bias_offset + s.filters].copy_from_slice(&db_mag);
            let mut outs = Vec::new();
            for v in MatmulVariant::ALL {
                let out = weight_gradient(v, batch, &s, (offset, bias_offset), 1, &grads, &dz, &x, flags()).await;
                let (segments, len) = conv::weight_segments(batch, &s);
                let depth = batch * s.positions() + len + segments + 1;
                let gpu = to_f32(&out[0]);
                check(&format!("grads {s:?} B={batch} {}", v.name()), &gpu, &cpu, |k| sum_tolerance(depth, mag[k]));
                for k in (0..offset).chain([offset + weights]).chain(bias_offset + s.filters..cpu.len()) {
                    assert_eq!(gpu[k].to_bits(), before[k].to_bits(), "{s:?}: grads[{k}] is not the layer's");
                }
                assert_eq!(to_u32(&out[1])[0], u32::MAX, "{s:?}: no non-finite value");
                outs.push(gpu);
            }
            same_bits(&format!("grads {s:?} B={batch}"), &outs[1], &outs[0]);
        }
    }
}
gpu_common::twin_test!(conv2d_backward_weight_matches_cpu);

/// Runs ∂W's two passes as the plan does: [grads, flags] after them.
#[allow(clippy::too_many_arguments)]
async fn weight_gradient(
    v: MatmulVariant,
    batch: usize,
    s: &Conv2d,
    at: (usize, usize),
    layer: usize,
    grads: &[f32],
    dz: &[f32],
    x: &[f32],
    flags: Vec<u8>,
) -> Vec<Vec<u8>> {
    let (sums, total) = conv::conv2d_backward_weight(v, batch, s, at, layer);
    // Partials start as NaN: every one the sum pass reads must be written.
    let partials = f32_bytes(&vec![f32::NAN; conv::partials_floats(batch, s)]);
    let (dzb, xb) = (f32_bytes(dz), f32_bytes(x));
    let partials = run_launch(&sums, [Arg::Out(&partials), Arg::In(&dzb), Arg::In(&xb)]).await.remove(0);
    let gb = f32_bytes(grads);
    run_launch(&total, [Arg::Out(&gb), Arg::Out(&flags), Arg::In(&partials)]).await
}

/// A non-finite input reaches forward's flags with the layer's code, and a
/// non-finite gradient backward's (the layer counted from the top).
async fn conv2d_flags_non_finite_values() {
    let s = conv(2, 5, 5, 3, 3, 1, 1);
    let batch = 2;
    let weights = s.filters * s.patch();
    let params = random(weights + s.filters, 1, 0.3);
    let mut x = random(batch * s.in_len(), 2, 1.0);
    x[17] = f32::NAN;
    let zeros = vec![0u8; 4 * batch * s.out_len()];
    let (xb, pb, fb) = (f32_bytes(&x), f32_bytes(&params), flags_at_step(6, 0));
    for v in MatmulVariant::ALL {
        let launch = conv::conv2d_forward(v, batch, &s, (0, weights), Activation::Relu, 4);
        let args = [Arg::Out(&zeros), Arg::Out(&zeros), Arg::In(&xb), Arg::In(&pb), Arg::Out(&fb)];
        let out = run_launch(&launch, args).await;
        assert_eq!(to_u32(&out[2])[0], (6 << 16) | (PHASE_FORWARD << 8) | 4, "{}", v.name());
        let dz = random(batch * s.out_len(), 3, 1.0);
        let grads = vec![0.0; weights + s.filters];
        let out = weight_gradient(v, batch, &s, (0, weights), 4, &grads, &dz, &x, flags_at_step(6, 0)).await;
        assert_eq!(to_u32(&out[1])[0], (6 << 16) | (PHASE_BACKWARD << 8) | (255 - 4), "{}", v.name());
    }
}
gpu_common::twin_test!(conv2d_flags_non_finite_values);

/// Inputs with ties: a quarter of the values are one of three levels, so
/// windows often hold equal maxima (the first must win), and after a
/// ReLU many zeros.
fn pool_inputs(n: usize, seed: u64) -> Vec<f32> {
    let mut x = random(n, seed, 2.0);
    for (i, v) in x.iter_mut().enumerate() {
        if i % 4 == 1 {
            *v = ((*v * 1.5).round() / 1.5).clamp(-1.0, 1.0);
        }
    }
    x
}

/// Both pools' forward against the twins: the same operations in the same
/// order, so z has the twin's bits; a within its activation's ulps.
async fn pool2d_forward_matches_cpu() {
    for (case, s) in pool_cases().into_iter().enumerate() {
        for batch in [1, 3] {
            for max in [true, false] {
                let act = ACTIVATIONS[(case + batch) % ACTIVATIONS.len()];
                let x = pool_inputs(batch * s.in_len(), (case * 10 + batch) as u64);
                let n = batch * s.out_len();
                let (mut z_cpu, mut a_cpu, mut argmax) = (vec![0.0; n], vec![0.0; n], vec![0u32; n]);
                if max {
                    max_pool2d_forward(&mut z_cpu, &mut argmax, &x, batch, &s);
                } else {
                    avg_pool2d_forward(&mut z_cpu, &x, batch, &s);
                }
                activation_forward(&mut a_cpu, &z_cpu, act);
                let launch = conv::pool2d_forward(max, batch, &s, act, 0);
                let zeros = vec![0u8; 4 * n];
                let (xb, fb) = (f32_bytes(&x), flags());
                let out = run_launch(&launch, [Arg::Out(&zeros), Arg::Out(&zeros), Arg::In(&xb), Arg::Out(&fb)]).await;
                let what = format!("{} {s:?} B={batch} {act:?}", if max { "max" } else { "avg" });
                let z_gpu = to_f32(&out[0]);
                for k in 0..n {
                    assert_eq!(z_gpu[k].to_bits(), z_cpu[k].to_bits(), "z {what} [{k}]: {} vs {}", z_gpu[k], z_cpu[k]);
                }
                check(&format!("a {what}"), &to_f32(&out[1]), &a_cpu, |k| 1e-6 * a_cpu[k].abs() + 1e-7);
                assert_eq!(to_u32(&out[2])[0], u32::MAX, "{what}: no non-finite value");
            }
        }
    }
}
gpu_common::twin_test!(pool2d_forward_matches_cpu);

/// Both pools' backward against the twins (max pooling's from the index
/// its forward kept; the kernel finds it again), then the layer below's
/// activation backward: with the linear code the bits are the twin's,
/// with another within the derivative's ulps.
async fn pool2d_backward_matches_cpu() {
    for (case, s) in pool_cases().into_iter().enumerate() {
        for batch in [1, 3] {
            for max in [true, false] {
                let below = if case % 2 == 0 { Activation::Linear } else { ACTIVATIONS[(case + batch) % 7] };
                let seed = (case * 10 + batch + 300) as u64;
                let z_in = pool_inputs(batch * s.in_len(), seed);
                let mut a_in = vec![0.0; z_in.len()];
                activation_forward(&mut a_in, &z_in, below);
                let n = batch * s.out_len();
                let dout = random(n, seed + 1, 1.0);
                let mut dx_cpu = vec![f32::NAN; a_in.len()];
                if max {
                    let (mut out, mut argmax) = (vec![0.0; n], vec![0u32; n]);
                    max_pool2d_forward(&mut out, &mut argmax, &a_in, batch, &s);
                    max_pool2d_backward(&mut dx_cpu, &dout, &argmax, batch, &s);
                } else {
                    avg_pool2d_backward(&mut dx_cpu, &dout, batch, &s);
                }
                activation_backward(&mut dx_cpu, &z_in, &a_in, below);
                let launch = conv::pool2d_backward(max, batch, &s, below);
                let (dxb, db, zb, ab) =
                    (vec![0u8; 4 * a_in.len()], f32_bytes(&dout), f32_bytes(&z_in), f32_bytes(&a_in));
                let out = run_launch(&launch, [Arg::Out(&dxb), Arg::In(&db), Arg::In(&zb), Arg::In(&ab)]).await;
                let what = format!("dx {} {s:?} B={batch} {below:?}", if max { "max" } else { "avg" });
                let gpu = to_f32(&out[0]);
                if below == Activation::Linear {
                    for k in 0..gpu.len() {
                        assert_eq!(gpu[k].to_bits(), dx_cpu[k].to_bits(), "{what} [{k}]: {} vs {}", gpu[k], dx_cpu[k]);
                    }
                } else {
                    check(&what, &gpu, &dx_cpu, |k| 1e-6 * dx_cpu[k].abs() + 1e-7);
                }
            }
        }
    }
}
gpu_common::twin_test!(pool2d_backward_matches_cpu);

/// A NaN in a window is its maximum (the twin's rule: the last NaN) and
/// reaches forward's flags; a window of −∞ gives −∞.
async fn max_pool2d_takes_nan_and_flags_it() {
    let s = pool(1, 4, 4, 2, 2);
    let mut x = random(16, 4, 1.0);
    x[5] = f32::NAN;
    for i in [2, 3, 6, 7] {
        x[i] = f32::NEG_INFINITY;
    }
    let (mut z_cpu, mut argmax) = (vec![0.0; 4], vec![0u32; 4]);
    max_pool2d_forward(&mut z_cpu, &mut argmax, &x, 1, &s);
    let launch = conv::pool2d_forward(true, 1, &s, Activation::Linear, 3);
    let (zeros, xb, fb) = (vec![0u8; 16], f32_bytes(&x), flags_at_step(2, 0));
    let out = run_launch(&launch, [Arg::Out(&zeros), Arg::Out(&zeros), Arg::In(&xb), Arg::Out(&fb)]).await;
    let z = to_f32(&out[0]);
    assert!(z[0].is_nan() && z_cpu[0].is_nan(), "{z:?} {z_cpu:?}");
    assert_eq!(&z[1..], &z_cpu[1..]);
    assert_eq!(z[1], f32::NEG_INFINITY);
    assert_eq!(to_u32(&out[2])[0], (2 << 16) | (PHASE_FORWARD << 8) | 3);
}
gpu_common::twin_test!(max_pool2d_takes_nan_and_flags_it);
