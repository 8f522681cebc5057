// conv2d_backward_weight: the first of ∂W's two passes (CPU twin: the dweight and dbias parts of
// model::conv2d_backward): partial sums of
//
//   ∂W[f, c, ki, kj] = Σ_(b, oy, ox) dz[b, f, oy, ox]·x[b, c, oy·S + ki − pad, ox·S + kj − pad]
//   ∂b[f]            = Σ_(b, oy, ox) dz[b, f, oy, ox]
//
// over segments of the N = B·OH·OW terms, into `partials`; conv2d_backward_weight_sum adds each
// gradient's partials onto it. Each gradient is a reduction over N terms (25,088 for a 28 × 28
// conv at batch 32): split into `segments` (up to 64, each of `segment_len` ≥ 256 terms, the
// last shorter), the reduction keeps a large GPU busy, where one invocation looping over every
// term per weight would leave all but F·C·K·K lanes idle; no barrier (a barrier costs more than
// the arithmetic on software adapters). The order, which the twin test's tolerance states: term
// j = (b·OH + oy)·OW + ox; segment s sums its terms [s·L, (s + 1)·L) in order from 0 (the
// padding's terms as 0·dz); the sum pass adds the segments' partials in order from 0, then the
// total onto the gradient.
//
// Bindings (group 0):
//   0 partials (segments, F, C·K·K + 1)  read_write   segment s's sums; entry C·K·K is the bias's
//   1 dz       (B, F, OH, OW)           read         gradient with respect to the pre-activations
//   2 x        (B, C, H, W)             read         the layer's inputs (the batch, or the previous layer's a)
//   3 p        Params                   uniform
// Dispatch: `launch::grid_of_64(segments · ⌈F/8⌉ · ⌈(C·K·K + 1)/4⌉)`. Invocation g sums 8
// filters × 4 consecutive entries of (c, ki, kj) (the entry past the last weight being the
// bias, whose input is 1) over one segment, g = (segment · ⌈F/8⌉ + filter block) ·
// ⌈(C·K·K + 1)/4⌉ + entry block: neighbouring invocations share their terms' dz (broadcast
// loads) and read neighbouring inputs. Each term loads 8 values of dz and 4 inputs for 32
// multiply-adds. Filters and entries past the end are clamped for the loads and not stored.

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

const FB: u32 = 8u; // filters per invocation
const RB: u32 = 4u; // entries (c, ki, kj) per invocation

// The invocation's item: workgroups of 64 in a 2-D grid past 65535 (`launch::grid_of_64`).
fn item(lid: vec3<u32>, wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return (wid.y * groups.x + wid.x) * 64u + lid.x;
}

// Accumulator f of the 8, without indexing a local array.
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
    let k = p.kernel;
    let patch_len = p.c_in * k * k;
    let entries = patch_len + 1u;
    let entry_blocks = (entries + RB - 1u) / RB;
    let filter_blocks = (p.filters + FB - 1u) / FB;
    if (g >= p.segments * filter_blocks * entry_blocks) {
        return;
    }
    let rb = g % entry_blocks;
    let f0 = (g / entry_blocks) % filter_blocks * FB;
    let seg = g / (entry_blocks * filter_blocks);
    let positions = p.out_h * p.out_w;
    let n = p.batch * positions;
    // The 4 entries' (c, ki, kj), clamped to the last weight; the bias's input is 1.
    let r = vec4<u32>(rb * RB) + vec4<u32>(0u, 1u, 2u, 3u);
    let is_bias = r == vec4<u32>(patch_len);
    let rw = min(r, vec4<u32>(max(patch_len, 1u) - 1u));
    let ch = rw / (k * k);
    let ki = vec4<i32>((rw / k) % k) - i32(p.padding);
    let kj = vec4<i32>(rw % k) - i32(p.padding);
    let plane = p.h * p.w;
    let hi_y = vec4<i32>(i32(p.h) - 1);
    let hi_x = vec4<i32>(i32(p.w) - 1);
    let last = p.filters - 1u;
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    var acc4 = vec4<f32>();
    var acc5 = vec4<f32>();
    var acc6 = vec4<f32>();
    var acc7 = vec4<f32>();
    let start = seg * p.segment_len;
    let end = min(start + p.segment_len, n);
    // Term j's image and position, kept as counters (no division per term).
    var b = start / positions;
    var at = start % positions;
    var oy = at / p.out_w;
    var ox = at % p.out_w;
    for (var j = start; j < end; j++) {
        let y = vec4<i32>(i32(oy * p.stride)) + ki;
        let xx = vec4<i32>(i32(ox * p.stride)) + kj;
        let inside = (y >= vec4<i32>(0)) & (y <= hi_y) & (xx >= vec4<i32>(0)) & (xx <= hi_x);
        let idx = (vec4<u32>(b * p.c_in) + ch) * plane + vec4<u32>(clamp(y, vec4<i32>(0), hi_y)) * p.w
            + vec4<u32>(clamp(xx, vec4<i32>(0), hi_x));
        let loaded = vec4<f32>(x[idx.x], x[idx.y], x[idx.z], x[idx.w]);
        let v = select(select(vec4<f32>(0.0), loaded, inside), vec4<f32>(1.0), is_bias);
        let d = b * p.filters * positions + at;
        acc0 = fma(vec4<f32>(dz[d + min(f0, last) * positions]), v, acc0);
        acc1 = fma(vec4<f32>(dz[d + min(f0 + 1u, last) * positions]), v, acc1);
        acc2 = fma(vec4<f32>(dz[d + min(f0 + 2u, last) * positions]), v, acc2);
        acc3 = fma(vec4<f32>(dz[d + min(f0 + 3u, last) * positions]), v, acc3);
        acc4 = fma(vec4<f32>(dz[d + min(f0 + 4u, last) * positions]), v, acc4);
        acc5 = fma(vec4<f32>(dz[d + min(f0 + 5u, last) * positions]), v, acc5);
        acc6 = fma(vec4<f32>(dz[d + min(f0 + 6u, last) * positions]), v, acc6);
        acc7 = fma(vec4<f32>(dz[d + min(f0 + 7u, last) * positions]), v, acc7);
        at += 1u;
        ox += 1u;
        if (ox == p.out_w) {
            ox = 0u;
            oy += 1u;
        }
        if (at == positions) {
            at = 0u;
            oy = 0u;
            b += 1u;
        }
    }
    for (var f = 0u; f < FB; f++) {
        let sums = pick(acc0, acc1, acc2, acc3, acc4, acc5, acc6, acc7, f);
        for (var i = 0u; i < RB; i++) {
            if (f0 + f < p.filters && r[i] < entries) {
                partials[(seg * p.filters + f0 + f) * entries + r[i]] = sums[i];
            }
        }
    }
}
