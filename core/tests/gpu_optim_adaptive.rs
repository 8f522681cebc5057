//! The Adam/AdamW and LAMB kernels against their CPU twins, and the
//! optimizers' non-finite flags, over tensors of the awkward sizes.
//! Tolerances as in `gpu_optim.rs`: bit equality where the driver keeps
//! a·b + c as two roundings, else the propagated fma bound, with ulp
//! bounds stated where sqrt or division is involved.

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::optim::*;
use gpu_common::{flags_at_step, random, run_launch};
use stepscope_core::experiment::OptimizerSpec;
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::launch;
use stepscope_core::gpu::params::*;
use stepscope_core::model::TensorInfo;
use stepscope_core::optim::{optimizer_step, OptimizerState, StepScalars};

fn adam_hyper(spec: &OptimizerSpec) -> ([f64; 2], f64, f64, bool) {
    match *spec {
        OptimizerSpec::Adam { betas, eps, weight_decay, .. } => (betas, eps, weight_decay, false),
        OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => (betas, eps, weight_decay, true),
        _ => panic!("not adam"),
    }
}

/// The plan's Adam launch for `tensors` (`gpu::launch::adam_step`), run once.
async fn run_adam(spec: &OptimizerSpec, s: StepScalars, tensors: &[TensorInfo], state: [&[f32]; 4]) -> Vec<Vec<u8>> {
    let [params, m, v, grads] = state;
    let (n_layers, ends) = layer_ends(tensors);
    let l = launch::adam_step(spec, params.len(), n_layers as usize, ends).expect("an Adam spec");
    let l = l.decay_groups(tensors);
    let (params_bytes, m, v, updates) = (f32_bytes(params), f32_bytes(m), f32_bytes(v), vec![0u8; 4 * params.len()]);
    let (flags, grads, scalars) = (flags_at_step(STEP, 0), f32_bytes(grads), scalars_buffer(s));
    let table = ranges(tensors);
    let args = [
        Arg::Out(&params_bytes),
        Arg::Out(&m),
        Arg::Out(&v),
        Arg::Out(&updates),
        Arg::Out(&flags),
        Arg::In(&grads),
        Arg::In(&scalars),
        Arg::In(&table),
    ];
    run_launch(&l, args).await
}

/// Adam and AdamW. m and v are f32 mul/add in the twin's order:
/// assert_mul_add, where Adam's g' = g + λp may be off by dg = ε(|λp| + |g'|),
/// m (one fusable product ≤ |m_old| + |g'|) by ε(|m_old| + |g'| + |m|) + dg,
/// v by ε(|v_old| + (1−β2)g'² + |v|) + 2(1−β2)|g'|·dg. The parameter goes
/// through a sqrt and two divisions (≤ 2.5 ulp each on Vulkan/WebGPU): the
/// step (−lr/bc1)·m/denom may be ~10 ulp off, which after adding to p is at
/// most 16ε·|step| + ε·|p_new|, plus ε·|p| for a fused p·decay + step, plus
/// the step's change under the GPU's m and v (0 where they are bit-equal).
/// The CPU side is the engine's `optimizer_step`, over one decay group and
/// over nanoGPT's two (no decay for the biases, which the kernel reads from
/// the tensor table).
async fn adam_step_matches_cpu() {
    let specs = [
        OptimizerSpec::Adam { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 },
        // lerp's w ≥ ½ branch, and Adam's coupled decay
        OptimizerSpec::Adam { lr: 1e-2, betas: [0.3, 0.99], eps: 1e-8, weight_decay: 1e-2 },
        OptimizerSpec::Adamw { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 1e-2 },
    ];
    for (groups, tensors) in tensor_sets() {
        let (count, decays) = (total_len(&tensors), decays_at(&tensors));
        for (c, spec) in specs.iter().enumerate() {
            let (betas, eps, wd, decoupled) = adam_hyper(spec);
            let mut params = random(count, 300 + c as u64, 1.0);
            let mut state = OptimizerState::new(spec, count);
            for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
                let grads = random(count, 400 + 10 * c as u64 + k as u64, 1.0);
                let s = StepScalars::new(spec, spec.lr(), step);
                let (old_params, old_m, old_v) = (params.clone(), state.exp_avg.clone(), state.exp_avg_sq.clone());
                state.step = step - 1;
                optimizer_step(&mut params, &mut state, &grads, spec, spec.lr(), &tensors);
                let (m, v) = (&state.exp_avg, &state.exp_avg_sq);
                let out = run_adam(spec, s, &tensors, [&old_params, &old_m, &old_v, &grads]).await;
                let what = format!("{spec:?} ({groups}) step {step}");
                let gpu_params = to_f32(&out[0]);
                let decay = |i: usize| if decoupled && decays[i] { s.decay } else { 1.0 };
                let steps: Vec<f32> = (0..count).map(|i| params[i] - old_params[i] * decay(i)).collect();
                let (gpu_m, gpu_v) = (to_f32(&out[1]), to_f32(&out[2]));
                let (nss, bc2s, eps) = (s.neg_step_size, s.bias_correction2_sqrt, eps as f32);
                let step_of = |m: f32, v: f32| nss * m / (v.sqrt() / bc2s + eps);
                let moved = |i: usize| (step_of(gpu_m[i], gpu_v[i]) - step_of(m[i], v[i])).abs();
                let tol =
                    |i: usize| 16.0 * EPS * steps[i].abs() + EPS * (params[i].abs() + old_params[i].abs()) + moved(i);
                assert_close(&format!("{what} params"), &gpu_params, &params, tol);
                let wd_c = |i: usize| if !decoupled && decays[i] { wd as f32 } else { 0.0 };
                let g1 = |i: usize| grads[i] + wd_c(i) * old_params[i];
                let dg = |i: usize| EPS * ((wd_c(i) * old_params[i]).abs() + g1(i).abs());
                let tol_m = |i: usize| EPS * (old_m[i].abs() + g1(i).abs() + m[i].abs()) + dg(i);
                assert_mul_add(&format!("{what} exp_avg"), &gpu_m, m, tol_m);
                let omb2 = (1.0 - betas[1]) as f32;
                let tol_v =
                    |i: usize| EPS * (old_v[i] + omb2 * g1(i) * g1(i) + v[i]) + 2.0 * omb2 * g1(i).abs() * dg(i);
                assert_mul_add(&format!("{what} exp_avg_sq"), &gpu_v, v, tol_v);
                assert_updates(&what, &to_f32(&out[3]), &gpu_params, &old_params);
                assert_eq!(to_u32(&out[4])[0], u32::MAX, "{what}: no non-finite value");
            }
        }
    }
}
gpu_common::twin_test!(adam_step_matches_cpu);

struct LambOut {
    params: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
    norms: Vec<f32>,
    updates: Vec<f32>,
    flags: u32,
}

/// lamb_moments then lamb_step, as the engine records them.
async fn run_lamb(spec: &OptimizerSpec, s: StepScalars, tensors: &[TensorInfo], state: [&[f32]; 4]) -> LambOut {
    let [params, m, v, grads] = state;
    let n = tensors.len();
    let [moments_launch, step_launch] = launch::lamb(spec, n).expect("a LAMB spec");
    let (scalars, ranges) = (scalars_buffer(s), ranges(tensors));
    let (m, v, norms, flags) = (f32_bytes(m), f32_bytes(v), vec![0u8; 8 * n], flags_at_step(STEP, 0));
    let (params_bytes, grads) = (f32_bytes(params), f32_bytes(grads));
    let args = [
        Arg::Out(&m),
        Arg::Out(&v),
        Arg::Out(&norms),
        Arg::Out(&flags),
        Arg::In(&params_bytes),
        Arg::In(&grads),
        Arg::In(&scalars),
        Arg::In(&ranges),
    ];
    let moments = run_launch(&moments_launch, args).await;
    let updates = vec![0u8; 4 * params.len()];
    let args = [
        Arg::Out(&params_bytes),
        Arg::Out(&updates),
        Arg::Out(&moments[3]),
        Arg::In(&moments[0]),
        Arg::In(&moments[1]),
        Arg::In(&moments[2]),
        Arg::In(&scalars),
        Arg::In(&ranges),
    ];
    let out = run_launch(&step_launch, args).await;
    LambOut {
        params: to_f32(&out[0]),
        m: to_f32(&moments[0]),
        v: to_f32(&moments[1]),
        norms: to_f32(&moments[2]),
        updates: to_f32(&out[1]),
        flags: to_u32(&out[2])[0],
    }
}

/// LAMB. m and v: f32 mul/add in the twin's order, assert_mul_add (fused:
/// ε times the terms, ≤ |g| + |m_old| + |m| and g² + v_old + v). ‖p‖ and ‖r‖:
/// norm_tolerance against f64 sums of the CPU's values (each r carries ≤ 6
/// ulp from its sqrt and two divisions, 12 in r²), plus ‖Δr‖, where Δr is how
/// far r moves under the GPU's m and v, plus ε·|λp| for a fused + λp. The
/// parameter: the trust ratio is off by at most the sum of the two norms'
/// relative tolerances, r·ratio·lr by 10 ulp more, plus lr·ratio·|Δr|, plus
/// ε·(|p| + |p_new|). Tensor 1 is all zero: ‖p‖ = 0 gives ratio 1. The CPU
/// side is the engine's `optimizer_step`, over one decay group and over
/// nanoGPT's two (λ = 0 for the biases, read from the tensor table).
async fn lamb_step_matches_cpu() {
    for (groups, tensors) in tensor_sets() {
        let (count, decays) = (total_len(&tensors), decays_at(&tensors));
        let zero = tensors[1].offset..tensors[1].offset + tensors[1].len;
        for (c, weight_decay) in [0.0, 1e-2].into_iter().enumerate() {
            let (betas, eps) = ([0.9, 0.999], 1e-6);
            let spec = OptimizerSpec::Lamb { lr: 1e-2, betas, eps, weight_decay };
            let mut params = random(count, 500 + c as u64, 1.0);
            params[zero.clone()].fill(0.0);
            let mut state = OptimizerState::new(&spec, count);
            for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
                let grads = random(count, 600 + 10 * c as u64 + k as u64, 1.0);
                let s = StepScalars::new(&spec, spec.lr(), step);
                let (old_params, old_m, old_v) = (params.clone(), state.exp_avg.clone(), state.exp_avg_sq.clone());
                state.step = step - 1;
                optimizer_step(&mut params, &mut state, &grads, &spec, spec.lr(), &tensors);
                let (m, v) = (&state.exp_avg, &state.exp_avg_sq);
                let gpu = run_lamb(&spec, s, &tensors, [&old_params, &old_m, &old_v, &grads]).await;
                let what = format!("lamb wd {weight_decay} ({groups}) step {step}");
                let tol_m = |i: usize| EPS * (grads[i].abs() + old_m[i].abs() + m[i].abs());
                assert_mul_add(&format!("{what} exp_avg"), &gpu.m, m, tol_m);
                let tol_v = |i: usize| EPS * (grads[i] * grads[i] + old_v[i] + v[i]);
                assert_mul_add(&format!("{what} exp_avg_sq"), &gpu.v, v, tol_v);
                let (bc1, bc2) = (s.bias_correction1, s.bias_correction2);
                let wd = |i: usize| if decays[i] { weight_decay as f32 } else { 0.0 };
                let direction =
                    |m: f32, v: f32, i: usize| (m / bc1) / ((v / bc2).sqrt() + 1e-6) + wd(i) * old_params[i];
                let r_of = |i: usize| direction(m[i], v[i], i);
                let dr: Vec<f32> = (0..count)
                    .map(|i| {
                        let moved = direction(gpu.m[i], gpu.v[i], i) - r_of(i);
                        moved.abs() + EPS * (wd(i) * old_params[i]).abs()
                    })
                    .collect();
                let mut rel = vec![0.0f32; count]; // per element: the trust ratio's relative tolerance
                let mut moved = vec![0.0f32; count];
                for (t, info) in tensors.iter().enumerate() {
                    let range = info.offset..info.offset + info.len;
                    let pn = tensor_norm(&old_params[range.clone()]);
                    let rn = tensor_norm(&range.clone().map(r_of).collect::<Vec<_>>());
                    let tp = norm_tolerance(info.len, pn, 0.0);
                    let tr = norm_tolerance(info.len, rn, 12.0) + tensor_norm(&dr[range.clone()]);
                    let (gp, gr) = (gpu.norms[2 * t], gpu.norms[2 * t + 1]);
                    assert!((gp - pn).abs() <= tp, "{what} ‖p‖ of tensor {t}: {gp} vs {pn}");
                    assert!((gr - rn).abs() <= tr, "{what} ‖r‖ of tensor {t}: {gr} vs {rn}");
                    let ratio = if pn == 0.0 || rn == 0.0 { 1.0 } else { pn / rn };
                    for i in range {
                        rel[i] = if ratio == 1.0 { 0.0 } else { tp / pn + tr / rn };
                        moved[i] = spec.lr() as f32 * ratio * dr[i];
                    }
                }
                let steps = differences(&params, &old_params);
                assert!(steps[zero.clone()].iter().all(|&d| d != 0.0), "ratio 1 moves the zero tensor");
                let tol = |i: usize| {
                    let ulps = EPS * (params[i].abs() + old_params[i].abs());
                    (rel[i] + 10.0 * EPS) * steps[i].abs() + moved[i] + ulps
                };
                assert_close(&format!("{what} params"), &gpu.params, &params, tol);
                assert_updates(&what, &gpu.updates, &gpu.params, &old_params);
                assert_eq!(gpu.flags, u32::MAX, "{what}: no non-finite value");
            }
        }
    }
}
gpu_common::twin_test!(lamb_step_matches_cpu);

const fn optimizer_code(layer: u32) -> u32 {
    (STEP << 16) | (PHASE_OPTIMIZER << 8) | layer
}

/// A huge learning rate overflows the parameters: the code names step STEP,
/// the optimizer phase and the first layer that overflowed.
async fn optimizers_flag_non_finite_parameters() {
    let tensors = tensors();
    let count = total_len(&tensors);
    let params = random(count, 1, 1.0);
    let spec = OptimizerSpec::Sgd { lr: 1e38, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0 };
    let (s, p) = (StepScalars::new(&spec, spec.lr(), 5), sgd_launch(count, &spec, &tensors));
    // Gradients of 100 from layer `first` on: 1e38·100 overflows f32 there only.
    for first in [1usize, 2] {
        let mut grads = vec![0.0f32; count];
        grads[tensors[2 * first].offset..].fill(100.0);
        let out = run_sgd(&p, s, &tensors, &params, &[0.0], &grads).await;
        assert_eq!(to_u32(&out[3])[0], optimizer_code(first as u32), "sgd from layer {first}");
    }

    // Adam: −lr/bc1 = −1e39 is −inf in f32; every parameter turns non-finite.
    let spec = OptimizerSpec::Adam { lr: 1e38, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 };
    let (zeros, grads) = (vec![0.0f32; count], random(count, 2, 1.0));
    let state = [&params[..], &zeros, &zeros, &grads];
    let out = run_adam(&spec, StepScalars::new(&spec, spec.lr(), 1), &tensors, state).await;
    assert_eq!(to_u32(&out[4])[0], optimizer_code(0), "adam");

    // LAMB: a NaN gradient in tensor 3 (layer 1's bias) poisons that tensor only.
    let spec = OptimizerSpec::Lamb { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-6, weight_decay: 0.0 };
    let mut grads = random(count, 3, 1.0);
    grads[tensors[3].offset + 10] = f32::NAN;
    let s = StepScalars::new(&spec, spec.lr(), 1);
    let gpu = run_lamb(&spec, s, &tensors, [&params, &zeros, &zeros, &grads]).await;
    assert_eq!(gpu.flags, optimizer_code(1), "lamb");
}
gpu_common::twin_test!(optimizers_flag_non_finite_parameters);
