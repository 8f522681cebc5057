// max_pool2d_backward: dx = the gradient of each window's output sent to the input it took,
// times the layer below's f'(z_in), overwritten (CPU twins: model::max_pool2d_backward, then
// model::activation_backward of the layer below). For each input (b, c, y, x), the outputs whose
// window holds it, in order ((oy, ox) row-major), each adding its dout when the window's
// maximum was this input, onto 0: the twin's order (it adds the outputs in order, at the index
// its forward kept). The index is found again here from the pool's inputs (a_in, unchanged since
// forward) with forward's compares, so no index buffer is kept.
//
// Bindings (group 0):
//   0 dx    (B, C, H, W)    read_write   overwritten: ∂L/∂z of the layer below
//   1 dout  (B, C, OH, OW)  read         ∂L/∂z of the pool
//   2 z_in  (B, C, H, W)    read         the layer below's pre-activations
//   3 a_in  (B, C, H, W)    read         the layer below's outputs, the pool's inputs
//   4 p     Params          uniform
// Dispatch: `launch::grid_of_64(B·C·H·W)`; an invocation per input, gathering.

struct Params {
    batch: u32,
    c: u32,
    h: u32,
    w: u32,
    kernel: u32,
    stride: u32,
    out_h: u32,
    out_w: u32,
    activation: u32, // forward: this layer's; backward: the layer below's (dense_forward's codes)
    layer: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> dx: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> z_in: array<f32>;
@group(0) @binding(3) var<storage, read> a_in: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}
fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}
fn activation_derivative(zv: f32, av: f32, kind: u32) -> f32 {
    switch kind {
        case 1u: { return select(0.0, 1.0, zv > 0.0); }
        case 2u: { return select(LEAKY_SLOPE, 1.0, zv > 0.0); }
        case 3u: { return 1.0 - av * av; }
        case 4u: { return av * (1.0 - av); }
        case 5u: {
            let t = tanh_stable(GELU_K * (zv + GELU_C * zv * zv * zv));
            return 0.5 * (1.0 + t) + 0.5 * zv * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * zv * zv);
        }
        case 6u: {
            let s = sigmoid(zv);
            return s * (1.0 + zv * (1.0 - s));
        }
        default: { return 1.0; }
    }
}

// The index in a_in of the value window `first` takes (max_pool2d_forward's compares).
fn argmax(first: u32) -> u32 {
    // The twin starts from −∞; starting from the window's first value takes
    // the same value and index (−∞ itself is not a WGSL constant Tint takes).
    var best = a_in[first];
    var at = first;
    for (var ki = 0u; ki < p.kernel; ki++) {
        for (var kj = 0u; kj < p.kernel; kj++) {
            let idx = first + ki * p.w + kj;
            let v = a_in[idx];
            if (v > best || is_nan(v)) {
                best = v;
                at = idx;
            }
        }
    }
    return at;
}

// The invocation's item: workgroups of 64 in a 2-D grid past 65535 (`launch::grid_of_64`).
fn item(lid: vec3<u32>, wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return (wid.y * groups.x + wid.x) * 64u + lid.x;
}

@compute @workgroup_size(64)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = item(lid, wid, groups);
    let plane_len = p.h * p.w;
    if (i >= p.batch * p.c * plane_len) {
        return;
    }
    let xx = i % p.w;
    let y = (i / p.w) % p.h;
    let plane = i / plane_len;
    // Windows oy·S ≤ y < oy·S + K, inside 0..OH (and the same for x).
    let oy_lo = select(0u, (y + 1u - p.kernel + p.stride - 1u) / p.stride, y + 1u > p.kernel);
    let oy_hi = min(y / p.stride + 1u, p.out_h);
    let ox_lo = select(0u, (xx + 1u - p.kernel + p.stride - 1u) / p.stride, xx + 1u > p.kernel);
    let ox_hi = min(xx / p.stride + 1u, p.out_w);
    var sum = 0.0;
    for (var oy = oy_lo; oy < oy_hi; oy++) {
        for (var ox = ox_lo; ox < ox_hi; ox++) {
            let first = plane * plane_len + oy * p.stride * p.w + ox * p.stride;
            if (argmax(first) == i) {
                sum += dout[(plane * p.out_h + oy) * p.out_w + ox];
            }
        }
    }
    dx[i] = sum * activation_derivative(z_in[i], a_in[i], p.activation);
}
