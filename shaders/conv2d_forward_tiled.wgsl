// conv2d_forward_tiled: the implicit-GEMM variant of conv2d_forward (same CPU twins:
// model::conv2d_forward followed by model::activation_forward; same bindings, Params and
// results). The convolution as the matrix product the twin lowers it to, z (B·OH·OW, F) =
// patches (B·OH·OW, C·K·K) × Wᵀ (C·K·K, F) + b, without the patch matrix: each tile of it is
// gathered from x into workgroup memory as it is needed (the padding's entries as zeros).
//
// z[b, f, oy, ox] = b[f] + Σ_(c, ki, kj) W[f, c, ki, kj]·x[b, c, oy·S + ki − pad, ox·S + kj − pad],
// summed from the bias in (c, ki, kj) row-major order, one fused multiply-add at a time, the
// padding's zeros included as terms: the direct kernel's operations in its order, so the two
// variants give the same bits (tested), and the twin's sum in the twin's order.
//
// Bindings: conv2d_forward's (z, a, x, params, flags, p).
// Dispatch: `conv::tile_grid(⌈F/64⌉, ⌈B·OH·OW/64⌉)`: workgroup (x, y + z·groups.y) computes
// 64 output positions × 64 filters, 16×16 invocations each a 4 × 4 block in registers. Tiles
// of 64 positions × 16 patch entries and 16 entries × 64 filters are staged in workgroup
// memory behind barriers, so every loaded value is used 64 times: the variant for large
// channel counts on a GPU with fast workgroup memory (on a software adapter a barrier costs
// more than the arithmetic it separates, and the direct kernel wins; the calibration times
// both per layer, `gpu::matmul::choose`).

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

const TILE: u32 = 64u;
const KTILE: u32 = 16u;

var<workgroup> tile_x: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_x[k * 16 + row / 4][row % 4]
var<workgroup> tile_w: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_w[k * 16 + filter / 4][filter % 4]

// Row i of a 4 × 4 register block, without indexing a local array.
fn pick_row(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let positions = p.out_h * p.out_w;
    let n = p.batch * positions;
    let row0 = (wid.z * groups.y + wid.y) * TILE;
    let f0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    let k = p.kernel;
    let kk = k * k;
    let patch_len = p.c_in * kk;
    let plane = p.h * p.w;
    let last = p.filters - 1u;
    // The rows this invocation stages (row0 + tid/16 + 16e, e = 0..3), at patch entry k0 + tid%16:
    // each row's image, first input row and column, and whether it is an output at all.
    let staged = vec4<u32>(row0 + tid / KTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let row_ok = staged < vec4<u32>(n);
    let at = min(staged, vec4<u32>(max(n, 1u) - 1u));
    let image = (at / positions) * p.c_in * plane;
    let pos = at % positions;
    let y0 = vec4<i32>((pos / p.out_w) * p.stride) - i32(p.padding);
    let x0 = vec4<i32>((pos % p.out_w) * p.stride) - i32(p.padding);
    let kl = tid % KTILE;
    // The filters this invocation stages (f0 + tid/16 + 16e), clamped for the loads.
    let staged_f = vec4<u32>(f0 + tid / KTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let f_ok = staged_f < vec4<u32>(p.filters);
    let w_rows = vec4<u32>(p.weight_offset) + min(staged_f, vec4<u32>(last)) * patch_len;
    // Accumulators from the bias: acc_i[j] is row lid.y·4 + i, filter lid.x·4 + j.
    let fc = f0 + lid.x * 4u;
    let bias = vec4<f32>(
        params[p.bias_offset + min(fc, last)],
        params[p.bias_offset + min(fc + 1u, last)],
        params[p.bias_offset + min(fc + 2u, last)],
        params[p.bias_offset + min(fc + 3u, last)],
    );
    var acc0 = bias;
    var acc1 = bias;
    var acc2 = bias;
    var acc3 = bias;
    let hi_y = vec4<i32>(i32(p.h) - 1);
    let hi_x = vec4<i32>(i32(p.w) - 1);
    for (var k0 = 0u; k0 < patch_len; k0 += KTILE) {
        let r = k0 + kl;
        let r_ok = r < patch_len;
        let rc = min(r, patch_len - 1u);
        let c = rc / kk;
        let ki = (rc / k) % k;
        let kj = rc % k;
        let y = y0 + vec4<i32>(i32(ki));
        let xx = x0 + vec4<i32>(i32(kj));
        let inside = row_ok & vec4<bool>(r_ok) & (y >= vec4<i32>(0)) & (y <= hi_y) & (xx >= vec4<i32>(0))
            & (xx <= hi_x);
        let idx = image + c * plane + vec4<u32>(clamp(y, vec4<i32>(0), hi_y)) * p.w
            + vec4<u32>(clamp(xx, vec4<i32>(0), hi_x));
        let xv = select(vec4<f32>(0.0), vec4<f32>(x[idx.x], x[idx.y], x[idx.z], x[idx.w]), inside);
        let wi = w_rows + vec4<u32>(rc);
        let wv = select(vec4<f32>(0.0), vec4<f32>(params[wi.x], params[wi.y], params[wi.z], params[wi.w]),
            f_ok & vec4<bool>(r_ok));
        let slot = kl * 16u + tid / 64u;
        let lane = (tid / KTILE) % 4u;
        // Row tid/16 + 16e sits at [kl·16 + (tid/16 + 16e)/4][(tid/16) % 4].
        tile_x[slot][lane] = xv.x;
        tile_x[slot + 4u][lane] = xv.y;
        tile_x[slot + 8u][lane] = xv.z;
        tile_x[slot + 12u][lane] = xv.w;
        tile_w[slot][lane] = wv.x;
        tile_w[slot + 4u][lane] = wv.y;
        tile_w[slot + 8u][lane] = wv.z;
        tile_w[slot + 12u][lane] = wv.w;
        workgroupBarrier();
        // Only the entries that exist: a zero term past the end could turn a −0 sum into +0.
        let kend = min(KTILE, patch_len - k0);
        for (var q = 0u; q < kend; q++) {
            let a4 = tile_x[q * 16u + lid.y];
            let w4 = tile_w[q * 16u + lid.x];
            acc0 = fma(vec4<f32>(a4.x), w4, acc0);
            acc1 = fma(vec4<f32>(a4.y), w4, acc1);
            acc2 = fma(vec4<f32>(a4.z), w4, acc2);
            acc3 = fma(vec4<f32>(a4.w), w4, acc3);
        }
        workgroupBarrier();
    }
    // Epilogue: activation, store, non-finite check.
    for (var i = 0u; i < 4u; i++) {
        let sums = pick_row(acc0, acc1, acc2, acc3, i);
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let f = fc + j;
            if (row < n && f < p.filters) {
                let o = ((row / positions) * p.filters + f) * positions + row % positions;
                let pre = sums[j];
                let out = activate(pre, p.activation);
                z[o] = pre;
                a[o] = out;
                if (!is_finite(pre) || !is_finite(out)) {
                    let step = atomicLoad(&flags[1]);
                    atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
                }
            }
        }
    }
}
