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
// Dispatch: `launch::grid_of_64(⌈C/4⌉·B·⌈H·W/4⌉)`. Gathering (no two invocations write one
// value: no atomics, a fixed order) and register-blocked without barriers: invocation g
// computes 4 channels × 4 consecutive input positions of one image, g = (channel block · B + b)
// · ⌈H·W/4⌉ + position block. Each (ki, kj, f) loads 4 values of dz and 4 weights for 16
// multiply-adds. Channels and positions past the end, and outputs outside, are clamped for the
// loads and masked to 0.

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
    segments: u32, // ∂W's split of the B·OH·OW terms (conv2d_backward_weight)
    segment_len: u32,
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

const CB: u32 = 4u; // channels per invocation
const PB: u32 = 4u; // input positions per invocation

// Channel i's sums of the 4, without indexing a local array.
fn pick(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(64)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let g = item(lid, wid, groups);
    let plane = p.h * p.w;
    let blocks = (plane + PB - 1u) / PB;
    if (g >= (p.c_in + CB - 1u) / CB * p.batch * blocks) {
        return;
    }
    let pb = g % blocks;
    let b = (g / blocks) % p.batch;
    let c0 = g / (blocks * p.batch) * CB;
    let k = p.kernel;
    let s = i32(p.stride);
    let positions = p.out_h * p.out_w;
    let at = min(vec4<u32>(pb * PB) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(plane - 1u));
    let y = vec4<i32>(at / p.w) + i32(p.padding);
    let xx = vec4<i32>(at % p.w) + i32(p.padding);
    // Each channel's weights (W[f, c] at weight_offset + (f·C + c)·K·K; past the end: the last channel's).
    let last = p.c_in - 1u;
    let c1 = min(c0 + 1u, last);
    let c2 = min(c0 + 2u, last);
    let c3 = min(c0 + 3u, last);
    let kk = k * k;
    let filter_stride = p.c_in * kk;
    var tot0 = vec4<f32>();
    var tot1 = vec4<f32>();
    var tot2 = vec4<f32>();
    var tot3 = vec4<f32>();
    let dz_image = b * p.filters * positions;
    for (var ki = 0u; ki < k; ki++) {
        let ny = y - vec4<i32>(i32(ki));
        let oy = ny / vec4<i32>(s);
        let row_ok = (ny >= vec4<i32>(0)) & (oy * s == ny) & (oy < vec4<i32>(i32(p.out_h)));
        for (var kj = 0u; kj < k; kj++) {
            let nx = xx - vec4<i32>(i32(kj));
            let ox = nx / vec4<i32>(s);
            let ok = row_ok & (nx >= vec4<i32>(0)) & (ox * s == nx) & (ox < vec4<i32>(i32(p.out_w)));
            let out_at = vec4<u32>(clamp(oy, vec4<i32>(0), vec4<i32>(i32(p.out_h) - 1)) * i32(p.out_w)
                + clamp(ox, vec4<i32>(0), vec4<i32>(i32(p.out_w) - 1))) + dz_image;
            let r = p.weight_offset + ki * k + kj;
            var s0 = vec4<f32>();
            var s1 = vec4<f32>();
            var s2 = vec4<f32>();
            var s3 = vec4<f32>();
            for (var f = 0u; f < p.filters; f++) {
                let o = out_at + vec4<u32>(f * positions);
                let d = select(vec4<f32>(0.0), vec4<f32>(dz[o.x], dz[o.y], dz[o.z], dz[o.w]), ok);
                let wf = r + f * filter_stride;
                s0 = fma(vec4<f32>(params[wf + min(c0, last) * kk]), d, s0);
                s1 = fma(vec4<f32>(params[wf + c1 * kk]), d, s1);
                s2 = fma(vec4<f32>(params[wf + c2 * kk]), d, s2);
                s3 = fma(vec4<f32>(params[wf + c3 * kk]), d, s3);
            }
            tot0 += s0;
            tot1 += s1;
            tot2 += s2;
            tot3 += s3;
        }
    }
    for (var ci = 0u; ci < CB; ci++) {
        let sums = pick(tot0, tot1, tot2, tot3, ci);
        for (var j = 0u; j < PB; j++) {
            let pos = pb * PB + j;
            if (c0 + ci < p.c_in && pos < plane) {
                let i = (b * p.c_in + c0 + ci) * plane + pos;
                dx[i] = sums[j] * activation_derivative(z_in[i], a_in[i], p.activation);
            }
        }
    }
}
