// conv2d_backward_input: the gradient with respect to the layer below's pre-activations,
// dx = convᵀ(dz, W) ⊙ f'(z_in), overwritten (CPU twins: the dx part of model::conv2d_backward,
// then model::activation_backward of the layer below). For each input (b, c, y, x):
//
// dx[b, c, y, x] = Σ_(ki, kj) (Σ_f dz[b, f, oy, ox]·W[f, c, ki, kj]) · f'(z_in[b, c, y, x]),
//
// over the (ki, kj) in row-major order whose output (oy, ox) = ((y + pad − ki)/S, (x + pad − kj)/S)
// is whole and inside, each inner sum over f from 0: the twin's order (its ∂cols = Wᵀ·dz summed
// over f, scattered back row (c, ki, kj) by row onto zeros). With the linear code f' = 1.
//
// Bindings (group 0):
//   0 dx     (B, C, H, W)    read_write   overwritten: ∂L/∂z of the layer below
//   1 dz     (B, F, OH, OW)  read         ∂L/∂z of this layer
//   2 params (P)             read         flat parameters; W (F, C, K, K) at weight_offset
//   3 z_in   (B, C, H, W)    read         the layer below's pre-activations (its z)
//   4 a_in   (B, C, H, W)    read         the layer below's outputs, this layer's x
//   5 p      Params          uniform
// Dispatch: `launch::grid_of_64(B·C·H·W)`; an invocation per input, gathering (no two
// invocations write one value, so no atomics and a fixed order).

struct Params {
    batch: u32,
    c_in: u32,
    h: u32,
    w: u32,
    filters: u32,
    kernel: u32,
    stride: u32,
    padding: u32,
    out_h: u32,
    out_w: u32,
    weight_offset: u32,
    bias_offset: u32,
    activation: u32, // forward: this layer's; input gradient: the layer below's (dense_forward's codes)
    layer: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> dx: array<f32>;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> params: array<f32>;
@group(0) @binding(3) var<storage, read> z_in: array<f32>;
@group(0) @binding(4) var<storage, read> a_in: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

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
    let plane = p.h * p.w;
    if (i >= p.batch * p.c_in * plane) {
        return;
    }
    let xx = i % p.w;
    let y = (i / p.w) % p.h;
    let c = (i / plane) % p.c_in;
    let b = i / (p.c_in * plane);
    let k = p.kernel;
    let positions = p.out_h * p.out_w;
    var total = 0.0;
    for (var ki = 0u; ki < k; ki++) {
        let ny = i32(y + p.padding) - i32(ki);
        if (ny < 0 || u32(ny) % p.stride != 0u || u32(ny) / p.stride >= p.out_h) {
            continue;
        }
        let oy = u32(ny) / p.stride;
        for (var kj = 0u; kj < k; kj++) {
            let nx = i32(xx + p.padding) - i32(kj);
            if (nx < 0 || u32(nx) % p.stride != 0u || u32(nx) / p.stride >= p.out_w) {
                continue;
            }
            let at = oy * p.out_w + u32(nx) / p.stride;
            var s = 0.0;
            for (var f = 0u; f < p.filters; f++) {
                let wv = params[p.weight_offset + ((f * p.c_in + c) * k + ki) * k + kj];
                s = fma(wv, dz[(b * p.filters + f) * positions + at], s);
            }
            total += s;
        }
    }
    dx[i] = total * activation_derivative(z_in[i], a_in[i], p.activation);
}
