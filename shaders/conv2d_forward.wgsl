// conv2d_forward: z = conv2d(x, W) + b and a = act(z), fused (CPU twins: model::conv2d_forward
// followed by model::activation_forward), PyTorch's nn.Conv2d: a square kernel, a stride, zero
// padding. Images are rows in (C, H, W) order. Records the first non-finite pre-activation or
// output in `flags`.
//
// z[b, f, oy, ox] = b[f] + Σ_(c, ki, kj) W[f, c, ki, kj]·x[b, c, oy·S + ki − pad, ox·S + kj − pad],
// summed from the bias in (c, ki, kj) row-major order, the padding's zeros included as terms:
// the twin's sum in the twin's order (the GPU fusing multiply-adds).
//
// Bindings (group 0):
//   0 z      (B, F, OH, OW)  read_write   pre-activations, kept for backward
//   1 a      (B, F, OH, OW)  read_write   outputs
//   2 x      (B, C, H, W)    read         inputs (the batch, or the previous layer's a)
//   3 params (P)             read         flat parameters; W (F, C, K, K) at weight_offset, b (F) at bias_offset
//   4 flags  (4)             read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   5 p      Params          uniform
// Dispatch: `launch::grid_of_64(⌈F/8⌉·B·⌈OH·OW/4⌉)`. Register-blocked, without workgroup memory
// or barriers (a barrier costs more than the arithmetic on software adapters, as for
// dense_forward_blocked): invocation g computes 8 filters × 4 consecutive output positions of
// one image, g = (filter block · B + b) · ⌈OH·OW/4⌉ + position block, so neighbouring
// invocations share the filters (their weights are broadcast loads) and read neighbouring
// inputs. Each (c, ki, kj) loads 4 inputs and 8 weights for 32 multiply-adds. Filters and
// positions past the end are clamped for the loads (every load in bounds, no branch) and not
// stored; the padding's inputs are loaded clamped and replaced by 0.

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

const FB: u32 = 8u; // filters per invocation
const PB: u32 = 4u; // output positions per invocation

// Accumulator f of the 8, without indexing a local array (which could
// force the accumulators out of registers).
fn pick(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>,
        a7: vec4<f32>, f: u32) -> vec4<f32> {
    let lo = select(select(a0, a1, f == 1u), select(a2, a3, f == 3u), f >= 2u);
    let hi = select(select(a4, a5, f == 5u), select(a6, a7, f == 7u), f >= 6u);
    return select(lo, hi, f >= 4u);
}

@compute @workgroup_size(64)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let g = item(lid, wid, groups);
    let positions = p.out_h * p.out_w;
    let blocks = (positions + PB - 1u) / PB;
    if (g >= (p.filters + FB - 1u) / FB * p.batch * blocks) {
        return;
    }
    let pb = g % blocks;
    let b = (g / blocks) % p.batch;
    let f0 = g / (blocks * p.batch) * FB;
    let k = p.kernel;
    let patch_len = p.c_in * k * k;
    // The 4 positions' first input row and column (positions past the end
    // clamped to the last).
    let at = min(vec4<u32>(pb * PB) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(positions - 1u));
    let y0 = vec4<i32>((at / p.out_w) * p.stride) - i32(p.padding);
    let x0 = vec4<i32>((at % p.out_w) * p.stride) - i32(p.padding);
    // Weight rows of the 8 filters (past the end: the last filter's).
    let last = p.filters - 1u;
    let w0 = p.weight_offset + min(f0, last) * patch_len;
    let w1 = p.weight_offset + min(f0 + 1u, last) * patch_len;
    let w2 = p.weight_offset + min(f0 + 2u, last) * patch_len;
    let w3 = p.weight_offset + min(f0 + 3u, last) * patch_len;
    let w4 = p.weight_offset + min(f0 + 4u, last) * patch_len;
    let w5 = p.weight_offset + min(f0 + 5u, last) * patch_len;
    let w6 = p.weight_offset + min(f0 + 6u, last) * patch_len;
    let w7 = p.weight_offset + min(f0 + 7u, last) * patch_len;
    var acc0 = vec4<f32>(params[p.bias_offset + min(f0, last)]);
    var acc1 = vec4<f32>(params[p.bias_offset + min(f0 + 1u, last)]);
    var acc2 = vec4<f32>(params[p.bias_offset + min(f0 + 2u, last)]);
    var acc3 = vec4<f32>(params[p.bias_offset + min(f0 + 3u, last)]);
    var acc4 = vec4<f32>(params[p.bias_offset + min(f0 + 4u, last)]);
    var acc5 = vec4<f32>(params[p.bias_offset + min(f0 + 5u, last)]);
    var acc6 = vec4<f32>(params[p.bias_offset + min(f0 + 6u, last)]);
    var acc7 = vec4<f32>(params[p.bias_offset + min(f0 + 7u, last)]);
    let hi_y = vec4<i32>(i32(p.h) - 1);
    let hi_x = vec4<i32>(i32(p.w) - 1);
    for (var c = 0u; c < p.c_in; c++) {
        let plane = (b * p.c_in + c) * p.h * p.w;
        for (var ki = 0u; ki < k; ki++) {
            let y = y0 + vec4<i32>(i32(ki));
            let row_in = (y >= vec4<i32>(0)) & (y <= hi_y);
            let rows = vec4<u32>(clamp(y, vec4<i32>(0), hi_y)) * p.w + plane;
            for (var kj = 0u; kj < k; kj++) {
                let xx = x0 + vec4<i32>(i32(kj));
                let inside = row_in & (xx >= vec4<i32>(0)) & (xx <= hi_x);
                let idx = rows + vec4<u32>(clamp(xx, vec4<i32>(0), hi_x));
                let v = select(vec4<f32>(0.0), vec4<f32>(x[idx.x], x[idx.y], x[idx.z], x[idx.w]), inside);
                let r = (c * k + ki) * k + kj;
                acc0 = fma(vec4<f32>(params[w0 + r]), v, acc0);
                acc1 = fma(vec4<f32>(params[w1 + r]), v, acc1);
                acc2 = fma(vec4<f32>(params[w2 + r]), v, acc2);
                acc3 = fma(vec4<f32>(params[w3 + r]), v, acc3);
                acc4 = fma(vec4<f32>(params[w4 + r]), v, acc4);
                acc5 = fma(vec4<f32>(params[w5 + r]), v, acc5);
                acc6 = fma(vec4<f32>(params[w6 + r]), v, acc6);
                acc7 = fma(vec4<f32>(params[w7 + r]), v, acc7);
            }
        }
    }
    // Epilogue: activation, store, non-finite check.
    for (var f = 0u; f < FB; f++) {
        let sums = pick(acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7, f);
        for (var j = 0u; j < PB; j++) {
            let pos = pb * PB + j;
            if (f0 + f < p.filters && pos < positions) {
                let i = ((b * p.filters + f0 + f) * positions) + pos;
                let pre = sums[j];
                let out = activate(pre, p.activation);
                z[i] = pre;
                a[i] = out;
                if (!is_finite(pre) || !is_finite(out)) {
                    let step = atomicLoad(&flags[1]);
                    atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
                }
            }
        }
    }
}
