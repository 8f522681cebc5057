// conv2d_backward_input_tiled: the implicit-GEMM variant of conv2d_backward_input (same CPU
// twins: the dx part of model::conv2d_backward, then model::activation_backward of the layer
// below; same bindings, Params and results). For each kernel offset (ki, kj), the product
// dz-gathered (B·H·W, F) × W[·, ·, ki, kj] (F, C), each tile of dz gathered into workgroup
// memory as it is needed (outputs outside the image, or between strides, as zeros):
//
// dx[b, c, y, x] = Σ_(ki, kj) (Σ_f dz[b, f, oy, ox]·W[f, c, ki, kj]) · f'(z_in[b, c, y, x]),
//
// (oy, ox) = ((y + pad − ki)/S, (x + pad − kj)/S), the (ki, kj) in row-major order, each inner
// sum over every f from 0 (the masked ones as 0·W), one fused multiply-add at a time, then
// added: the direct kernel's operations in its order, so the two variants give the same bits
// (tested), and the twin's order. With the linear code f' = 1.
//
// Bindings: conv2d_backward_input's (dx, dz, params, z_in, a_in, p).
// Dispatch: `conv::tile_grid(⌈C/64⌉, ⌈B·H·W/64⌉)`: workgroup (x, y + z·groups.y) computes 64
// input positions × 64 channels, 16×16 invocations each a 4 × 4 block in registers; tiles of
// 64 positions × 16 filters of dz and 16 filters × 64 channels of W are staged in workgroup
// memory behind barriers (the variant for many channels on a GPU with fast workgroup memory;
// the calibration times both per layer).

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

const TILE: u32 = 64u;
const FTILE: u32 = 16u;

var<workgroup> tile_d: array<vec4<f32>, 256>; // [FTILE][TILE / 4]: tile_d[f * 16 + row / 4][row % 4]
var<workgroup> tile_w: array<vec4<f32>, 256>; // [FTILE][TILE / 4]: tile_w[f * 16 + channel / 4][channel % 4]

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
    let plane = p.h * p.w;
    let n = p.batch * plane;
    let positions = p.out_h * p.out_w;
    let row0 = (wid.z * groups.y + wid.y) * TILE;
    let c0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    let k = p.kernel;
    let kk = k * k;
    let s = i32(p.stride);
    // The input positions this invocation stages (row0 + tid/16 + 16e), at filter f0 + tid%16:
    // each one's image and padded row and column.
    let staged = vec4<u32>(row0 + tid / FTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let row_ok = staged < vec4<u32>(n);
    let at = min(staged, vec4<u32>(max(n, 1u) - 1u));
    let dz_image = (at / plane) * p.filters * positions;
    let y = vec4<i32>((at % plane) / p.w) + i32(p.padding);
    let xx = vec4<i32>(at % p.w) + i32(p.padding);
    let fl = tid % FTILE;
    // The channels this invocation stages (c0 + tid/16 + 16e), clamped for the loads.
    let staged_c = vec4<u32>(c0 + tid / FTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let c_ok = staged_c < vec4<u32>(p.c_in);
    let w_cols = vec4<u32>(p.weight_offset) + min(staged_c, vec4<u32>(p.c_in - 1u)) * kk;
    let slot = fl * 16u + tid / 64u;
    let lane = (tid / FTILE) % 4u;
    // tot_i[j]: input position lid.y·4 + i, channel lid.x·4 + j.
    var tot0 = vec4<f32>();
    var tot1 = vec4<f32>();
    var tot2 = vec4<f32>();
    var tot3 = vec4<f32>();
    for (var ki = 0u; ki < k; ki++) {
        let ny = y - vec4<i32>(i32(ki));
        let oy = ny / vec4<i32>(s);
        let in_row = (ny >= vec4<i32>(0)) & (oy * s == ny) & (oy < vec4<i32>(i32(p.out_h)));
        for (var kj = 0u; kj < k; kj++) {
            let nx = xx - vec4<i32>(i32(kj));
            let ox = nx / vec4<i32>(s);
            let ok = row_ok & in_row & (nx >= vec4<i32>(0)) & (ox * s == nx) & (ox < vec4<i32>(i32(p.out_w)));
            let out_at = vec4<u32>(clamp(oy, vec4<i32>(0), vec4<i32>(i32(p.out_h) - 1)) * i32(p.out_w)
                + clamp(ox, vec4<i32>(0), vec4<i32>(i32(p.out_w) - 1))) + dz_image;
            var s0 = vec4<f32>();
            var s1 = vec4<f32>();
            var s2 = vec4<f32>();
            var s3 = vec4<f32>();
            for (var f0 = 0u; f0 < p.filters; f0 += FTILE) {
                let f = f0 + fl;
                let f_ok = f < p.filters;
                let fc = min(f, p.filters - 1u);
                let o = out_at + vec4<u32>(fc * positions);
                let dv = select(vec4<f32>(0.0), vec4<f32>(dz[o.x], dz[o.y], dz[o.z], dz[o.w]), ok & vec4<bool>(f_ok));
                let wi = w_cols + vec4<u32>(fc * p.c_in * kk + ki * k + kj);
                let wv = select(vec4<f32>(0.0), vec4<f32>(params[wi.x], params[wi.y], params[wi.z], params[wi.w]),
                    c_ok & vec4<bool>(f_ok));
                tile_d[slot][lane] = dv.x;
                tile_d[slot + 4u][lane] = dv.y;
                tile_d[slot + 8u][lane] = dv.z;
                tile_d[slot + 12u][lane] = dv.w;
                tile_w[slot][lane] = wv.x;
                tile_w[slot + 4u][lane] = wv.y;
                tile_w[slot + 8u][lane] = wv.z;
                tile_w[slot + 12u][lane] = wv.w;
                workgroupBarrier();
                let fend = min(FTILE, p.filters - f0);
                for (var q = 0u; q < fend; q++) {
                    let d4 = tile_d[q * 16u + lid.y];
                    let w4 = tile_w[q * 16u + lid.x];
                    s0 = fma(vec4<f32>(d4.x), w4, s0);
                    s1 = fma(vec4<f32>(d4.y), w4, s1);
                    s2 = fma(vec4<f32>(d4.z), w4, s2);
                    s3 = fma(vec4<f32>(d4.w), w4, s3);
                }
                workgroupBarrier();
            }
            tot0 += s0;
            tot1 += s1;
            tot2 += s2;
            tot3 += s3;
        }
    }
    for (var i = 0u; i < 4u; i++) {
        let sums = pick_row(tot0, tot1, tot2, tot3, i);
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let c = c0 + lid.x * 4u + j;
            if (row < n && c < p.c_in) {
                let o = ((row / plane) * p.c_in + c) * plane + row % plane;
                dx[o] = sums[j] * activation_derivative(z_in[o], a_in[o], p.activation);
            }
        }
    }
}
