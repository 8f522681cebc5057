//! gather_rows, advance, tensor_stats and fma_peak against their CPU twins.

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::{flags_at_step, random, run_launch, sum_tolerance, BATCHES, SIZES};
use stepscope_core::data::Table;
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::launch::{self, Counter};
use stepscope_core::gpu::params::*;
use stepscope_core::rng::Rng;
use stepscope_core::stats::{from_gpu, tensor_stats, TensorStats};

/// gather_rows against Table::copy_row over the selected rows. A copy: the
/// result must be bit-identical (NaN payloads included), and nothing past
/// B·I or B·T may be written.
async fn gather_rows_matches_copy_row() {
    const N: usize = 70;
    const MICRO: usize = 3; // micro-batches in the submit
    let mut case = 0u64;
    for &inputs in &SIZES {
        for &batch in &BATCHES {
            case += 1;
            let target_width = [1, 2, 7][case as usize % 3];
            let mut table = Table {
                inputs: random(N * inputs, case, 2.0),
                targets: random(N * target_width, case + 100, 2.0),
                input_width: inputs,
                target_width,
            };
            table.inputs[N * inputs / 2] = f32::from_bits(0x7fc0_1234); // NaN with a payload
            let mut rng = Rng::new(case, 5);
            let rows: Vec<u32> = (0..MICRO * batch).map(|_| rng.below(N as u64) as u32).collect();
            let m = case as usize % MICRO;
            let (mut x_cpu, mut t_cpu) = (Vec::new(), Vec::new());
            for &row in &rows[m * batch..(m + 1) * batch] {
                table.copy_row(row as usize, &mut x_cpu, &mut t_cpu);
            }
            // One sentinel float past the end of each output.
            let x0 = vec![0xAAu8; 4 * (batch * inputs + 1)];
            let t0 = vec![0xAAu8; 4 * (batch * target_width + 1)];
            let (flags, ti, tt) = (flags_at_step(1, m as u32), f32_bytes(&table.inputs), f32_bytes(&table.targets));
            let l = launch::gather_rows(batch, inputs, target_width);
            let args = [
                Arg::Out(&x0),
                Arg::Out(&t0),
                Arg::Out(&flags),
                Arg::In(&ti),
                Arg::In(&tt),
                Arg::In(bytemuck::cast_slice(&rows)),
            ];
            let out = run_launch(&l, args).await;
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            let (x_gpu, t_gpu) = (to_u32(&out[0]), to_u32(&out[1]));
            let ctx = format!("I={inputs} T={target_width} B={batch} m={m}");
            assert_eq!(x_gpu[..batch * inputs], bits(&x_cpu)[..], "x, {ctx}");
            assert_eq!(t_gpu[..batch * target_width], bits(&t_cpu)[..], "t, {ctx}");
            assert_eq!(
                (x_gpu[batch * inputs], t_gpu[batch * target_width]),
                (0xAAAA_AAAA, 0xAAAA_AAAA),
                "wrote past the end, {ctx}"
            );
            assert_eq!(to_u32(&out[2]), [u32::MAX, 1, m as u32, 0], "flags unchanged, {ctx}");
        }
    }
}
gpu_common::twin_test!(gather_rows_matches_copy_row);

/// advance: each dispatch adds exactly 1 to the chosen counter and leaves
/// the other words (the non-finite code in particular) alone.
async fn advance_increments_one_counter() {
    async fn advance(flags: &[u32], counter: Counter) -> Vec<u32> {
        to_u32(&run_launch(&launch::advance(counter), [Arg::Out(bytemuck::cast_slice(flags))]).await[0])
    }
    let mut f = vec![0x0001_0302, 5, 9, 0];
    f = advance(&f, Counter::Step).await;
    assert_eq!(f, [0x0001_0302, 6, 9, 0]);
    f = advance(&f, Counter::Step).await;
    assert_eq!(f, [0x0001_0302, 7, 9, 0]);
    f = advance(&f, Counter::MicroBatch).await;
    assert_eq!(f, [0x0001_0302, 7, 10, 0]);
    f = advance(&f, Counter::MicroBatch).await;
    assert_eq!(f, [0x0001_0302, 7, 11, 0]);
}
gpu_common::twin_test!(advance_increments_one_counter);

async fn gpu_tensor_stats(src: &[f32], offset: usize, len: usize) -> TensorStats {
    let out_offset = 3;
    let out0 = vec![-7.0f32; out_offset + TENSOR_STATS_STRIDE + 2];
    let (out0, src) = (f32_bytes(&out0), f32_bytes(src));
    let l = launch::tensor_stats(offset, len, out_offset);
    let out = to_f32(&run_launch(&l, [Arg::Out(&out0), Arg::In(&src)]).await[0]);
    let record = &out[out_offset..out_offset + TENSOR_STATS_STRIDE];
    assert_eq!(&record[5..8], &[0.0; 3], "unused words are zero");
    assert!(
        out[..out_offset].iter().chain(&out[out_offset + TENSOR_STATS_STRIDE..]).all(|&v| v == -7.0),
        "wrote outside its record"
    );
    from_gpu(record)
}

/// Compares GPU tensor_stats with stats::tensor_stats on `values`.
///
/// - non-finite count, min, max: exact (counting, and min/max select values).
/// - mean: the GPU's f32 sum of the n finite values is within γ_n·Σ|v|
///   (sum_tolerance, any order) of the exact sum; the CPU's f64 mean is
///   exact to f32 rounding; plus 4 ulps for the division.
/// - std: the GPU forms var = sumsq/n − mean² in f32. Its error is at most
///   the sumsq error (sum_tolerance(n, Σv²)/n), plus 2|mean|·δmean + δmean²
///   from the mean, plus 4 ulps of sumsq/n for the divisions and
///   subtraction. With δvar that bound, |std_gpu − std_cpu| ≤
///   min(√δvar, δvar/(std_gpu + std_cpu)), plus 8 ulps of std for the two
///   square roots (WGSL's sqrt may be a few ulps off).
/// - histogram: the GPU computes the same f32 expression, but WGSL's f32
///   division may be 2.5 ulps off where Rust's is correctly rounded, so a
///   value whose scaled position t = (v − min)/(max − min)·32 lies within
///   1e-5·t of an interior bin edge k may fall on either side of it (3 ulps
///   of t is 3.6e-7·t; 1e-5 leaves a wide margin yet is rare enough in
///   random data that counts are almost always compared exactly). So the
///   counts must agree except for net moves across edges: the running sum
///   of (gpu − cpu) up to edge k is bounded by the ambiguous values at k.
async fn check_stats(values: &[f32], what: &str) {
    let offset = 5;
    let mut src = vec![f32::NAN; offset]; // before the region: must not be read
    src.extend_from_slice(values);
    src.push(f32::INFINITY); // after the region: must not be read
    let gpu = gpu_tensor_stats(&src, offset, values.len()).await;
    let cpu = tensor_stats(values);
    assert_eq!(gpu.non_finite, cpu.non_finite, "{what}: non-finite count");
    assert_eq!((gpu.min, gpu.max), (cpu.min, cpu.max), "{what}: min, max");
    let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let n = finite.len();
    let eps = f32::EPSILON;
    let abs_sum: f32 = finite.iter().map(|v| v.abs()).sum();
    let sumsq: f32 = finite.iter().map(|v| v * v).sum();
    let nf = n.max(1) as f32;
    let tol_mean = sum_tolerance(n, abs_sum) / nf + 4.0 * eps * cpu.mean.abs();
    assert!((gpu.mean - cpu.mean).abs() <= tol_mean, "{what}: mean {} vs {} (tol {tol_mean})", gpu.mean, cpu.mean);
    let tol_var =
        sum_tolerance(n, sumsq) / nf + 2.0 * cpu.mean.abs() * tol_mean + tol_mean * tol_mean + 4.0 * eps * sumsq / nf;
    let tol_std = tol_var.sqrt().min(tol_var / (gpu.std + cpu.std)) + 8.0 * eps * cpu.std;
    assert!((gpu.std - cpu.std).abs() <= tol_std, "{what}: std {} vs {} (tol {tol_std})", gpu.std, cpu.std);
    let mut ambiguous = [0i64; HISTOGRAM_BINS + 1]; // values near interior edge k
    if cpu.max > cpu.min {
        for &v in &finite {
            let t = (v - cpu.min) / (cpu.max - cpu.min) * HISTOGRAM_BINS as f32;
            let k = t.round();
            if k >= 1.0 && k < HISTOGRAM_BINS as f32 && (t - k).abs() <= 1e-5 * t {
                ambiguous[k as usize] += 1;
            }
        }
    }
    let mut moved = 0i64; // net values the GPU put below edge k that the CPU put above
    for k in 0..HISTOGRAM_BINS {
        moved += i64::from(gpu.histogram[k]) - i64::from(cpu.histogram[k]);
        assert!(moved.abs() <= ambiguous[k + 1], "{what}: histogram {:?} vs {:?}", gpu.histogram, cpu.histogram);
    }
    assert_eq!(moved, 0, "{what}: histogram totals");
}

async fn tensor_stats_matches_cpu() {
    for (i, &len) in [0, 1, 7, 63, 64, 65, 257, 10_000].iter().enumerate() {
        let scale = [1.0, 0.01, 3.0, 100.0][i % 4];
        let mut values = random(len, 40 + i as u64, scale);
        // A shifted case: mean far from 0 relative to the spread.
        if len == 257 {
            values.iter_mut().for_each(|v| *v += 5.0);
        }
        check_stats(&values, &format!("len {len}")).await;
    }
    let mut values = random(10_000, 77, 1.0);
    for (k, bad) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, f32::NAN].iter().enumerate() {
        values[k * 2_501 + 3] = *bad;
    }
    check_stats(&values, "10000 with NaN/Inf").await;
    check_stats(&[0.75; 65], "constant").await;
    check_stats(&[f32::NAN, f32::INFINITY, f32::NAN], "all non-finite").await;
}
gpu_common::twin_test!(tensor_stats_matches_cpu);

async fn tensor_stats_records_counts_exactly() {
    // Evenly spread values 0..=319 → bins of exactly 10 (bin b holds
    // 10b..10b+9; 319 is the max and is clamped into bin 31), and the
    // non-finite ones counted apart.
    let mut values: Vec<f32> = (0..320).map(|v| v as f32).collect();
    values.extend([f32::NAN, f32::NEG_INFINITY]);
    let gpu = gpu_tensor_stats(&values, 0, values.len()).await;
    assert_eq!(gpu.histogram, [10; HISTOGRAM_BINS]);
    assert_eq!((gpu.min, gpu.max, gpu.non_finite), (0.0, 319.0, 2));
    assert_eq!(gpu.mean, 159.5);
}
gpu_common::twin_test!(tensor_stats_records_counts_exactly);

/// The fma_peak recurrence on the CPU (see the kernel's header).
fn fma_peak_cpu(g: usize, iterations: u32) -> f32 {
    let base = (g & 15) as f32 * 0.0625;
    let mut acc: [f32; 8] = std::array::from_fn(|k| (k + 1) as f32 * 0.125 + base);
    for _ in 0..iterations {
        for a in &mut acc {
            *a = a.mul_add(0.99, 0.01);
        }
    }
    acc.iter().fold(0.0, |s, &a| s + a)
}

/// fma_peak: with 0 iterations the sums of exactly representable starts
/// must agree bitwise. Otherwise WGSL lets `fma` be evaluated unfused (two
/// roundings), so each step may differ from mul_add by 1 ulp of a value in
/// (0, 2] (2.4e-7); the recurrence contracts by 0.99 per step, so an
/// accumulator's error stays below 2.4e-7/(1 − 0.99) = 2.4e-5, and the sum
/// of 8 below 8·2.4e-5 plus 8 ulps of a sum ≤ 16 for the additions: 3e-4.
async fn fma_peak_matches_cpu() {
    let groups = 3;
    for iterations in [0u32, 1, 10, 1000] {
        let l = launch::fma_peak(groups as u32, iterations);
        let out = to_f32(&run_launch(&l, [Arg::Out(&vec![0u8; 4 * 256 * groups])]).await[0]);
        for (g, &v) in out.iter().enumerate() {
            let want = fma_peak_cpu(g, iterations);
            assert!(v.is_finite(), "out[{g}] = {v}");
            let tol = if iterations == 0 { 0.0 } else { 3e-4 };
            assert!((v - want).abs() <= tol, "iterations {iterations}: out[{g}] {v} vs {want}");
        }
    }
}
gpu_common::twin_test!(fma_peak_matches_cpu);
