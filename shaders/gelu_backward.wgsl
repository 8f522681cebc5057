// gelu_backward: ∂L/∂x += (Φ(x) + x·φ(x))·∂L/∂y, φ(x) = e^(−x²/2)/√(2π), the
// derivative of the exact GELU (CPU twin: model::gpt::ops::gelu_backward).
// Φ uses erf_as (Abramowitz & Stegun 7.1.26, as gelu_forward); within
// 3e-7·(1 + |x|)·|∂L/∂y| plus an ulp of the sum of the CPU twin (gpu_gpt.rs).
//
// Bindings (group 0):
//   0 dinp (n)     read_write   accumulated into (accumulate = 1) or overwritten (0:
//                               the twin adding onto zeros)
//   1 inp  (n)     read         the forward's input
//   2 dout (n)     read
//   3 p    Params  uniform
// Dispatch: elementwise_grid(n); workgroup 256, one element per invocation.

struct Params {
    count: u32,
    accumulate: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> dinp: array<f32>;
@group(0) @binding(1) var<storage, read> inp: array<f32>;
@group(0) @binding(2) var<storage, read> dout: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

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
    let cdf = 0.5 * (1.0 + erf_as(x * 0.70710678118654752));
    let pdf = exp(-0.5 * x * x) * 0.3989422804014327;
    var before = 0.0;
    if (p.accumulate != 0u) {
        before = dinp[i];
    }
    dinp[i] = before + (cdf + x * pdf) * dout[i];
}
