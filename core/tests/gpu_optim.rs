//! The regularization, gradient-norm, clipping and SGD kernels against
//! their CPU twins, over tensors of the awkward sizes (Adam and LAMB:
//! `gpu_optim_adaptive.rs`; shared helpers: `gpu_common/optim.rs`).
//!
//! Tolerances: where a kernel repeats the twin's f32 additions and
//! multiplications in the same order, the results must be bit-identical on
//! a driver that keeps a·b + c as two roundings (lavapipe, CI's adapter).
//! Vulkan and WGSL let a driver fuse a·b + c into one fma (NVIDIA's does):
//! there each fused operation may move its result by ε·(|a·b| + |result|),
//! and that bound, propagated, is asserted instead (`assert_mul_add`). Where
//! sqrt or a division is involved (Vulkan and WebGPU allow ~2.5 ulp for
//! those) or the GPU reduces in another order, an ulp or sum_tolerance bound
//! is stated at the assertion.

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::optim::*;
use gpu_common::{flags_at_step, random, run_launch, SIZES};
use stepscope_core::experiment::{OptimizerSpec, Regularization, RegularizationKind};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::model::{regularization_backward, TensorInfo};
use stepscope_core::optim::{clip_grad_norm, global_grad_norm, optimizer_step, OptimizerState, StepScalars};

/// The same f32 mul and add per element: assert_mul_add, where a fused
/// g + rate·w may differ by ε·(|rate·w| + |result|) (l1's rate·sign is exact).
async fn regularization_backward_matches_cpu() {
    for (case, &len) in SIZES.iter().enumerate() {
        for (kind, code) in [(RegularizationKind::L1, 0), (RegularizationKind::L2, 1)] {
            let offset = 3; // the tensor need not start at 0; outside it nothing changes
            let n = offset + len + 2;
            let mut params = random(n, case as u64, 1.0);
            params[offset] = 0.0; // sign(0) = 0
            let grads = random(n, case as u64 + 50, 1.0);
            let reg = Regularization { kind, rate: 0.03 };
            let (name, shape) = ("w".to_string(), vec![len]);
            let t = TensorInfo { name, shape, offset, len, is_weight: true, decays: true };
            let mut cpu = grads.clone();
            regularization_backward(&mut cpu, &params, &[t], &reg);
            let t = TensorInfo { name: "w".into(), shape: vec![len], offset, len, is_weight: true, decays: true };
            let (grads_bytes, params_bytes) = (f32_bytes(&grads), f32_bytes(&params));
            let l = launch::regularization_backward(&t, &reg);
            let out = run_launch(&l, [Arg::Out(&grads_bytes), Arg::In(&params_bytes)]).await;
            let fused = |i: usize| EPS * ((reg.rate as f32 * params[i]).abs() + cpu[i].abs());
            let tol = |i: usize| if code == 0 { 0.0 } else { fused(i) };
            assert_mul_add(&format!("{kind:?} len {len}"), &to_f32(&out[0]), &cpu, tol);
        }
    }
}
gpu_common::twin_test!(regularization_backward_matches_cpu);

/// Per-tensor norms within norm_tolerance (f32 tree sum against f64 sum),
/// then clip_grad_norm on the CPU's norms with clipping off, on and below
/// the threshold.
async fn grad_norm_and_clip_match_cpu() {
    let mut tensors = tensors();
    let p_len = total_len(&tensors);
    for (name, offset, len) in [("big", p_len, 1000), ("zero", p_len + 1000, 5)] {
        let (name, shape) = (name.to_string(), vec![len]);
        tensors.push(TensorInfo { name, shape, offset, len, is_weight: true, decays: true });
    }
    let (count, n_tensors) = (total_len(&tensors), tensors.len());
    let mut grads = random(count, 7, 1.0);
    grads[count - 5..].fill(0.0);

    let (zeros, grads_bytes, table) = (vec![0u8; 4 * n_tensors], f32_bytes(&grads), ranges(&tensors));
    let l = launch::grad_norm(n_tensors);
    let gpu_norms = to_f32(&run_launch(&l, [Arg::Out(&zeros), Arg::In(&grads_bytes), Arg::In(&table)]).await[0]);
    let norms: Vec<f32> = tensors.iter().map(|t| tensor_norm(&grads[t.offset..t.offset + t.len])).collect();
    let tol = |t: usize| norm_tolerance(tensors[t].len, norms[t], 0.0);
    assert_close("grad_norm", &gpu_norms, &norms, tol);
    assert_eq!(gpu_norms[n_tensors - 1], 0.0);

    // The twin's combination: Σ norm² in f32 in tensor order, then √.
    let total = global_grad_norm(&grads, &tensors);
    assert_eq!(total, norms.iter().fold(0.0f32, |acc, n| acc + n * n).sqrt(), "as clip.rs");
    for (max_norm, clip_enabled) in [(2.0 * total, 1u32), (0.5 * total, 1), (0.5 * total, 0)] {
        let mut cpu = grads.clone();
        let clipped = clip_enabled == 1 && clip_grad_norm(&mut cpu, total, max_norm as f64);
        assert_eq!(clipped, max_norm < total && clip_enabled == 1);
        let max_norm_f64 = (clip_enabled == 1).then_some(max_norm as f64);
        let l = launch::clip_grad_norm(count, n_tensors, max_norm_f64);
        let stats = f32_bytes(&vec![-7.0f32; 4 * (STEP as usize + 1)]);
        let (grads_bytes, flags, norms_bytes) = (f32_bytes(&grads), flags_at_step(STEP, 0), f32_bytes(&norms));
        let args = [Arg::Out(&grads_bytes), Arg::Out(&stats), Arg::Out(&flags), Arg::In(&norms_bytes)];
        let out = run_launch(&l, args).await;
        let (gpu, gpu_stats) = (to_f32(&out[0]), to_f32(&out[1]));
        let what = format!("clip max_norm {max_norm} enabled {clip_enabled}");
        // total: the same n_tensors f32 mul-adds (a driver may fuse them, ≤ 1 ulp
        // of the sum each) and a sqrt (≤ 2 ulp).
        let s = 4 * STEP as usize;
        let total_tol = (n_tensors as f32 + 2.0) * EPS * total;
        let gpu_total = gpu_stats[s + 1];
        assert!((gpu_total - total).abs() <= total_tol, "{what}: total {gpu_total} vs {total}");
        assert_eq!(gpu_stats[s + 2], if clipped { 1.0 } else { 0.0 }, "{what}: clipped");
        assert_eq!(gpu_stats[s], -7.0, "{what}: the loss slot is not touched");
        assert!(gpu_stats[..s].iter().all(|&v| v == -7.0), "{what}: only step {STEP}'s row");
        if clipped {
            // coef = max_norm / (total + 1e-6): the total's error (n_tensors + 2 ulp)
            // plus the division (≤ 3 ulp) plus the product (1 ulp).
            let rel = (n_tensors as f32 + 8.0) * EPS;
            assert_close(&what, &gpu, &cpu, |i| rel * cpu[i].abs());
        } else {
            assert_bits(&what, &gpu, &cpu);
        }
    }
}
gpu_common::twin_test!(grad_norm_and_clip_match_cpu);

/// SGD: only f32 mul and add, in the twin's order: assert_mul_add for the
/// parameters and the momentum buffer. Fused, each of the ≤ 4 multiply-adds
/// (g + λp, bμ + (1−τ)g, g + μb, p − lr·g) moves its result by ε times its
/// terms, all ≤ G = 3(|g| + |λp|) + |b_old| + 3|b_new| (μ, 1 − τ ≤ 1), and
/// passes earlier errors on with a factor ≤ 2: b within 2εG, the step
/// within 8ε·lr·G, p within that plus ε·|p_new|. The CPU side is the
/// engine's `optimizer_step`, over one decay group and over nanoGPT's two
/// (λ = 0 for the biases), which the kernel reads from the tensor table.
async fn sgd_step_matches_cpu() {
    let configs = [
        (0.0, 0.0, false, 0.0),
        (0.9, 0.1, false, 0.0),
        (0.9, 0.0, true, 0.0),
        (0.8, 0.0, true, 1e-2),
        (0.0, 0.0, false, 1e-2),
    ];
    for (groups, tensors) in tensor_sets() {
        let (count, decays) = (total_len(&tensors), decays_at(&tensors));
        for (c, &(momentum, dampening, nesterov, weight_decay)) in configs.iter().enumerate() {
            let spec = OptimizerSpec::Sgd { lr: 0.05, momentum, dampening, nesterov, weight_decay };
            let mut params = random(count, 100 + c as u64, 1.0);
            let mut state = OptimizerState::new(&spec, count);
            let buffer = |state: &OptimizerState| {
                let b = &state.momentum_buffer;
                if b.is_empty() {
                    vec![0.0f32; count]
                } else {
                    b.clone()
                }
            };
            for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
                let grads = random(count, 200 + 10 * c as u64 + k as u64, 1.0);
                let s = StepScalars::new(&spec, spec.lr(), step);
                let (old_params, old_buf) = (params.clone(), buffer(&state));
                state.step = step - 1;
                optimizer_step(&mut params, &mut state, &grads, &spec, spec.lr(), &tensors);
                let buf = buffer(&state);
                let p = sgd_launch(count, &spec, &tensors);
                let out = run_sgd(&p, s, &tensors, &old_params, &old_buf, &grads).await;
                let what = format!("{spec:?} ({groups}) step {step}");
                let gpu_params = to_f32(&out[0]);
                let wd = |i: usize| if decays[i] { weight_decay as f32 } else { 0.0 };
                let big_g = |i: usize| {
                    3.0 * (grads[i].abs() + (wd(i) * old_params[i]).abs()) + old_buf[i].abs() + 3.0 * buf[i].abs()
                };
                let lr = spec.lr() as f32;
                let tol_p = |i: usize| 8.0 * EPS * lr * big_g(i) + EPS * params[i].abs();
                assert_mul_add(&format!("{what} params"), &gpu_params, &params, tol_p);
                let tol_b = |i: usize| 2.0 * EPS * big_g(i);
                assert_mul_add(&format!("{what} momentum"), &to_f32(&out[1]), &buf, tol_b);
                assert_updates(&what, &to_f32(&out[2]), &gpu_params, &old_params);
                assert_eq!(to_u32(&out[3])[0], u32::MAX, "{what}: no non-finite value");
            }
        }
    }
}
gpu_common::twin_test!(sgd_step_matches_cpu);
