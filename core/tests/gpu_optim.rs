//! The regularization, gradient-norm, clipping and optimizer kernels against
//! their CPU twins, over tensors of the awkward sizes.
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

use gpu_common::{ctx, flags_at_step, random, run, sum_tolerance, SIZES};
use stepscope_core::experiment::{OptimizerSpec, Regularization, RegularizationKind};
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::params::*;
use stepscope_core::gpu::Kernel;
use stepscope_core::model::{regularization_backward, TensorInfo};
use stepscope_core::optim::{adam_step, clip_grad_norm, global_grad_norm, lamb_step, sgd_step, StepScalars};

const EPS: f32 = f32::EPSILON;
/// The step index set in flags[1]: the kernels must read scalars[STEP].
const STEP: u32 = 3;

/// Tensors of every awkward size end to end, as (weight, bias) pairs: 3 layers.
fn tensors() -> Vec<TensorInfo> {
    let mut tensors: Vec<TensorInfo> = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let offset = tensors.last().map_or(0, |t| t.offset + t.len);
        let (name, shape, is_weight) = (format!("t{i}"), vec![len], i % 2 == 0);
        tensors.push(TensorInfo { name, shape, offset, len, is_weight });
    }
    tensors
}

fn total_len(tensors: &[TensorInfo]) -> usize {
    tensors.iter().map(|t| t.len).sum()
}

fn ranges(tensors: &[TensorInfo]) -> Vec<u8> {
    let r: Vec<[u32; 2]> = tensors.iter().map(|t| [t.offset as u32, t.len as u32]).collect();
    bytemuck::cast_slice(&r).to_vec() // TensorRange {offset, len}
}

/// Layer l = tensors 2l and 2l + 1; its end is the end of its bias.
fn layer_ends(tensors: &[TensorInfo]) -> (u32, LayerEnds) {
    let mut ends = [[0u32; 4]; 4];
    let n = tensors.len() / 2;
    for l in 0..n {
        let b = &tensors[2 * l + 1];
        ends[l / 4][l % 4] = (b.offset + b.len) as u32;
    }
    (n as u32, ends)
}

/// The scalars of one step at index STEP; the other entries are poisoned
/// (NaN, first_step flipped), so reading the wrong index shows.
fn scalars_buffer(s: StepScalars) -> Vec<u8> {
    let mut poison: StepScalars = bytemuck::cast([f32::NAN.to_bits(); 8]);
    (poison.first_step, poison._pad) = (1 - s.first_step, 0);
    let mut v = vec![poison; STEP as usize + 1];
    v[STEP as usize] = s;
    bytemuck::cast_slice(&v).to_vec()
}

fn assert_bits(what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: length");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.to_bits(), c.to_bits(), "{what}[{i}]: gpu {g} vs cpu {c}");
    }
}

fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: length");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!((g - c).abs() <= tol(i), "{what}[{i}]: gpu {g} vs cpu {c} (tolerance {})", tol(i));
    }
}

/// Whether the driver may fuse a·b + c into an fma: all but lavapipe, which
/// does not (checked: the kernels match their twins bit for bit there).
/// In the browser the driver is not named (SwiftShader reports ""): bounds.
fn fuses() -> bool {
    ctx().adapter_info.driver != "llvmpipe"
}

/// Bit equality where the driver does not fuse multiply-adds, else `tol`.
fn assert_mul_add(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    if fuses() {
        assert_close(what, gpu, cpu, tol);
    } else {
        assert_bits(what, gpu, cpu);
    }
}

fn differences(new: &[f32], old: &[f32]) -> Vec<f32> {
    new.iter().zip(old).map(|(n, o)| n - o).collect()
}

/// updates = p_new − p_old, up to the rounding of p_new: a compiler may fold
/// (p + x) − p into x (Mesa's NIR does), so allow ε·(|p_new| + |p_old|).
fn assert_updates(what: &str, updates: &[f32], new: &[f32], old: &[f32]) {
    let tol = |i: usize| EPS * (new[i].abs() + old[i].abs());
    assert_close(&format!("{what} updates"), updates, &differences(new, old), tol);
}

/// clip.rs's per-tensor norm: the sum of squares in f64, then f32.
fn tensor_norm(g: &[f32]) -> f32 {
    g.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt() as f32
}

/// Bound on |GPU − CPU| for an f32 norm √S of n terms: the GPU's f32 sum (any
/// order) is within sum_tolerance(n, S) of the exact S (the CPU's f64 sum is
/// exact to ~n·2⁻⁵³), so the square root moves by at most that over 2√S; plus
/// 2 ulp for the two final roundings (the GPU's sqrt may be ~1 ulp off).
fn norm_tolerance(n: usize, norm: f32, term_rel_err: f32) -> f32 {
    if norm == 0.0 {
        return 0.0;
    }
    let s = norm * norm;
    sum_tolerance(n, s) / (2.0 * norm) + (2.0 + term_rel_err) * EPS * norm
}

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
            let t = TensorInfo { name, shape, offset, len, is_weight: true };
            let mut cpu = grads.clone();
            regularization_backward(&mut cpu, &params, &[t], &reg);
            let (offset, len, rate) = (offset as u32, len as u32, reg.rate as f32);
            let p = RegularizationBackwardParams { offset, len, kind: code, rate };
            let args =
                [Arg::Out(&f32_bytes(&grads)), Arg::In(&f32_bytes(&params)), Arg::Uniform(bytemuck::bytes_of(&p))];
            let out = run(Kernel::RegularizationBackward, &args, elementwise_grid(len as usize)).await;
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
        tensors.push(TensorInfo { name, shape, offset, len, is_weight: true });
    }
    let (count, n_tensors) = (total_len(&tensors), tensors.len());
    let mut grads = random(count, 7, 1.0);
    grads[count - 5..].fill(0.0);

    let gp = GradNormParams { n_tensors: n_tensors as u32, _pad: [0; 3] };
    let args = [
        Arg::Out(&vec![0u8; 4 * n_tensors]),
        Arg::In(&f32_bytes(&grads)),
        Arg::In(&ranges(&tensors)),
        Arg::Uniform(bytemuck::bytes_of(&gp)),
    ];
    let gpu_norms = to_f32(&run(Kernel::GradNorm, &args, [n_tensors as u32, 1, 1]).await[0]);
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
        let (count, n_tensors) = (count as u32, n_tensors as u32);
        let cp = ClipGradNormParams { count, n_tensors, max_norm, clip_enabled };
        let stats = vec![-7.0f32; 4 * (STEP as usize + 1)];
        let args = [
            Arg::Out(&f32_bytes(&grads)),
            Arg::Out(&f32_bytes(&stats)),
            Arg::Out(&flags_at_step(STEP, 0)),
            Arg::In(&f32_bytes(&norms)),
            Arg::Uniform(bytemuck::bytes_of(&cp)),
        ];
        let out = run(Kernel::ClipGradNorm, &args, elementwise_grid(count as usize)).await;
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

fn sgd_params(count: usize, spec: &OptimizerSpec, tensors: &[TensorInfo]) -> SgdStepParams {
    let (n_layers, layer_ends) = layer_ends(tensors);
    let OptimizerSpec::Sgd { momentum, dampening, nesterov, weight_decay, .. } = *spec else { panic!("not sgd") };
    SgdStepParams {
        count: count as u32,
        momentum: momentum as f32,
        one_minus_dampening: (1.0 - dampening) as f32,
        nesterov: u32::from(nesterov),
        weight_decay: weight_decay as f32,
        use_momentum: u32::from(momentum != 0.0),
        n_layers,
        _pad: 0,
        layer_ends,
    }
}

async fn run_sgd(p: &SgdStepParams, s: StepScalars, params: &[f32], buf: &[f32], grads: &[f32]) -> Vec<Vec<u8>> {
    let args = [
        Arg::Out(&f32_bytes(params)),
        Arg::Out(&f32_bytes(buf)),
        Arg::Out(&vec![0u8; 4 * params.len()]),
        Arg::Out(&flags_at_step(STEP, 0)),
        Arg::In(&f32_bytes(grads)),
        Arg::In(&scalars_buffer(s)),
        Arg::Uniform(bytemuck::bytes_of(p)),
    ];
    run(Kernel::SgdStep, &args, elementwise_grid(params.len())).await
}

/// SGD: only f32 mul and add, in the twin's order: assert_mul_add for the
/// parameters and the momentum buffer. Fused, each of the ≤ 4 multiply-adds
/// (g + λp, bμ + (1−τ)g, g + μb, p − lr·g) moves its result by ε times its
/// terms, all ≤ G = 3(|g| + |λp|) + |b_old| + 3|b_new| (μ, 1 − τ ≤ 1), and
/// passes earlier errors on with a factor ≤ 2: b within 2εG, the step
/// within 8ε·lr·G, p within that plus ε·|p_new|.
async fn sgd_step_matches_cpu() {
    let tensors = tensors();
    let count = total_len(&tensors);
    let configs = [
        (0.0, 0.0, false, 0.0),
        (0.9, 0.1, false, 0.0),
        (0.9, 0.0, true, 0.0),
        (0.8, 0.0, true, 1e-2),
        (0.0, 0.0, false, 1e-2),
    ];
    for (c, &(momentum, dampening, nesterov, weight_decay)) in configs.iter().enumerate() {
        let spec = OptimizerSpec::Sgd { lr: 0.05, momentum, dampening, nesterov, weight_decay };
        let mut params = random(count, 100 + c as u64, 1.0);
        let mut buf = vec![0.0f32; count];
        for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
            let grads = random(count, 200 + 10 * c as u64 + k as u64, 1.0);
            let s = StepScalars::new(&spec, spec.lr(), step);
            let (old_params, old_buf) = (params.clone(), buf.clone());
            sgd_step(&mut params, &mut buf, &grads, &s, momentum, dampening, nesterov, weight_decay);
            let p = sgd_params(count, &spec, &tensors);
            let out = run_sgd(&p, s, &old_params, &old_buf, &grads).await;
            let what = format!("{spec:?} step {step}");
            let gpu_params = to_f32(&out[0]);
            let wd = weight_decay as f32;
            let big_g =
                |i: usize| 3.0 * (grads[i].abs() + (wd * old_params[i]).abs()) + old_buf[i].abs() + 3.0 * buf[i].abs();
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
gpu_common::twin_test!(sgd_step_matches_cpu);

fn adam_hyper(spec: &OptimizerSpec) -> ([f64; 2], f64, f64, bool) {
    match *spec {
        OptimizerSpec::Adam { betas, eps, weight_decay, .. } => (betas, eps, weight_decay, false),
        OptimizerSpec::Adamw { betas, eps, weight_decay, .. } => (betas, eps, weight_decay, true),
        _ => panic!("not adam"),
    }
}

async fn run_adam(
    spec: &OptimizerSpec,
    s: StepScalars,
    n_layers: u32,
    layer_ends: LayerEnds,
    state: [&[f32]; 4],
) -> Vec<Vec<u8>> {
    let ([b1, b2], eps, weight_decay, decoupled) = adam_hyper(spec);
    let [params, m, v, grads] = state;
    let p = AdamStepParams {
        count: params.len() as u32,
        one_minus_beta1: (1.0 - b1) as f32,
        beta2: b2 as f32,
        one_minus_beta2: (1.0 - b2) as f32,
        eps: eps as f32,
        weight_decay: weight_decay as f32,
        decoupled: u32::from(decoupled),
        n_layers,
        layer_ends,
    };
    let args = [
        Arg::Out(&f32_bytes(params)),
        Arg::Out(&f32_bytes(m)),
        Arg::Out(&f32_bytes(v)),
        Arg::Out(&vec![0u8; 4 * params.len()]),
        Arg::Out(&flags_at_step(STEP, 0)),
        Arg::In(&f32_bytes(grads)),
        Arg::In(&scalars_buffer(s)),
        Arg::Uniform(bytemuck::bytes_of(&p)),
    ];
    run(Kernel::AdamStep, &args, elementwise_grid(params.len())).await
}

/// Adam and AdamW. m and v are f32 mul/add in the twin's order:
/// assert_mul_add, where Adam's g' = g + λp may be off by dg = ε(|λp| + |g'|),
/// m (one fusable product ≤ |m_old| + |g'|) by ε(|m_old| + |g'| + |m|) + dg,
/// v by ε(|v_old| + (1−β2)g'² + |v|) + 2(1−β2)|g'|·dg. The parameter goes
/// through a sqrt and two divisions (≤ 2.5 ulp each on Vulkan/WebGPU): the
/// step (−lr/bc1)·m/denom may be ~10 ulp off, which after adding to p is at
/// most 16ε·|step| + ε·|p_new|, plus ε·|p| for a fused p·decay + step, plus
/// the step's change under the GPU's m and v (0 where they are bit-equal).
async fn adam_step_matches_cpu() {
    let tensors = tensors();
    let count = total_len(&tensors);
    let (n_layers, ends) = layer_ends(&tensors);
    let specs = [
        OptimizerSpec::Adam { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 },
        // lerp's w ≥ ½ branch, and Adam's coupled decay
        OptimizerSpec::Adam { lr: 1e-2, betas: [0.3, 0.99], eps: 1e-8, weight_decay: 1e-2 },
        OptimizerSpec::Adamw { lr: 1e-2, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 1e-2 },
    ];
    for (c, spec) in specs.iter().enumerate() {
        let (betas, eps, wd, decoupled) = adam_hyper(spec);
        let mut params = random(count, 300 + c as u64, 1.0);
        let (mut m, mut v) = (vec![0.0f32; count], vec![0.0f32; count]);
        for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
            let grads = random(count, 400 + 10 * c as u64 + k as u64, 1.0);
            let s = StepScalars::new(spec, spec.lr(), step);
            let (old_params, old_m, old_v) = (params.clone(), m.clone(), v.clone());
            adam_step(&mut params, &mut m, &mut v, &grads, &s, betas, eps, wd, decoupled);
            let state = [&old_params[..], &old_m, &old_v, &grads];
            let out = run_adam(spec, s, n_layers, ends, state).await;
            let what = format!("{spec:?} step {step}");
            let gpu_params = to_f32(&out[0]);
            let decay = if decoupled { s.decay } else { 1.0 };
            let steps: Vec<f32> = (0..count).map(|i| params[i] - old_params[i] * decay).collect();
            let (gpu_m, gpu_v) = (to_f32(&out[1]), to_f32(&out[2]));
            let (nss, bc2s, eps) = (s.neg_step_size, s.bias_correction2_sqrt, eps as f32);
            let step_of = |m: f32, v: f32| nss * m / (v.sqrt() / bc2s + eps);
            let moved = |i: usize| (step_of(gpu_m[i], gpu_v[i]) - step_of(m[i], v[i])).abs();
            let tol = |i: usize| 16.0 * EPS * steps[i].abs() + EPS * (params[i].abs() + old_params[i].abs()) + moved(i);
            assert_close(&format!("{what} params"), &gpu_params, &params, tol);
            let wd_c = if decoupled { 0.0 } else { wd as f32 };
            let g1 = |i: usize| grads[i] + wd_c * old_params[i];
            let dg = |i: usize| EPS * ((wd_c * old_params[i]).abs() + g1(i).abs());
            let tol_m = |i: usize| EPS * (old_m[i].abs() + g1(i).abs() + m[i].abs()) + dg(i);
            assert_mul_add(&format!("{what} exp_avg"), &gpu_m, &m, tol_m);
            let omb2 = (1.0 - betas[1]) as f32;
            let tol_v = |i: usize| EPS * (old_v[i] + omb2 * g1(i) * g1(i) + v[i]) + 2.0 * omb2 * g1(i).abs() * dg(i);
            assert_mul_add(&format!("{what} exp_avg_sq"), &gpu_v, &v, tol_v);
            assert_updates(&what, &to_f32(&out[3]), &gpu_params, &old_params);
            assert_eq!(to_u32(&out[4])[0], u32::MAX, "{what}: no non-finite value");
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
    let OptimizerSpec::Lamb { betas: [b1, b2], eps, weight_decay, .. } = *spec else { panic!("not lamb") };
    let [params, m, v, grads] = state;
    let n = tensors.len();
    let p = LambParams {
        n_tensors: n as u32,
        beta1: b1 as f32,
        one_minus_beta1: (1.0 - b1) as f32,
        beta2: b2 as f32,
        one_minus_beta2: (1.0 - b2) as f32,
        eps: eps as f32,
        weight_decay: weight_decay as f32,
        _pad: 0,
    };
    let (scalars, ranges) = (scalars_buffer(s), ranges(tensors));
    let args = [
        Arg::Out(&f32_bytes(m)),
        Arg::Out(&f32_bytes(v)),
        Arg::Out(&vec![0u8; 8 * n]),
        Arg::Out(&flags_at_step(STEP, 0)),
        Arg::In(&f32_bytes(params)),
        Arg::In(&f32_bytes(grads)),
        Arg::In(&scalars),
        Arg::In(&ranges),
        Arg::Uniform(bytemuck::bytes_of(&p)),
    ];
    let moments = run(Kernel::LambMoments, &args, [n as u32, 1, 1]).await;
    let args = [
        Arg::Out(&f32_bytes(params)),
        Arg::Out(&vec![0u8; 4 * params.len()]),
        Arg::Out(&moments[3]),
        Arg::In(&moments[0]),
        Arg::In(&moments[1]),
        Arg::In(&moments[2]),
        Arg::In(&scalars),
        Arg::In(&ranges),
        Arg::Uniform(bytemuck::bytes_of(&p)),
    ];
    let out = run(Kernel::LambStep, &args, [n as u32, 1, 1]).await;
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
/// ε·(|p| + |p_new|). Tensor 1 is all zero: ‖p‖ = 0 gives ratio 1.
async fn lamb_step_matches_cpu() {
    let tensors = tensors();
    let count = total_len(&tensors);
    let zero = tensors[1].offset..tensors[1].offset + tensors[1].len;
    for (c, weight_decay) in [0.0, 1e-2].into_iter().enumerate() {
        let (betas, eps) = ([0.9, 0.999], 1e-6);
        let spec = OptimizerSpec::Lamb { lr: 1e-2, betas, eps, weight_decay };
        let mut params = random(count, 500 + c as u64, 1.0);
        params[zero.clone()].fill(0.0);
        let (mut m, mut v) = (vec![0.0f32; count], vec![0.0f32; count]);
        for (k, step) in [1u64, 2, 30].into_iter().enumerate() {
            let grads = random(count, 600 + 10 * c as u64 + k as u64, 1.0);
            let s = StepScalars::new(&spec, spec.lr(), step);
            let (old_params, old_m, old_v) = (params.clone(), m.clone(), v.clone());
            for t in &tensors {
                let r = t.offset..t.offset + t.len;
                let (p, g) = (&mut params[r.clone()], &grads[r.clone()]);
                lamb_step(p, &mut m[r.clone()], &mut v[r], g, &s, betas, eps, weight_decay);
            }
            let gpu = run_lamb(&spec, s, &tensors, [&old_params, &old_m, &old_v, &grads]).await;
            let what = format!("lamb wd {weight_decay} step {step}");
            let tol_m = |i: usize| EPS * (grads[i].abs() + old_m[i].abs() + m[i].abs());
            assert_mul_add(&format!("{what} exp_avg"), &gpu.m, &m, tol_m);
            let tol_v = |i: usize| EPS * (grads[i] * grads[i] + old_v[i] + v[i]);
            assert_mul_add(&format!("{what} exp_avg_sq"), &gpu.v, &v, tol_v);
            let (bc1, bc2, wd) = (s.bias_correction1, s.bias_correction2, weight_decay as f32);
            let direction = |m: f32, v: f32, p: f32| (m / bc1) / ((v / bc2).sqrt() + 1e-6) + wd * p;
            let r_of = |i: usize| direction(m[i], v[i], old_params[i]);
            let dr: Vec<f32> = (0..count)
                .map(|i| {
                    let moved = direction(gpu.m[i], gpu.v[i], old_params[i]) - r_of(i);
                    moved.abs() + EPS * (wd * old_params[i]).abs()
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
    let (s, p) = (StepScalars::new(&spec, spec.lr(), 5), sgd_params(count, &spec, &tensors));
    // Gradients of 100 from layer `first` on: 1e38·100 overflows f32 there only.
    for first in [1usize, 2] {
        let mut grads = vec![0.0f32; count];
        grads[tensors[2 * first].offset..].fill(100.0);
        let out = run_sgd(&p, s, &params, &[0.0], &grads).await;
        assert_eq!(to_u32(&out[3])[0], optimizer_code(first as u32), "sgd from layer {first}");
    }

    // Adam: −lr/bc1 = −1e39 is −inf in f32; every parameter turns non-finite.
    let spec = OptimizerSpec::Adam { lr: 1e38, betas: [0.9, 0.999], eps: 1e-8, weight_decay: 0.0 };
    let (n_layers, ends) = layer_ends(&tensors);
    let (zeros, grads) = (vec![0.0f32; count], random(count, 2, 1.0));
    let state = [&params[..], &zeros, &zeros, &grads];
    let out = run_adam(&spec, StepScalars::new(&spec, spec.lr(), 1), n_layers, ends, state).await;
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
