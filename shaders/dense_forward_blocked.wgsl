// dense_forward_blocked: z = x·Wᵀ + b and a = act(z), fused, without workgroup memory or
// barriers (CPU twins: model::dense_forward followed by model::activation_forward; the
// same sums in the same order as dense_forward, so the two give the same bits). Records
// the first non-finite pre-activation or output in `flags`. The training plan picks this
// or dense_forward per layer by timing both on the adapter (gpu::variants): on software
// adapters a barrier costs milliseconds, and this variant is several times faster there.
//
// Bindings (group 0), as dense_forward:
//   0 z      (B, O)  read_write   pre-activations, kept for backward
//   1 a      (B, O)  read_write   outputs
//   2 x      (B, I)  read         inputs (the batch, or the previous layer's a)
//   3 params (P)     read         flat parameters; W (O, I) at weight_offset, b (O) at bias_offset
//   4 flags  (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   5 p      Params  uniform
// Dispatch: (ceil(ceil(B / 8) · ceil(O / 8) / 64), 1, 1); workgroup 64. Invocation g
// computes an 8 × 8 block of outputs in registers: rows 8·(g / ceil(O / 8)) + 0..8, units
// 8·(g mod ceil(O / 8)) + 0..8. Each step of the loop over the inputs loads 8 values of x
// and 8 of W and does 64 FMAs. Rows and units past the end are clamped to the last one for
// the loads (every load stays in bounds, with no branch) and not stored.

struct Params {
    batch: u32,
    inputs: u32,
    units: u32,
    weight_offset: u32,
    bias_offset: u32, // NO_BIAS: none
    activation: u32, // 0 linear, 1 relu, 2 leaky_relu, 3 tanh, 4 sigmoid, 5 gelu_tanh, 6 silu
    layer: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> z: array<f32>;
@group(0) @binding(1) var<storage, read_write> a: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<f32>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(5) var<uniform> p: Params;

const NO_BIAS: u32 = 0xFFFFFFFFu;

// The bias of `unit`; 0 where the layer has none (bias_offset NO_BIAS: a
// transformer's head), as the twin adds a zero bias.
fn bias_of(unit: u32) -> f32 {
    if (p.bias_offset == NO_BIAS) {
        return 0.0;
    }
    return params[p.bias_offset + unit];
}

const BLOCK: u32 = 8u;
const PHASE_FORWARD: u32 = 1u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// tanh through exp(−2|v|): finite for every input (a plain tanh may give
// inf/inf = NaN for large |v| on some drivers).
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

fn store(row: u32, unit: u32, acc: f32) {
    if (row < p.batch && unit < p.units) {
        let pre = acc + bias_of(unit);
        let out = activate(pre, p.activation);
        z[row * p.units + unit] = pre;
        a[row * p.units + unit] = out;
        if (!is_finite(pre) || !is_finite(out)) {
            let step = atomicLoad(&flags[1]);
            atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
        }
    }
}

// Row `row` of the block: units unit0 + 0..4 in lo, unit0 + 4..8 in hi.
fn store_row(row: u32, unit0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) {
        store(row, unit0 + j, lo[j]);
        store(row, unit0 + 4u + j, hi[j]);
    }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let unit_blocks = (p.units + BLOCK - 1u) / BLOCK;
    let row0 = (gid.x / unit_blocks) * BLOCK;
    let unit0 = (gid.x % unit_blocks) * BLOCK;
    if (row0 >= p.batch) {
        return;
    }
    let last_row = p.batch - 1u;
    let last_unit = p.units - 1u;
    let x0 = min(row0 + 0u, last_row) * p.inputs;
    let x1 = min(row0 + 1u, last_row) * p.inputs;
    let x2 = min(row0 + 2u, last_row) * p.inputs;
    let x3 = min(row0 + 3u, last_row) * p.inputs;
    let x4 = min(row0 + 4u, last_row) * p.inputs;
    let x5 = min(row0 + 5u, last_row) * p.inputs;
    let x6 = min(row0 + 6u, last_row) * p.inputs;
    let x7 = min(row0 + 7u, last_row) * p.inputs;
    let w0 = p.weight_offset + min(unit0 + 0u, last_unit) * p.inputs;
    let w1 = p.weight_offset + min(unit0 + 1u, last_unit) * p.inputs;
    let w2 = p.weight_offset + min(unit0 + 2u, last_unit) * p.inputs;
    let w3 = p.weight_offset + min(unit0 + 3u, last_unit) * p.inputs;
    let w4 = p.weight_offset + min(unit0 + 4u, last_unit) * p.inputs;
    let w5 = p.weight_offset + min(unit0 + 5u, last_unit) * p.inputs;
    let w6 = p.weight_offset + min(unit0 + 6u, last_unit) * p.inputs;
    let w7 = p.weight_offset + min(unit0 + 7u, last_unit) * p.inputs;
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
    for (var k = 0u; k < p.inputs; k++) {
        let lo = vec4<f32>(params[w0 + k], params[w1 + k], params[w2 + k], params[w3 + k]);
        let hi = vec4<f32>(params[w4 + k], params[w5 + k], params[w6 + k], params[w7 + k]);
        let v0 = vec4<f32>(x[x0 + k]);
        a0l = fma(v0, lo, a0l);
        a0h = fma(v0, hi, a0h);
        let v1 = vec4<f32>(x[x1 + k]);
        a1l = fma(v1, lo, a1l);
        a1h = fma(v1, hi, a1h);
        let v2 = vec4<f32>(x[x2 + k]);
        a2l = fma(v2, lo, a2l);
        a2h = fma(v2, hi, a2h);
        let v3 = vec4<f32>(x[x3 + k]);
        a3l = fma(v3, lo, a3l);
        a3h = fma(v3, hi, a3h);
        let v4 = vec4<f32>(x[x4 + k]);
        a4l = fma(v4, lo, a4l);
        a4h = fma(v4, hi, a4h);
        let v5 = vec4<f32>(x[x5 + k]);
        a5l = fma(v5, lo, a5l);
        a5h = fma(v5, hi, a5h);
        let v6 = vec4<f32>(x[x6 + k]);
        a6l = fma(v6, lo, a6l);
        a6h = fma(v6, hi, a6h);
        let v7 = vec4<f32>(x[x7 + k]);
        a7l = fma(v7, lo, a7l);
        a7h = fma(v7, hi, a7h);
    }
    store_row(row0 + 0u, unit0, a0l, a0h);
    store_row(row0 + 1u, unit0, a1l, a1h);
    store_row(row0 + 2u, unit0, a2l, a2h);
    store_row(row0 + 3u, unit0, a3l, a3h);
    store_row(row0 + 4u, unit0, a4l, a4h);
    store_row(row0 + 5u, unit0, a5l, a5h);
    store_row(row0 + 6u, unit0, a6l, a6h);
    store_row(row0 + 7u, unit0, a7l, a7h);
}
