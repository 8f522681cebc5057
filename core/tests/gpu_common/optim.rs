//! Helpers of the optimizer-kernel twin tests (`gpu_optim.rs`,
//! `gpu_optim_adaptive.rs`): tensors of the awkward sizes, step scalars
//! with poisoned neighbours, and the comparisons with their tolerances.

use stepscope_core::experiment::OptimizerSpec;
use stepscope_core::gpu::harness::{f32_bytes, Arg};
use stepscope_core::gpu::launch::{self, Launch};
use stepscope_core::gpu::params::*;
use stepscope_core::model::TensorInfo;
use stepscope_core::optim::StepScalars;

use super::{ctx, flags_at_step, run_launch, sum_tolerance, SIZES};

pub const EPS: f32 = f32::EPSILON;
/// The step index set in flags[1]: the kernels must read scalars[STEP].
pub const STEP: u32 = 3;

/// Tensors of every awkward size end to end, as (weight, bias) pairs: 3 layers.
pub fn tensors() -> Vec<TensorInfo> {
    let mut tensors: Vec<TensorInfo> = Vec::new();
    for (i, &len) in SIZES.iter().enumerate() {
        let offset = tensors.last().map_or(0, |t| t.offset + t.len);
        let (name, shape, is_weight) = (format!("t{i}"), vec![len], i % 2 == 0);
        tensors.push(TensorInfo { name, shape, offset, len, is_weight, decays: true });
    }
    tensors
}

/// The same tensors in nanoGPT's two groups: the weights decay, the
/// biases do not (the kernels look each parameter's group up in the table).
pub fn grouped_tensors() -> Vec<TensorInfo> {
    tensors().into_iter().map(|t| TensorInfo { decays: t.is_weight, ..t }).collect()
}

/// Both sets, named for the assertions.
pub fn tensor_sets() -> [(&'static str, Vec<TensorInfo>); 2] {
    [("one group", tensors()), ("two groups", grouped_tensors())]
}

/// Whether each element of the flat buffer decays.
pub fn decays_at(tensors: &[TensorInfo]) -> Vec<bool> {
    tensors.iter().flat_map(|t| std::iter::repeat_n(t.decays, t.len)).collect()
}

pub fn total_len(tensors: &[TensorInfo]) -> usize {
    tensors.iter().map(|t| t.len).sum()
}

/// The tensor table, as the engine uploads it.
pub fn ranges(tensors: &[TensorInfo]) -> Vec<u8> {
    let r: Vec<TensorRange> = tensors.iter().map(TensorRange::of).collect();
    bytemuck::cast_slice(&r).to_vec()
}

/// Layer l = tensors 2l and 2l + 1; its end is the end of its bias.
pub fn layer_ends(tensors: &[TensorInfo]) -> (u32, LayerEnds) {
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
pub fn scalars_buffer(s: StepScalars) -> Vec<u8> {
    let mut poison: StepScalars = bytemuck::cast([f32::NAN.to_bits(); 8]);
    (poison.first_step, poison._pad) = (1 - s.first_step, 0);
    let mut v = vec![poison; STEP as usize + 1];
    v[STEP as usize] = s;
    bytemuck::cast_slice(&v).to_vec()
}

pub fn assert_bits(what: &str, gpu: &[f32], cpu: &[f32]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: length");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert_eq!(g.to_bits(), c.to_bits(), "{what}[{i}]: gpu {g} vs cpu {c}");
    }
}

pub fn assert_close(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: length");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!((g - c).abs() <= tol(i), "{what}[{i}]: gpu {g} vs cpu {c} (tolerance {})", tol(i));
    }
}

/// Whether the driver may fuse a·b + c into an fma: all but lavapipe, which
/// does not (checked: the kernels match their twins bit for bit there).
/// In the browser the driver is not named (SwiftShader reports ""): bounds.
pub fn fuses() -> bool {
    ctx().adapter_info.driver != "llvmpipe"
}

/// Bit equality where the driver does not fuse multiply-adds, else `tol`.
pub fn assert_mul_add(what: &str, gpu: &[f32], cpu: &[f32], tol: impl Fn(usize) -> f32) {
    if fuses() {
        assert_close(what, gpu, cpu, tol);
    } else {
        assert_bits(what, gpu, cpu);
    }
}

pub fn differences(new: &[f32], old: &[f32]) -> Vec<f32> {
    new.iter().zip(old).map(|(n, o)| n - o).collect()
}

/// updates = p_new − p_old, up to the rounding of p_new: a compiler may fold
/// (p + x) − p into x (Mesa's NIR does), so allow ε·(|p_new| + |p_old|).
pub fn assert_updates(what: &str, updates: &[f32], new: &[f32], old: &[f32]) {
    let tol = |i: usize| EPS * (new[i].abs() + old[i].abs());
    assert_close(&format!("{what} updates"), updates, &differences(new, old), tol);
}

/// clip.rs's per-tensor norm: the sum of squares in f64, then f32.
pub fn tensor_norm(g: &[f32]) -> f32 {
    g.iter().map(|&v| v as f64 * v as f64).sum::<f64>().sqrt() as f32
}

/// Bound on |GPU − CPU| for an f32 norm √S of n terms: the GPU's f32 sum (any
/// order) is within sum_tolerance(n, S) of the exact S (the CPU's f64 sum is
/// exact to ~n·2⁻⁵³), so the square root moves by at most that over 2√S; plus
/// 2 ulp for the two final roundings (the GPU's sqrt may be ~1 ulp off).
pub fn norm_tolerance(n: usize, norm: f32, term_rel_err: f32) -> f32 {
    if norm == 0.0 {
        return 0.0;
    }
    let s = norm * norm;
    sum_tolerance(n, s) / (2.0 * norm) + (2.0 + term_rel_err) * EPS * norm
}

/// The plan's SGD launch for `tensors` (`gpu::launch::sgd_step`).
pub fn sgd_launch(count: usize, spec: &OptimizerSpec, tensors: &[TensorInfo]) -> Launch<SgdStepParams, 7> {
    let (n_layers, layer_ends) = layer_ends(tensors);
    launch::sgd_step(spec, count, n_layers as usize, layer_ends).expect("an SGD spec").decay_groups(tensors)
}

pub async fn run_sgd(
    l: &Launch<SgdStepParams, 7>,
    s: StepScalars,
    tensors: &[TensorInfo],
    params: &[f32],
    buf: &[f32],
    grads: &[f32],
) -> Vec<Vec<u8>> {
    let (params_bytes, buf, updates) = (f32_bytes(params), f32_bytes(buf), vec![0u8; 4 * params.len()]);
    let (flags, grads, scalars) = (flags_at_step(STEP, 0), f32_bytes(grads), scalars_buffer(s));
    let table = ranges(tensors);
    let args = [
        Arg::Out(&params_bytes),
        Arg::Out(&buf),
        Arg::Out(&updates),
        Arg::Out(&flags),
        Arg::In(&grads),
        Arg::In(&scalars),
        Arg::In(&table),
    ];
    run_launch(l, args).await
}
