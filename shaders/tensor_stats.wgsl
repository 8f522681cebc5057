// tensor_stats: summary statistics of one region src[offset .. offset + len] of a
// buffer, for the page's histograms of activations, gradients, weights and updates
// (CPU twin: stats::tensor_stats; stats::from_gpu decodes the record).
// Writes TENSOR_STATS_STRIDE = 40 floats at out[out_offset ..]:
//   [0] mean, [1] std (population), [2] min, [3] max of the finite values,
//   [4] count of non-finite values, [5..8] 0,
//   [8 + b] count of finite values in bin b of 32 equal-width bins over [min, max]:
//   b = min(floor((v − min) / (max − min) · 32), 31); every value in bin 0 when
//   max == min. Counts are stored as f32 (exact below 2^24).
// Non-finite values count only in [4]. With no finite value (len 0 included)
// mean, std, min, max and the histogram are 0.
// mean = sum / n and var = max(sumsq / n − mean², 0) from f32 sums.
//
// Bindings (group 0):
//   0 out  (≥ out_offset + 40)  read_write   the statistics record
//   1 src  (≥ offset + len)     read         the buffer holding the region
//   2 p    Params               uniform
// Dispatch: (1, 1, 1), one workgroup of 256. Pass 1: strided sums, min, max and
// non-finite count, combined by tree reductions in workgroup memory; pass 2:
// histogram into 32 workgroup atomic counters; then the first 32 invocations
// store the bins and invocation 0 the moments.

struct Params {
    offset: u32,
    len: u32,
    out_offset: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

const WG: u32 = 256u;
const BINS: u32 = 32u;
// The largest finite f32, as a hex float (a decimal literal such as 3.40282347e38
// rounds above it in some compilers, which then reject it).
const F32_MAX: f32 = 0x1.fffffep+127f;

var<workgroup> red_sum: array<f32, 256>;
var<workgroup> red_sumsq: array<f32, 256>;
var<workgroup> red_min: array<f32, 256>;
var<workgroup> red_max: array<f32, 256>;
var<workgroup> red_bad: array<u32, 256>;
var<workgroup> hist: array<atomic<u32>, 32>;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let tid = lid.x;
    if (tid < BINS) {
        atomicStore(&hist[tid], 0u);
    }
    // Pass 1: this invocation's share, elements tid, tid + 256, …
    var sum = 0.0;
    var sumsq = 0.0;
    var mn = F32_MAX;
    var mx = -F32_MAX;
    var bad = 0u;
    for (var i = tid; i < p.len; i += WG) {
        let v = src[p.offset + i];
        if (is_finite(v)) {
            sum += v;
            sumsq += v * v;
            mn = min(mn, v);
            mx = max(mx, v);
        } else {
            bad += 1u;
        }
    }
    red_sum[tid] = sum;
    red_sumsq[tid] = sumsq;
    red_min[tid] = mn;
    red_max[tid] = mx;
    red_bad[tid] = bad;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_sum[tid] += red_sum[tid + s];
            red_sumsq[tid] += red_sumsq[tid + s];
            red_min[tid] = min(red_min[tid], red_min[tid + s]);
            red_max[tid] = max(red_max[tid], red_max[tid + s]);
            red_bad[tid] += red_bad[tid + s];
        }
        workgroupBarrier();
    }
    let n_bad = red_bad[0];
    let n = p.len - n_bad;
    let lo = red_min[0];
    let hi = red_max[0];
    let range = hi - lo;
    // Pass 2: histogram of the finite values.
    if (n > 0u) {
        for (var i = tid; i < p.len; i += WG) {
            let v = src[p.offset + i];
            if (is_finite(v)) {
                var bin = 0u;
                if (range > 0.0) {
                    bin = min(u32(floor((v - lo) / range * 32.0)), BINS - 1u);
                }
                atomicAdd(&hist[bin], 1u);
            }
        }
    }
    workgroupBarrier();
    let base = p.out_offset;
    if (tid < BINS) {
        out[base + 8u + tid] = f32(atomicLoad(&hist[tid]));
    }
    if (tid == 0u) {
        var mean = 0.0;
        var sd = 0.0;
        var out_min = 0.0;
        var out_max = 0.0;
        if (n > 0u) {
            let nf = f32(n);
            mean = red_sum[0] / nf;
            sd = sqrt(max(red_sumsq[0] / nf - mean * mean, 0.0));
            out_min = lo;
            out_max = hi;
        }
        out[base + 0u] = mean;
        out[base + 1u] = sd;
        out[base + 2u] = out_min;
        out[base + 3u] = out_max;
        out[base + 4u] = f32(n_bad);
        out[base + 5u] = 0.0;
        out[base + 6u] = 0.0;
        out[base + 7u] = 0.0;
    }
}
