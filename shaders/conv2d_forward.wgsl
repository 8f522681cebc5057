// conv2d_forward: z = conv2d(x, W) + b and a = act(z), fused (CPU twins: model::conv2d_forward
// followed by model::activation_forward), PyTorch's nn.Conv2d: a square kernel, a stride, zero
// padding. Images are rows in (C, H, W) order. Records the first non-finite pre-activation or
// output in `flags`.
//
// z[b, f, oy, ox] = b[f] + Σ_(c, ki, kj) W[f, c, ki, kj]·x[b, c, oy·S + ki − pad, ox·S + kj − pad],
// summed from the bias in (c, ki, kj) row-major order, as the twin's (its padding's zero terms
// are skipped here: adding w·0 changes no sum but the sign of a zero).
//
// Bindings (group 0):
//   0 z      (B, F, OH, OW)  read_write   pre-activations, kept for backward
//   1 a      (B, F, OH, OW)  read_write   outputs
//   2 x      (B, C, H, W)    read         inputs (the batch, or the previous layer's a)
//   3 params (P)             read         flat parameters; W (F, C, K, K) at weight_offset, b (F) at bias_offset
//   4 flags  (4)             read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   5 p      Params          uniform
// Dispatch: `launch::grid_of_64(B·F·OH·OW)`; an invocation per output (direct: the variant for
// small channel counts, where a patch of C·K·K is short). Neighbouring invocations share a filter
// (its weights are one broadcast load) and read neighbouring inputs.

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

@group(0) @binding(0) var<storage, read_write> z: array<f32>;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<f32>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(5) var<uniform> p: Params;

const PHASE_FORWARD: u32 = 1u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}
fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}
fn activate(v: f32, kind: u32) -> f32 {
    switch kind {
        case 1u: { return max(v, 0.0); }
        case 2u: { return select(0.01 * v, v, v > 0.0); }
        case 3u: { return tanh_stable(v); }
        case 4u: { return sigmoid(v); }
        // ½ v (1 + tanh(√(2/π) (v + 0.044715 v³)))
        case 5u: { return 0.5 * v * (1.0 + tanh_stable(0.7978846 * (v + 0.044715 * v * v * v))); }
        case 6u: { return v * sigmoid(v); }
        default: { return v; }
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
    let positions = p.out_h * p.out_w;
    if (i >= p.batch * p.filters * positions) {
        return;
    }
    let ox = i % p.out_w;
    let oy = (i / p.out_w) % p.out_h;
    let f = (i / positions) % p.filters;
    let b = i / (p.filters * positions);
    let y0 = i32(oy * p.stride) - i32(p.padding);
    let x0 = i32(ox * p.stride) - i32(p.padding);
    let k = p.kernel;
    var sum = params[p.bias_offset + f];
    for (var c = 0u; c < p.c_in; c++) {
        let plane = (b * p.c_in + c) * p.h * p.w;
        let wrow = p.weight_offset + (f * p.c_in + c) * k * k;
        for (var ki = 0u; ki < k; ki++) {
            let y = y0 + i32(ki);
            if (y < 0 || y >= i32(p.h)) {
                continue;
            }
            for (var kj = 0u; kj < k; kj++) {
                let xx = x0 + i32(kj);
                if (xx < 0 || xx >= i32(p.w)) {
                    continue;
                }
                sum = fma(params[wrow + ki * k + kj], x[plane + u32(y) * p.w + u32(xx)], sum);
            }
        }
    }
    let out = activate(sum, p.activation);
    z[i] = sum;
    a[i] = out;
    if (!is_finite(sum) || !is_finite(out)) {
        let step = atomicLoad(&flags[1]);
        atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
    }
}
