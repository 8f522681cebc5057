// fma_peak: a benchmark probe of the adapter's f32 fused multiply-add throughput
// (CPU twin: the same recurrence with f32::mul_add, in tests/gpu_misc.rs).
// Each invocation g keeps 8 independent accumulators in registers, starting at
// acc_k = (k + 1)·0.125 + (g mod 16)·0.0625, and `iterations` times updates each
// with acc_k = fma(acc_k, 0.99, 0.01): a contraction towards 1, so every value
// stays in (0, 2]. It then writes ((acc_0 + acc_1) + … + acc_7) to out[g], so
// nothing can be optimized away. FLOPs = invocations · iterations · 8 · 2.
//
// Bindings (group 0):
//   0 out  (N·256)  read_write   one sum per invocation
//   1 p    Params   uniform
// Dispatch: (N, 1, 1), workgroup 256; global index g = wid.x · 256 + lid.x.

struct Params {
    iterations: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<uniform> p: Params;

const M: f32 = 0.99;
const C: f32 = 0.01;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.x;
    let base = f32(g & 15u) * 0.0625;
    var a0 = 0.125 + base;
    var a1 = 0.25 + base;
    var a2 = 0.375 + base;
    var a3 = 0.5 + base;
    var a4 = 0.625 + base;
    var a5 = 0.75 + base;
    var a6 = 0.875 + base;
    var a7 = 1.0 + base;
    for (var i = 0u; i < p.iterations; i++) {
        a0 = fma(a0, M, C);
        a1 = fma(a1, M, C);
        a2 = fma(a2, M, C);
        a3 = fma(a3, M, C);
        a4 = fma(a4, M, C);
        a5 = fma(a5, M, C);
        a6 = fma(a6, M, C);
        a7 = fma(a7, M, C);
    }
    if (g < arrayLength(&out)) {
        out[g] = ((((((a0 + a1) + a2) + a3) + a4) + a5) + a6) + a7;
    }
}
