// dense_backward_weight_blocked: dweight += dzᵀ·x and dbias += Σ_b dz, accumulated, in one
// pass without workgroup memory or barriers (CPU twin: the dweight and dbias parts of
// model::dense_backward): grads[weight_offset + o*I + i] += Σ_b dz[b, o]·x[b, i] (the same
// sums in the same order as dense_backward_weight) and grads[bias_offset + o] += Σ_b dz[b, o]
// (summed in row order, as the CPU engine sums it). With this variant the plan has no
// bias_backward dispatch. Records the first non-finite resulting gradient in `flags`. The
// training plan picks this or dense_backward_weight + bias_backward per layer by timing
// both (gpu::variants).
//
// Bindings (group 0), as dense_backward_weight:
//   0 grads (P)     read_write   flat gradients; dW (O, I) row-major at weight_offset, db (O) at bias_offset
//   1 flags (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 dz    (B, O)  read         gradient with respect to the pre-activations
//   3 x     (B, I)  read         the layer's inputs (the batch, or the previous layer's a)
//   4 p     Params  uniform
// Dispatch: (ceil(ceil(O / 8) · ceil(I / 8) / 64), 1, 1); workgroup 64. Invocation g
// computes an 8 × 8 block of dW in registers: units 8·(g / ceil(I / 8)) + 0..8, inputs
// 8·(g mod ceil(I / 8)) + 0..8; each step of the loop over the batch loads 8 values of dz
// and 8 of x and does 64 FMAs. The invocations of the first block of inputs also sum their
// units' dz for the bias. Units and inputs past the end are clamped for the loads and not
// stored.

struct Params {
    batch: u32,
    inputs: u32,
    units: u32,
    weight_offset: u32,
    layer: u32,
    bias_offset: u32, // read by dense_backward_weight_blocked only; 0xFFFFFFFF: none
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> dz: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const BLOCK: u32 = 8u;
const PHASE_BACKWARD: u32 = 3u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn accumulate(g: u32, acc: f32) {
    let v = grads[g] + acc;
    grads[g] = v;
    if (!is_finite(v)) {
        let step = atomicLoad(&flags[1]);
        atomicMin(&flags[0], (step << 16u) | (PHASE_BACKWARD << 8u) | (255u - p.layer));
    }
}

fn store_row(unit: u32, col0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (unit >= p.units) {
        return;
    }
    let g = p.weight_offset + unit * p.inputs;
    for (var j = 0u; j < 4u; j++) {
        if (col0 + j < p.inputs) {
            accumulate(g + col0 + j, lo[j]);
        }
        if (col0 + 4u + j < p.inputs) {
            accumulate(g + col0 + 4u + j, hi[j]);
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col_blocks = (p.inputs + BLOCK - 1u) / BLOCK;
    let unit0 = (gid.x / col_blocks) * BLOCK;
    let col0 = (gid.x % col_blocks) * BLOCK;
    if (unit0 >= p.units) {
        return;
    }
    let last_unit = p.units - 1u;
    let last_col = p.inputs - 1u;
    let u0 = min(unit0 + 0u, last_unit);
    let u1 = min(unit0 + 1u, last_unit);
    let u2 = min(unit0 + 2u, last_unit);
    let u3 = min(unit0 + 3u, last_unit);
    let u4 = min(unit0 + 4u, last_unit);
    let u5 = min(unit0 + 5u, last_unit);
    let u6 = min(unit0 + 6u, last_unit);
    let u7 = min(unit0 + 7u, last_unit);
    let c0 = min(col0 + 0u, last_col);
    let c1 = min(col0 + 1u, last_col);
    let c2 = min(col0 + 2u, last_col);
    let c3 = min(col0 + 3u, last_col);
    let c4 = min(col0 + 4u, last_col);
    let c5 = min(col0 + 5u, last_col);
    let c6 = min(col0 + 6u, last_col);
    let c7 = min(col0 + 7u, last_col);
    var a0l = vec4<f32>();
    var a0h = vec4<f32>();
    var a1l = vec4<f32>();
    var a1h = vec4<f32>();
    var a2l = vec4<f32>();
    var a2h = vec4<f32>();
    var a3l = vec4<f32>();
    var a3h = vec4<f32>();
    var a4l = vec4<f32>();
    var a4h = vec4<f32>();
    var a5l = vec4<f32>();
    var a5h = vec4<f32>();
    var a6l = vec4<f32>();
    var a6h = vec4<f32>();
    var a7l = vec4<f32>();
    var a7h = vec4<f32>();
    var bias_lo = vec4<f32>();
    var bias_hi = vec4<f32>();
    for (var b = 0u; b < p.batch; b++) {
        let d = b * p.units;
        let r = b * p.inputs;
        let lo = vec4<f32>(x[r + c0], x[r + c1], x[r + c2], x[r + c3]);
        let hi = vec4<f32>(x[r + c4], x[r + c5], x[r + c6], x[r + c7]);
        let dlo = vec4<f32>(dz[d + u0], dz[d + u1], dz[d + u2], dz[d + u3]);
        let dhi = vec4<f32>(dz[d + u4], dz[d + u5], dz[d + u6], dz[d + u7]);
        bias_lo += dlo;
        bias_hi += dhi;
        let v0 = vec4<f32>(dlo[0]);
        a0l = fma(v0, lo, a0l);
        a0h = fma(v0, hi, a0h);
        let v1 = vec4<f32>(dlo[1]);
        a1l = fma(v1, lo, a1l);
        a1h = fma(v1, hi, a1h);
        let v2 = vec4<f32>(dlo[2]);
        a2l = fma(v2, lo, a2l);
        a2h = fma(v2, hi, a2h);
        let v3 = vec4<f32>(dlo[3]);
        a3l = fma(v3, lo, a3l);
        a3h = fma(v3, hi, a3h);
        let v4 = vec4<f32>(dhi[0]);
        a4l = fma(v4, lo, a4l);
        a4h = fma(v4, hi, a4h);
        let v5 = vec4<f32>(dhi[1]);
        a5l = fma(v5, lo, a5l);
        a5h = fma(v5, hi, a5h);
        let v6 = vec4<f32>(dhi[2]);
        a6l = fma(v6, lo, a6l);
        a6h = fma(v6, hi, a6h);
        let v7 = vec4<f32>(dhi[3]);
        a7l = fma(v7, lo, a7l);
        a7h = fma(v7, hi, a7h);
    }
    store_row(unit0 + 0u, col0, a0l, a0h);
    store_row(unit0 + 1u, col0, a1l, a1h);
    store_row(unit0 + 2u, col0, a2l, a2h);
    store_row(unit0 + 3u, col0, a3l, a3h);
    store_row(unit0 + 4u, col0, a4l, a4h);
    store_row(unit0 + 5u, col0, a5l, a5h);
    store_row(unit0 + 6u, col0, a6l, a6h);
    store_row(unit0 + 7u, col0, a7l, a7h);
    if (col0 == 0u && p.bias_offset != 0xFFFFFFFFu) { // a layer without a bias has no db
        for (var j = 0u; j < 4u; j++) {
            if (unit0 + j < p.units) {
                accumulate(p.bias_offset + unit0 + j, bias_lo[j]);
            }
            if (unit0 + 4u + j < p.units) {
                accumulate(p.bias_offset + unit0 + 4u + j, bias_hi[j]);
            }
        }
    }
}
