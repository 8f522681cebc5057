// conv2d_backward_weight_tiled: the implicit-GEMM variant of conv2d_backward_weight, ∂W's first
// pass (same CPU twin: the dweight and dbias parts of model::conv2d_backward; same bindings,
// Params, partials and second pass, conv2d_backward_weight_sum). Per segment of the
// N = B·OH·OW terms, the product dz (F, terms) × patches (terms, C·K·K + 1), each tile of the
// patch matrix gathered from x into workgroup memory as it is needed (the padding's entries as
// zeros, the bias's entry as 1):
//
//   partial[s, f, (c, ki, kj)] = Σ_(j in segment s) dz[b, f, oy, ox]·x[b, c, oy·S + ki − pad, ox·S + kj − pad]
//   partial[s, f, C·K·K]       = Σ_(j in segment s) dz[b, f, oy, ox]
//
// term j = (b·OH + oy)·OW + ox, segment s its terms [s·L, (s + 1)·L) in order from 0, one fused
// multiply-add at a time: the direct kernel's operations in its order, so the two variants give
// the same partials (tested), and the order the twin test's tolerance states.
//
// Bindings: conv2d_backward_weight's (partials, dz, x, p).
// Dispatch: (⌈(C·K·K + 1)/64⌉, ⌈F/64⌉, segments): workgroup (x, y, s) computes 64 filters × 64
// entries of segment s, 16×16 invocations each a 4 × 4 block in registers; tiles of 16 terms
// × 64 filters of dz and 16 terms × 64 entries of the patches are staged in workgroup memory
// behind barriers (the variant for many channels on a GPU with fast workgroup memory; the
// calibration times both per layer).

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

@group(0) @binding(0) var<storage, read_write> partials: array<f32>;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const TILE: u32 = 64u;
const JTILE: u32 = 16u;

var<workgroup> tile_d: array<vec4<f32>, 256>; // [JTILE][TILE / 4]: tile_d[t * 16 + filter / 4][filter % 4]
var<workgroup> tile_x: array<vec4<f32>, 256>; // [JTILE][TILE / 4]: tile_x[t * 16 + entry / 4][entry % 4]

// Row i of a 4 × 4 register block, without indexing a local array.
fn pick_row(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let k = p.kernel;
    let kk = k * k;
    let patch_len = p.c_in * kk;
    let entries = patch_len + 1u;
    let e0 = wid.x * TILE;
    let f0 = wid.y * TILE;
    let seg = wid.z;
    let positions = p.out_h * p.out_w;
    let n = p.batch * positions;
    let plane = p.h * p.w;
    let tid = lid.y * 16u + lid.x;
    let tl = tid % JTILE;
    // The filters and entries this invocation stages (f0 or e0 + tid/16 + 16e) at term j0 + tid%16.
    let staged_f = vec4<u32>(f0 + tid / JTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let f_ok = staged_f < vec4<u32>(p.filters);
    let f_rows = min(staged_f, vec4<u32>(p.filters - 1u)) * positions;
    let r = vec4<u32>(e0 + tid / JTILE) + vec4<u32>(0u, 16u, 32u, 48u);
    let r_ok = r < vec4<u32>(entries);
    let is_bias = r == vec4<u32>(patch_len);
    let rw = min(r, vec4<u32>(max(patch_len, 1u) - 1u));
    let ch = rw / kk;
    let ki = vec4<i32>((rw / k) % k) - i32(p.padding);
    let kj = vec4<i32>(rw % k) - i32(p.padding);
    let hi_y = vec4<i32>(i32(p.h) - 1);
    let hi_x = vec4<i32>(i32(p.w) - 1);
    let slot = tl * 16u + tid / 64u;
    let lane = (tid / JTILE) % 4u;
    // acc_i[j]: filter lid.y·4 + i, entry lid.x·4 + j.
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    let start = min(seg * p.segment_len, n);
    let end = min(start + p.segment_len, n);
    for (var j0 = start; j0 < end; j0 += JTILE) {
        let j = min(j0 + tl, end - 1u);
        let j_ok = j0 + tl < end;
        let b = j / positions;
        let at = j % positions;
        let oy = at / p.out_w;
        let ox = at % p.out_w;
        let d_at = vec4<u32>(b * p.filters * positions + at) + f_rows;
        let dv = select(vec4<f32>(0.0), vec4<f32>(dz[d_at.x], dz[d_at.y], dz[d_at.z], dz[d_at.w]),
            f_ok & vec4<bool>(j_ok));
        let y = vec4<i32>(i32(oy * p.stride)) + ki;
        let xx = vec4<i32>(i32(ox * p.stride)) + kj;
        let inside = (y >= vec4<i32>(0)) & (y <= hi_y) & (xx >= vec4<i32>(0)) & (xx <= hi_x);
        let idx = (vec4<u32>(b * p.c_in) + ch) * plane + vec4<u32>(clamp(y, vec4<i32>(0), hi_y)) * p.w
            + vec4<u32>(clamp(xx, vec4<i32>(0), hi_x));
        let loaded = vec4<f32>(x[idx.x], x[idx.y], x[idx.z], x[idx.w]);
        let xv = select(select(select(vec4<f32>(0.0), loaded, inside), vec4<f32>(1.0), is_bias), vec4<f32>(0.0),
            !(r_ok & vec4<bool>(j_ok)));
        tile_d[slot][lane] = dv.x;
        tile_d[slot + 4u][lane] = dv.y;
        tile_d[slot + 8u][lane] = dv.z;
        tile_d[slot + 12u][lane] = dv.w;
        tile_x[slot][lane] = xv.x;
        tile_x[slot + 4u][lane] = xv.y;
        tile_x[slot + 8u][lane] = xv.z;
        tile_x[slot + 12u][lane] = xv.w;
        workgroupBarrier();
        let tend = min(JTILE, end - j0);
        for (var q = 0u; q < tend; q++) {
            let d4 = tile_d[q * 16u + lid.y];
            let x4 = tile_x[q * 16u + lid.x];
            acc0 = fma(vec4<f32>(d4.x), x4, acc0);
            acc1 = fma(vec4<f32>(d4.y), x4, acc1);
            acc2 = fma(vec4<f32>(d4.z), x4, acc2);
            acc3 = fma(vec4<f32>(d4.w), x4, acc3);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let sums = pick_row(acc0, acc1, acc2, acc3, i);
        let f = f0 + lid.y * 4u + i;
        for (var e = 0u; e < 4u; e++) {
            let entry = e0 + lid.x * 4u + e;
            if (f < p.filters && entry < entries && seg < p.segments) {
                partials[(seg * p.filters + f) * entries + entry] = sums[e];
            }
        }
    }
}
