//! The loss and backward kernels against their CPU twins, over awkward
//! sizes, every activation's backward inside the kernels that apply it. Runs on whatever adapter wgpu finds (lavapipe in CI), and in
//! Chromium on WebGPU (`tests/tests/gpu_kernels.rs`).
//!
//! Tolerances cite the Vulkan precision of the shader built-ins (SPIR-V
//! OpFDiv ≤ 2.5 ulp, exp ≤ 3 + 2|x| ulp, log ≤ 3 ulp or 2⁻²¹ absolute on
//! [0.5, 2]); the CPU twin rounds correctly (≤ ½ ulp).

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::{flags, flags_at_step, random, run_launch, sum_tolerance, BATCHES, SIZES};
use stepscope_core::experiment::{Activation, Loss};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::gpu::matmul::{self, MatmulVariant};
use stepscope_core::gpu::params::*;
use stepscope_core::model::{activation_backward, activation_forward, dense_backward, LayerOp, LayerShape};
use stepscope_core::model::{loss_backward, loss_forward};

const EPS: f32 = f32::EPSILON;

/// Asserts |gpu[k] − cpu[k]| ≤ tol(k) for every k.
fn check(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(gpu.len(), cpu.len());
    for (k, (&g, &c)) in gpu.iter().zip(cpu).enumerate() {
        let t = tol(k);
        assert!((g - c).abs() <= t, "{what} [{k}]: gpu {g} vs cpu {c} (tol {t})");
    }
}

/// Every loss over every batch and every output width (O ≥ 2 for ce).
fn loss_cases() -> Vec<(Loss, usize, usize)> {
    let losses = [Loss::Mse, Loss::BceWithLogits, Loss::CrossEntropy];
    let all = losses.iter().flat_map(|&l| BATCHES.iter().flat_map(move |&b| SIZES.iter().map(move |&o| (l, b, o))));
    all.filter(|&(l, _, o)| l != Loss::CrossEntropy || o >= 2).collect()
}

/// Logits in [−3, 3] and targets valid for the loss: any value for mse,
/// [0, 1] for bce, integer classes < O (as f32, one per row) for ce.
/// Returns (y, targets, target_width).
fn loss_data(loss: Loss, batch: usize, outputs: usize, seed: u64) -> (Vec<f32>, Vec<f32>, usize) {
    let y = random(batch * outputs, seed, 3.0);
    let u: Vec<f32> = random(batch * outputs, seed + 1, 1.0).iter().map(|v| (v + 1.0) / 2.0).collect();
    match loss {
        Loss::Mse => (y, random(batch * outputs, seed + 2, 1.0), outputs),
        Loss::BceWithLogits => (y, u, outputs),
        Loss::CrossEntropy => {
            let classes = (0..batch).map(|b| ((u[b] * outputs as f32) as usize).min(outputs - 1) as f32);
            (y, classes.collect(), 1)
        }
    }
}

/// |term| summed over the terms the kernel adds up: one per element (mse,
/// bce) or per row (ce: logsumexp(row) − row[class]).
fn loss_abs_terms(y: &[f32], t: &[f32], loss: Loss, outputs: usize) -> f32 {
    let lse = |row: &[f32]| {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        max + row.iter().map(|&v| (v - max).exp()).sum::<f32>().ln()
    };
    match loss {
        Loss::Mse => y.iter().zip(t).map(|(y, t)| (y - t) * (y - t)).sum(),
        Loss::BceWithLogits => {
            y.iter().zip(t).map(|(&y, &t)| (y.max(0.0) - y * t + (-y.abs()).exp().ln_1p()).abs()).sum()
        }
        Loss::CrossEntropy => y.chunks(outputs).zip(t).map(|(row, &c)| (lse(row) - row[c as usize]).abs()).sum(),
    }
}

const ACTIVATIONS: [Activation; 7] = [
    Activation::Linear,
    Activation::Relu,
    Activation::LeakyRelu,
    Activation::Tanh,
    Activation::Sigmoid,
    Activation::GeluTanh,
    Activation::Silu,
];

/// Relative error of the GPU's f'(z) against the CPU's (see
/// `activation_derivatives`).
fn derivative_rel(act: Activation) -> f32 {
    match act {
        Activation::Tanh => 2.0 * EPS,
        Activation::GeluTanh | Activation::Silu => 1e-5,
        _ => 0.0,
    }
}

/// Pre-activations in [−4, 4] with every fifth exactly 0 (the kinks), and
/// a = f(z): (z, a).
fn layer_values(act: Activation, n: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut z = random(n, seed, 4.0);
    z.iter_mut().step_by(5).for_each(|v| *v = 0.0);
    let mut a = vec![0.0; n];
    activation_forward(&mut a, &z, act);
    (z, a)
}

/// f'(z) per element, the CPU's (model::activation_backward of ones).
/// The GPU's matches it:
///   linear, relu, leaky_relu, sigmoid: the same f32 operations in the
///        same order, nothing to fuse: exactly.
///   tanh: 1 − a·a may be fused into one fma, which skips the rounding of
///        a² (≤ ½ulp(1) = ε/2): 2·ε relative on the product.
///   gelu_tanh, silu: exp within 3 + 2|x| ulp (≤ 25 ulp for |x| ≤ 11),
///        tanh_stable vs a correctly rounded tanh, and a derivative whose
///        sensitivity to t or σ is ≤ 9 for |z| ≤ 4: 1e-5 relative to the
///        gradient it multiplies.
fn activation_derivatives(z: &[f32], a: &[f32], act: Activation) -> Vec<f32> {
    let mut d = vec![1.0; z.len()];
    activation_backward(&mut d, z, a, act);
    d
}

/// Runs loss_forward_backward; returns (stats, first non-finite code, dz).
#[allow(clippy::too_many_arguments)]
async fn loss_gpu(
    y: &[f32],
    z: &[f32],
    t: &[f32],
    (loss, act): (Loss, Activation),
    batch: usize,
    width: usize,
    scale: f32,
    stats: &[f32],
    flags: &[u8],
) -> (Vec<f32>, u32, Vec<f32>) {
    let outputs = y.len() / batch;
    let l = launch::loss_forward_backward(batch, outputs, loss, width, scale, act);
    let (stats, dz) = (f32_bytes(stats), f32_bytes(&vec![f32::NAN; y.len()]));
    let (y, z, t) = (f32_bytes(y), f32_bytes(z), f32_bytes(t));
    let args = [Arg::Out(&stats), Arg::Out(flags), Arg::Out(&dz), Arg::In(&y), Arg::In(&z), Arg::In(&t)];
    let out = run_launch(&l, args).await;
    (to_f32(&out[0]), to_u32(&out[1])[0], to_f32(&out[2]))
}

/// loss_forward_backward against model::loss_forward, model::loss_backward
/// and model::activation_backward, every loss with the output layer's
/// activation taken in turn (scale 0.5; dz starts NaN: it must be
/// overwritten).
///
/// The loss, added into step 1's row of stats (which already holds 0.5;
/// other rows must not change): both sum n terms (elements or rows) in
/// different orders: sum_tolerance(n + 1, Σ|term|) / n covers the
/// reordering and a fused (y − t)² + acc. For bce and ce each term also
/// goes through exp/log: with |y| ≤ 3 exp is within 15 ulp (≤ 9e-7
/// relative on a row's sum, summed in the same order as the CPU), log
/// within 1.5e-6 absolute, plus a rounding of the O(10) result (1e-6):
/// 5e-6 absolute per term, hence on the mean. The division (≤ 2.5 ulp) and
/// the add into stats take 4·ε·|result|.
///
/// dy = scale·∂L/∂y, per element:
///   mse: k = 2·scale/(B·O) is one division (≤ 2.5 ulp), then one product:
///        4·ε·|dy|.
///   bce: σ(y) through exp (≤ 9 ulp, damped by σ' ≤ ¼) and a division:
///        ≤ 5e-7 absolute on σ − t, so |k|·1e-6 + 4·ε·|dy|.
///   ce:  lse within 3.3e-6 (exp ≤ 15 ulp, log ≤ 1.5e-6, one rounding),
///        then exp(y − lse) with |y − lse| ≤ 12 (≤ 27 ulp): softmax within
///        6e-6 relative, ≤ 1: |k|·1e-5 + 4·ε·|dy|.
/// dz = dy·f'(z): |f'|·tol(dy) + derivative_rel·|dy| + ε·|dz| (the
/// product's rounding).
async fn loss_forward_backward_matches_cpu() {
    let scale = 0.5f32;
    for (case, (loss, batch, outputs)) in loss_cases().into_iter().enumerate() {
        let act = ACTIVATIONS[case % ACTIVATIONS.len()];
        let (z, t, width) = loss_data(loss, batch, outputs, case as u64 * 10);
        let mut y = vec![0.0; z.len()];
        activation_forward(&mut y, &z, act);
        let expected = 0.5 + loss_forward(&y, &t, loss, batch, outputs);
        let mut stats = vec![7.0f32; 3 * STEP_STATS_STRIDE];
        stats[STEP_STATS_STRIDE] = 0.5;
        let (gpu, code, dz) =
            loss_gpu(&y, &z, &t, (loss, act), batch, width, scale, &stats, &flags_at_step(1, 1)).await;
        stats[STEP_STATS_STRIDE] = expected;
        let n = if loss == Loss::CrossEntropy { batch } else { batch * outputs };
        let impl_err = if loss == Loss::Mse { 0.0 } else { 5e-6 };
        let tol = sum_tolerance(n + 1, loss_abs_terms(&y, &t, loss, outputs)) / n as f32
            + impl_err
            + 4.0 * EPS * expected.abs();
        let what = format!("{loss:?} {act:?} B={batch} O={outputs}");
        check(&format!("{what} stats"), &gpu, &stats, |k| if k == STEP_STATS_STRIDE { tol } else { 0.0 });
        assert_eq!(code, u32::MAX, "{what}: no non-finite value");

        let mut dy = vec![0.0; batch * outputs];
        loss_backward(&mut dy, &y, &t, loss, batch, outputs, scale);
        let derivative = activation_derivatives(&z, &y, act);
        let mut cpu = dy.clone();
        activation_backward(&mut cpu, &z, &y, act);
        let (k, dy_err) = match loss {
            Loss::Mse => (0.0, 0.0),
            Loss::BceWithLogits => (scale / (batch * outputs) as f32, 1e-6),
            Loss::CrossEntropy => (scale / batch as f32, 1e-5),
        };
        check(&format!("{what} dz"), &dz, &cpu, |i| {
            let dy_tol = k * dy_err + 4.0 * EPS * dy[i].abs();
            derivative[i].abs() * dy_tol + derivative_rel(act) * dy[i].abs() + EPS * cpu[i].abs()
        });
    }
}
gpu_common::twin_test!(loss_forward_backward_matches_cpu);

/// Large logits stay finite (the stable forms; the results are exact to
/// 1e-3 of 1000 and 200), log(1 + e) is accurate for tiny e, and a
/// non-finite mean is flagged with phase 2, order 0, at the current step.
async fn loss_forward_is_stable_and_flags_non_finite() {
    let stats = vec![0.0f32; 8 * STEP_STATS_STRIDE];
    let linear = |loss| (loss, Activation::Linear);
    let run = |y: Vec<f32>, t: Vec<f32>, loss, batch, width, flags: Vec<u8>| {
        let stats = stats.clone();
        async move { loss_gpu(&y, &y, &t, linear(loss), batch, width, 1.0, &stats, &flags).await }
    };
    let (s, code, dz) = run(vec![500.0, -500.0], vec![1.0], Loss::CrossEntropy, 1, 1, flags()).await;
    assert!((s[0] - 1000.0).abs() <= 1e-3 && code == u32::MAX, "ce of [500, -500], class 1: {}", s[0]);
    assert_eq!(dz, [1.0, -1.0], "ce's gradient at [500, -500], class 1: softmax − onehot");
    let (s, code, _) = run(vec![200.0, -200.0], vec![0.0, 1.0], Loss::BceWithLogits, 1, 2, flags()).await;
    assert!((s[0] - 200.0).abs() <= 1e-3 && code == u32::MAX, "bce of ±200: {}", s[0]);
    // bce(20, 1) = log(1 + e⁻²⁰) ≈ 2.06e-9, which a plain log(1 + e) rounds
    // to 0; exp(−20) is within 43 ulp (3e-6 relative).
    let (s, _, _) = run(vec![20.0], vec![1.0], Loss::BceWithLogits, 1, 1, flags()).await;
    let exact = (-20.0f32).exp().ln_1p();
    assert!((s[0] - exact).abs() <= 1e-5 * exact, "bce(20, 1): {} vs {exact}", s[0]);
    let mut y = random(12, 3, 1.0);
    y[5] = f32::INFINITY;
    let (s, code, _) = run(y, random(12, 4, 1.0), Loss::Mse, 3, 4, flags_at_step(5, 2)).await;
    assert_eq!(code, (5 << 16) | (PHASE_LOSS << 8));
    assert!(!s[5 * STEP_STATS_STRIDE].is_finite(), "the non-finite mean is added to step 5's row");
}
gpu_common::twin_test!(loss_forward_is_stable_and_flags_non_finite);

/// The (I, O, B) cases of the dense kernels: every size in every role,
/// the full cross product thinned (it is slow on lavapipe).
fn dense_cases() -> Vec<(usize, usize, usize)> {
    let pairs = SIZES.iter().flat_map(|&i| SIZES.iter().map(move |&o| (i, o)));
    let triples =
        pairs.enumerate().flat_map(|(n, (i, o))| BATCHES.iter().enumerate().map(move |(m, &b)| (n + m, i, o, b)));
    triples
        .filter(|&(nm, i, o, b)| nm % 4 == 0 || ((i == 257 || o == 257) && b == 100))
        .map(|(_, i, o, b)| (i, o, b))
        .collect()
}

/// dense_backward_input against the dx part of model::dense_backward,
/// then model::activation_backward of the layer below, its activation
/// taken in turn over the cases. Both sum the O products dz·w in the same
/// order; the GPU fuses each multiply-add. Either sum is within
/// γ_O·Σ|dz·w| of the exact one, so they differ by at most
/// sum_tolerance(O, Σ_o |dz·w|) =: s; times f'(z_in) (see
/// `activation_derivatives`): |f'|·s + derivative_rel·(|v| + s) + ε·|dx|,
/// v the CPU's sum. dx starts NaN (it must be overwritten); NaNs around W
/// at offset 5 must not be read. The two variants give the same bits.
async fn dense_backward_input_matches_cpu() {
    for (case, (inputs, units, batch)) in dense_cases().into_iter().enumerate() {
        let act = ACTIVATIONS[case % ACTIVATIONS.len()];
        let (offset, len) = (5, units * inputs);
        let dz = random(batch * units, case as u64, 1.0);
        let mut params = random(offset + len + 3, case as u64 + 1000, 1.0 / (inputs as f64).sqrt());
        params[..offset].fill(f32::NAN);
        params[offset + len..].fill(f32::NAN);
        let (z_in, a_in) = layer_values(act, batch * inputs, case as u64 + 3000);
        let w = &params[offset..offset + len];
        let mut sums = vec![0.0; batch * inputs];
        let (mut dw, mut db, x) = (vec![0.0; len], vec![0.0; units], vec![0.0; batch * inputs]);
        dense_backward(Some(&mut sums), &mut dw, &mut db, &dz, &x, w, batch, inputs, units);
        let mut cpu = sums.clone();
        activation_backward(&mut cpu, &z_in, &a_in, act);
        let derivative = activation_derivatives(&z_in, &a_in, act);
        let shape = LayerShape { inputs, units, weight_offset: offset, bias_offset: offset + len, op: LayerOp::Dense };
        let dx = f32_bytes(&vec![f32::NAN; batch * inputs]);
        let ins = [f32_bytes(&dz), f32_bytes(&params), f32_bytes(&z_in), f32_bytes(&a_in)];
        let mut first: Option<Vec<f32>> = None;
        for v in MatmulVariant::ALL {
            let l = matmul::backward_input(v, batch, &shape, act);
            let args = [Arg::Out(&dx), Arg::In(&ins[0]), Arg::In(&ins[1]), Arg::In(&ins[2]), Arg::In(&ins[3])];
            let gpu = to_f32(&run_launch(&l, args).await[0]);
            check(&format!("{v:?} {act:?} I={inputs} O={units} B={batch} dx"), &gpu, &cpu, |k| {
                let (b, i) = (k / inputs, k % inputs);
                let s = sum_tolerance(units, (0..units).map(|o| (dz[b * units + o] * w[o * inputs + i]).abs()).sum());
                derivative[k].abs() * s + derivative_rel(act) * (sums[k].abs() + s) + EPS * cpu[k].abs()
            });
            match &first {
                None => first = Some(gpu),
                Some(tiled) => assert!(
                    tiled.iter().zip(&gpu).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "I={inputs} O={units} B={batch}: the variants' dx differ in their bits"
                ),
            }
        }
    }
}
gpu_common::twin_test!(dense_backward_input_matches_cpu);

/// Runs one variant of the weight gradient; the bias of the layer is at
/// `bias_offset` (only the blocked variant adds to it).
#[allow(clippy::too_many_arguments)]
async fn dense_backward_weight_gpu(
    v: MatmulVariant,
    grads: &[f32],
    flags: &[u8],
    dz: &[f32],
    x: &[f32],
    shape: (usize, usize, usize),
    offset: usize,
    bias_offset: usize,
    layer: u32,
) -> (Vec<f32>, u32) {
    let (inputs, units, batch) = shape;
    let shape = LayerShape { inputs, units, weight_offset: offset, bias_offset, op: LayerOp::Dense };
    let l = matmul::backward_weight(v, batch, &shape, layer as usize);
    let (grads, dz, x) = (f32_bytes(grads), f32_bytes(dz), f32_bytes(x));
    let out = run_launch(&l, [Arg::Out(&grads), Arg::Out(flags), Arg::In(&dz), Arg::In(&x)]).await;
    (to_f32(&out[0]), to_u32(&out[1])[0])
}

/// dense_backward_weight against the dweight part of model::dense_backward,
/// accumulating into nonzero gradients of a layer at offset 5 of the flat
/// buffer, its bias right after. The CPU adds the B products one by one
/// onto g; the GPU sums them (fused) and adds the total to g: two orders
/// of a sum of B + 1 terms, so sum_tolerance(B + 1, |g| + Σ_b |dz·x|).
/// The blocked variant also adds the bias gradient (against the dbias
/// part, sum_tolerance(B + 1, |g| + Σ_b |dz|)); the tiled one leaves the
/// bias to bias_backward. The two give the same bits for dW. Gradients
/// outside the layer must not change.
async fn dense_backward_weight_matches_cpu() {
    for (case, (inputs, units, batch)) in dense_cases().into_iter().enumerate() {
        let (offset, len) = (5, units * inputs);
        let bias = offset + len;
        let dz = random(batch * units, case as u64, 1.0);
        let x = random(batch * inputs, case as u64 + 1000, 1.0);
        let grads = random(bias + units + 3, case as u64 + 2000, 1.0);
        let mut cpu = grads.clone();
        let mut db = vec![0.0; units];
        dense_backward(None, &mut cpu[offset..bias], &mut db, &dz, &x, &[], batch, inputs, units);
        let mut first: Option<Vec<f32>> = None;
        for v in MatmulVariant::ALL {
            let mut cpu = cpu.clone();
            if v == MatmulVariant::Blocked {
                for o in 0..units {
                    cpu[bias + o] += db[o];
                }
            }
            let shape = (inputs, units, batch);
            let (gpu, code) = dense_backward_weight_gpu(v, &grads, &flags(), &dz, &x, shape, offset, bias, 1).await;
            let what = format!("{v:?} I={inputs} O={units} B={batch} grads");
            check(&what, &gpu, &cpu, |k| {
                if (offset..bias).contains(&k) {
                    let (o, i) = ((k - offset) / inputs, (k - offset) % inputs);
                    let products: f32 = (0..batch).map(|b| (dz[b * units + o] * x[b * inputs + i]).abs()).sum();
                    sum_tolerance(batch + 1, grads[k].abs() + products)
                } else if v == MatmulVariant::Blocked && (bias..bias + units).contains(&k) {
                    let o = k - bias;
                    sum_tolerance(batch + 1, grads[k].abs() + (0..batch).map(|b| dz[b * units + o].abs()).sum::<f32>())
                } else {
                    0.0 // outside the layer (and, tiled, the bias): untouched
                }
            });
            assert_eq!(code, u32::MAX, "{what}: no non-finite value");
            match &first {
                None => first = Some(gpu),
                Some(tiled) => assert!(
                    tiled[offset..bias].iter().zip(&gpu[offset..bias]).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "I={inputs} O={units} B={batch}: the variants' dW differ in their bits"
                ),
            }
        }
    }
}
gpu_common::twin_test!(dense_backward_weight_matches_cpu);

async fn bias_backward_gpu(
    grads: &[f32],
    flags: &[u8],
    dz: &[f32],
    batch: usize,
    offset: usize,
    layer: u32,
) -> (Vec<f32>, u32) {
    let units = dz.len() / batch;
    let shape = LayerShape { inputs: 1, units, weight_offset: offset, bias_offset: offset, op: LayerOp::Dense };
    let l = matmul::bias_backward(batch, &shape, layer as usize);
    let (grads, dz) = (f32_bytes(grads), f32_bytes(dz));
    let out = run_launch(&l, [Arg::Out(&grads), Arg::Out(flags), Arg::In(&dz)]).await;
    (to_f32(&out[0]), to_u32(&out[1])[0])
}

/// bias_backward against the dbias part of model::dense_backward,
/// accumulating into nonzero gradients at offset 9. Both sum the B values
/// of dz, in different orders, then add to g: sum_tolerance(B + 1,
/// |g| + Σ_b |dz|). Batch 600 makes each of the 256 invocations sum
/// several rows. Gradients outside the bias must not change.
async fn bias_backward_matches_cpu() {
    for (m, batch) in BATCHES.iter().copied().chain([600]).enumerate() {
        for (n, &units) in SIZES.iter().enumerate() {
            let (seed, offset) = ((m * 10 + n) as u64, 9);
            let dz = random(batch * units, seed, 1.0);
            let grads = random(offset + units + 4, seed + 100, 1.0);
            let mut cpu = grads.clone();
            let (mut dw, x) = (vec![0.0; units], vec![0.0; batch]);
            dense_backward(None, &mut dw, &mut cpu[offset..offset + units], &dz, &x, &[], batch, 1, units);
            let (gpu, code) = bias_backward_gpu(&grads, &flags(), &dz, batch, offset, 0).await;
            let what = format!("O={units} B={batch} grads");
            check(&what, &gpu, &cpu, |k| {
                if !(offset..offset + units).contains(&k) {
                    return 0.0;
                }
                let o = k - offset;
                sum_tolerance(batch + 1, grads[k].abs() + (0..batch).map(|b| dz[b * units + o].abs()).sum::<f32>())
            });
            assert_eq!(code, u32::MAX, "{what}: no non-finite value");
        }
    }
}
gpu_common::twin_test!(bias_backward_matches_cpu);

/// A NaN in dz makes gradients non-finite: phase 3, order 255 − layer, at
/// the current step; only the affected unit's gradients are NaN (in both
/// variants of the weight gradient, and the bias of the blocked one).
async fn backward_flags_non_finite_gradients() {
    let (batch, inputs, units) = (5, 3, 4);
    let mut dz = random(batch * units, 1, 1.0);
    dz[2 * units + 1] = f32::NAN;
    let x = random(batch * inputs, 2, 1.0);
    let grads = vec![0.0; 2 + units * inputs + units];
    let bias = 2 + units * inputs;
    for v in MatmulVariant::ALL {
        let shape = (inputs, units, batch);
        let (g, code) = dense_backward_weight_gpu(v, &grads, &flags_at_step(6, 0), &dz, &x, shape, 2, bias, 2).await;
        assert_eq!(code, (6 << 16) | (PHASE_BACKWARD << 8) | 253, "{v:?}");
        assert!(g[2 + inputs].is_nan() && g[2].is_finite(), "{v:?}: unit 1's row is NaN, unit 0's is not");
        if v == MatmulVariant::Blocked {
            assert!(g[bias + 1].is_nan() && g[bias].is_finite(), "blocked: unit 1's bias is NaN, unit 0's is not");
        }
    }
    let (g, code) = bias_backward_gpu(&grads, &flags_at_step(4, 1), &dz, batch, bias, 3).await;
    assert_eq!(code, (4 << 16) | (PHASE_BACKWARD << 8) | 252);
    assert!(g[bias + 1].is_nan() && g[bias].is_finite(), "unit 1's bias is NaN, unit 0's is not");
}
gpu_common::twin_test!(backward_flags_non_finite_gradients);
