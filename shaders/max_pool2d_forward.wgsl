// max_pool2d_forward: z = each K × K window's maximum (moved by S, no padding, floor mode)
// and a = act(z), fused (CPU twins: model::max_pool2d_forward, then model::activation_forward).
// The window is read in row-major order and a value replaces the maximum when it is greater or
// NaN: the first maximum, or the last NaN, as PyTorch's CPU kernel (and the twin) picks. The
// twin also keeps the index it took; max_pool2d_backward finds it again from the same inputs.
// Records the first non-finite output in `flags`.
//
// Bindings (group 0):
//   0 z     (B, C, OH, OW)  read_write   the pooled values, kept for backward
//   1 a     (B, C, OH, OW)  read_write   outputs
//   2 x     (B, C, H, W)    read         inputs (the batch, or the previous layer's a)
//   3 flags (4)             read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   4 p     Params          uniform
// Dispatch: `launch::grid_of_64(B·C·OH·OW)`; an invocation per output.

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

@group(0) @binding(0) var<storage, read_write> z: array<f32>;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(4) var<uniform> p: Params;

const PHASE_FORWARD: u32 = 1u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

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
    if (i >= p.batch * p.c * positions) {
        return;
    }
    let plane = i / positions;
    let first = plane * p.h * p.w + ((i % positions) / p.out_w) * p.stride * p.w + (i % p.out_w) * p.stride;
    // The twin starts from −∞; starting from the window's first value takes
    // the same value and index (−∞ itself is not a WGSL constant Tint takes).
    var best = x[first];
    for (var ki = 0u; ki < p.kernel; ki++) {
        for (var kj = 0u; kj < p.kernel; kj++) {
            let v = x[first + ki * p.w + kj];
            if (v > best || is_nan(v)) {
                best = v;
            }
        }
    }
    let out = activate(best, p.activation);
    z[i] = best;
    a[i] = out;
    if (!is_finite(best) || !is_finite(out)) {
        let step = atomicLoad(&flags[1]);
        atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
    }
}
