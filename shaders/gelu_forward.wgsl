// gelu_forward: the exact GELU, y = x·Φ(x) = 0.5·x·(1 + erf(x/√2)) (PyTorch's
// nn.GELU(); CPU twin: model::gpt::ops::gelu_forward).
// WGSL has no erf: erf_as below is Abramowitz & Stegun 7.1.26, whose own error
// is at most 1.5e-7 over the reals; evaluated in f32 the kernel stays within
// 3e-7·(1 + |x|) of the CPU twin (gpu_gpt.rs states and tests the bound).
//
// Bindings (group 0):
//   0 out (n)     read_write
//   1 inp (n)     read
//   2 p   Params  uniform
// Dispatch: elementwise_grid(n); workgroup 256, one element per invocation.

struct Params {
    count: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> inp: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

// erf(x) = 1 − (a1·t + a2·t² + a3·t³ + a4·t⁴ + a5·t⁵)·e^(−x²), t = 1/(1 + 0.3275911·x),
// for x ≥ 0; odd.
fn erf_as(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return sign(x) * (1.0 - poly * exp(-a * a));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= p.count) {
        return;
    }
    let x = inp[i];
    out[i] = 0.5 * x * (1.0 + erf_as(x * 0.70710678118654752));
}
