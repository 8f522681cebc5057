//! The loss and backward kernels against their CPU twins, over awkward
//! sizes. Runs on whatever adapter wgpu finds (lavapipe in CI), and in
//! Chromium on WebGPU (`tests/tests/gpu_kernels.rs`).
//!
//! Tolerances cite the Vulkan precision of the shader built-ins (SPIR-V
//! OpFDiv ≤ 2.5 ulp, exp ≤ 3 + 2|x| ulp, log ≤ 3 ulp or 2⁻²¹ absolute on
//! [0.5, 2]); the CPU twin rounds correctly (≤ ½ ulp).

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use bytemuck::Pod;
use gpu_common::{flags, flags_at_step, random, run, sum_tolerance, BATCHES, SIZES};
use stepscope_core::experiment::{Activation, Loss};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::matmul::{Matmul, MatmulVariant};
use stepscope_core::gpu::params::*;
use stepscope_core::gpu::Kernel;
use stepscope_core::model::{activation_backward, activation_forward, dense_backward};
use stepscope_core::model::{loss_backward, loss_forward};

const EPS: f32 = f32::EPSILON;

/// Runs `kernel` with bindings `outs` (read_write), then `ins`, then `p`;
/// returns the `outs` after the run.
async fn launch<P: Pod>(kernel: Kernel, outs: &[&[u8]], ins: &[&[f32]], p: &P, grid: [u32; 3]) -> Vec<Vec<u8>> {
    let ins: Vec<Vec<u8>> = ins.iter().map(|v| f32_bytes(v)).collect();
    let mut args: Vec<Arg> = outs.iter().map(|o| Arg::Out(o)).collect();
    args.extend(ins.iter().map(|v| Arg::In(v)));
    args.push(Arg::Uniform(bytemuck::bytes_of(p)));
    run(kernel, &args, grid).await
}

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

async fn loss_forward_gpu(
    y: &[f32],
    t: &[f32],
    loss: Loss,
    batch: usize,
    width: usize,
    stats: &[f32],
    flags: &[u8],
) -> (Vec<f32>, u32) {
    let p = LossForwardParams {
        batch: batch as u32,
        outputs: (y.len() / batch) as u32,
        loss: loss_code(loss),
        target_width: width as u32,
        layer: 2,
        _pad: [0; 3],
    };
    let out = launch(Kernel::LossForward, &[&f32_bytes(stats), flags], &[y, t], &p, [1, 1, 1]).await;
    (to_f32(&out[0]), to_u32(&out[1])[0])
}

/// loss_forward against model::loss_forward, added into step 1's row of
/// stats (which already holds 0.5; other rows must not change). Both sum
/// n terms (elements or rows) in different orders: sum_tolerance(n + 1,
/// Σ|term|) / n covers the reordering and a fused (y − t)² + acc. For bce
/// and ce each term also goes through exp/log: with |y| ≤ 3 exp is within
/// 15 ulp (≤ 9e-7 relative on a row's sum, summed in the same order as
/// the CPU), log within 1.5e-6 absolute, plus a rounding of the O(10)
/// result (1e-6): 5e-6 absolute per term, hence on the mean. The division
/// (≤ 2.5 ulp) and the add into stats take 4·ε·|result|.
async fn loss_forward_matches_cpu() {
    for (case, (loss, batch, outputs)) in loss_cases().into_iter().enumerate() {
        let (y, t, width) = loss_data(loss, batch, outputs, case as u64 * 10);
        let expected = 0.5 + loss_forward(&y, &t, loss, batch, outputs);
        let mut stats = vec![7.0f32; 3 * STEP_STATS_STRIDE];
        stats[STEP_STATS_STRIDE] = 0.5;
        let (gpu, code) = loss_forward_gpu(&y, &t, loss, batch, width, &stats, &flags_at_step(1, 1)).await;
        stats[STEP_STATS_STRIDE] = expected;
        let n = if loss == Loss::CrossEntropy { batch } else { batch * outputs };
        let impl_err = if loss == Loss::Mse { 0.0 } else { 5e-6 };
        let tol = sum_tolerance(n + 1, loss_abs_terms(&y, &t, loss, outputs)) / n as f32
            + impl_err
            + 4.0 * EPS * expected.abs();
        let what = format!("{loss:?} B={batch} O={outputs} stats");
        check(&what, &gpu, &stats, |k| if k == STEP_STATS_STRIDE { tol } else { 0.0 });
        assert_eq!(code, u32::MAX, "{what}: no non-finite value");
    }
}
gpu_common::twin_test!(loss_forward_matches_cpu);

/// Large logits stay finite (the stable forms; the results are exact to
/// 1e-3 of 1000 and 200), log(1 + e) is accurate for tiny e, and a
/// non-finite mean is flagged with phase 2, order 0, at the current step.
async fn loss_forward_is_stable_and_flags_non_finite() {
    let stats = vec![0.0f32; 8 * STEP_STATS_STRIDE];
    let (s, code) = loss_forward_gpu(&[500.0, -500.0], &[1.0], Loss::CrossEntropy, 1, 1, &stats, &flags()).await;
    assert!((s[0] - 1000.0).abs() <= 1e-3 && code == u32::MAX, "ce of [500, -500], class 1: {}", s[0]);
    let (s, code) = loss_forward_gpu(&[200.0, -200.0], &[0.0, 1.0], Loss::BceWithLogits, 1, 2, &stats, &flags()).await;
    assert!((s[0] - 200.0).abs() <= 1e-3 && code == u32::MAX, "bce of ±200: {}", s[0]);
    // bce(20, 1) = log(1 + e⁻²⁰) ≈ 2.06e-9, which a plain log(1 + e) rounds
    // to 0; exp(−20) is within 43 ulp (3e-6 relative).
    let (s, _) = loss_forward_gpu(&[20.0], &[1.0], Loss::BceWithLogits, 1, 1, &stats, &flags()).await;
    let exact = (-20.0f32).exp().ln_1p();
    assert!((s[0] - exact).abs() <= 1e-5 * exact, "bce(20, 1): {} vs {exact}", s[0]);
    let mut y = random(12, 3, 1.0);
    y[5] = f32::INFINITY;
    let (s, code) = loss_forward_gpu(&y, &random(12, 4, 1.0), Loss::Mse, 3, 4, &stats, &flags_at_step(5, 2)).await;
    assert_eq!(code, (5 << 16) | (PHASE_LOSS << 8));
    assert!(!s[5 * STEP_STATS_STRIDE].is_finite(), "the non-finite mean is added to step 5's row");
}
gpu_common::twin_test!(loss_forward_is_stable_and_flags_non_finite);

/// loss_backward against model::loss_backward (scale 0.5; dy starts NaN:
/// it must be overwritten). Per element:
///   mse: k = 2·scale/(B·O) is one division (≤ 2.5 ulp), then one product:
///        4·ε·|dy|.
///   bce: σ(y) through exp (|y| ≤ 3: ≤ 9 ulp, damped by σ' ≤ ¼) and a
///        division: ≤ 5e-7 absolute on σ − t, so |k|·1e-6 + 4·ε·|dy|.
///   ce:  lse within 3.3e-6 (exp ≤ 15 ulp, log ≤ 1.5e-6, one rounding),
///        then exp(y − lse) with |y − lse| ≤ 12 (≤ 27 ulp): softmax within
///        6e-6 relative, ≤ 1: |k|·1e-5 + 4·ε·|dy|.
async fn loss_backward_matches_cpu() {
    let scale = 0.5f32;
    for (case, (loss, batch, outputs)) in loss_cases().into_iter().enumerate() {
        let (y, t, width) = loss_data(loss, batch, outputs, case as u64 * 10 + 1);
        let mut cpu = vec![0.0; batch * outputs];
        loss_backward(&mut cpu, &y, &t, loss, batch, outputs, scale);
        let p = LossBackwardParams {
            batch: batch as u32,
            outputs: outputs as u32,
            loss: loss_code(loss),
            target_width: width as u32,
            scale,
            _pad: [0; 3],
        };
        let dy = f32_bytes(&vec![f32::NAN; batch * outputs]);
        let gpu = to_f32(&launch(Kernel::LossBackward, &[&dy], &[&y, &t], &p, elementwise_grid(batch)).await[0]);
        let (k, impl_err) = match loss {
            Loss::Mse => (0.0, 0.0),
            Loss::BceWithLogits => (scale / (batch * outputs) as f32, 1e-6),
            Loss::CrossEntropy => (scale / batch as f32, 1e-5),
        };
        check(&format!("{loss:?} B={batch} O={outputs} dy"), &gpu, &cpu, |i| k * impl_err + 4.0 * EPS * cpu[i].abs());
    }
}
gpu_common::twin_test!(loss_backward_matches_cpu);

/// activation_backward against model::activation_backward, for all seven
/// activations; z in [−4, 4] with every fifth z exactly 0 (the kinks);
/// dz starts NaN (it must be overwritten).
///   linear, relu, leaky_relu, sigmoid: the same f32 operations in the
///        same order, nothing to fuse: exact equality.
///   tanh: 1 − a·a may be fused into one fma, which skips the rounding of
///        a² (≤ ½ulp(1) = ε/2); with the final product: |da|·2·ε.
///   gelu_tanh, silu: exp within 3 + 2|x| ulp (≤ 25 ulp for |x| ≤ 11),
///        tanh_stable vs a correctly rounded tanh, and a derivative whose
///        sensitivity to t or σ is ≤ 9 for |z| ≤ 4: |da|·1e-5.
async fn activation_backward_matches_cpu() {
    use Activation::*;
    let all = [Linear, Relu, LeakyRelu, Tanh, Sigmoid, GeluTanh, Silu];
    for (c, count) in SIZES.iter().copied().chain([100 * 257]).enumerate() {
        for (k, &act) in all.iter().enumerate() {
            let seed = (c * 10 + k) as u64;
            let mut z = random(count, seed, 4.0);
            z.iter_mut().step_by(5).for_each(|v| *v = 0.0);
            let mut a = vec![0.0; count];
            activation_forward(&mut a, &z, act);
            let da = random(count, seed + 500, 2.0);
            let mut cpu = vec![0.0; count];
            activation_backward(&mut cpu, &da, &z, &a, act);
            let p = ActivationBackwardParams { count: count as u32, activation: activation_code(act), _pad: [0; 2] };
            let dz = f32_bytes(&vec![f32::NAN; count]);
            let out = launch(Kernel::ActivationBackward, &[&dz], &[&da, &z, &a], &p, elementwise_grid(count)).await;
            let rel = match act {
                Tanh => 2.0 * EPS,
                GeluTanh | Silu => 1e-5,
                _ => 0.0,
            };
            check(&format!("{act:?} n={count} dz"), &to_f32(&out[0]), &cpu, |i| rel * da[i].abs());
        }
    }
}
gpu_common::twin_test!(activation_backward_matches_cpu);

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

/// dense_backward_input against the dx part of model::dense_backward.
/// Both sum the O products dz·w in the same order; the GPU fuses each
/// multiply-add. Either result is within γ_O·Σ|dz·w| of the exact one, so
/// they differ by at most sum_tolerance(O, Σ_o |dz·w|). dx starts NaN (it
/// must be overwritten); NaNs around W at offset 5 must not be read.
async fn dense_backward_input_matches_cpu() {
    for (case, (inputs, units, batch)) in dense_cases().into_iter().enumerate() {
        let (offset, len) = (5, units * inputs);
        let dz = random(batch * units, case as u64, 1.0);
        let mut params = random(offset + len + 3, case as u64 + 1000, 1.0 / (inputs as f64).sqrt());
        params[..offset].fill(f32::NAN);
        params[offset + len..].fill(f32::NAN);
        let w = &params[offset..offset + len];
        let mut cpu = vec![0.0; batch * inputs];
        let (mut dw, mut db, x) = (vec![0.0; len], vec![0.0; units], vec![0.0; batch * inputs]);
        dense_backward(Some(&mut cpu), &mut dw, &mut db, &dz, &x, w, batch, inputs, units);
        let p = DenseBackwardInputParams {
            batch: batch as u32,
            inputs: inputs as u32,
            units: units as u32,
            weight_offset: offset as u32,
        };
        let dx = f32_bytes(&vec![f32::NAN; batch * inputs]);
        let mut first: Option<Vec<f32>> = None;
        for v in MatmulVariant::ALL {
            let grid = Matmul::BackwardInput.grid(v, batch, inputs, units);
            let gpu = to_f32(&launch(Matmul::BackwardInput.kernel(v), &[&dx], &[&dz, &params], &p, grid).await[0]);
            check(&format!("{v:?} I={inputs} O={units} B={batch} dx"), &gpu, &cpu, |k| {
                let (b, i) = (k / inputs, k % inputs);
                sum_tolerance(units, (0..units).map(|o| (dz[b * units + o] * w[o * inputs + i]).abs()).sum())
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
    let p = DenseBackwardWeightParams {
        batch: batch as u32,
        inputs: inputs as u32,
        units: units as u32,
        weight_offset: offset as u32,
        layer,
        bias_offset: bias_offset as u32,
        _pad: [0; 2],
    };
    let grid = Matmul::BackwardWeight.grid(v, batch, inputs, units);
    let out = launch(Matmul::BackwardWeight.kernel(v), &[&f32_bytes(grads), flags], &[dz, x], &p, grid).await;
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
    let p = BiasBackwardParams { batch: batch as u32, units: units as u32, bias_offset: offset as u32, layer };
    let out = launch(Kernel::BiasBackward, &[&f32_bytes(grads), flags], &[dz], &p, [units as u32, 1, 1]).await;
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
