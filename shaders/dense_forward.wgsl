// dense_forward: z = x·Wᵀ + b and a = act(z), fused (CPU twins: model::dense_forward
// followed by model::activation_forward). Records the first non-finite pre-activation or output in `flags`.
//
// Bindings (group 0):
//   0 z      (B, O)  read_write   pre-activations, kept for backward
//   1 a      (B, O)  read_write   outputs
//   2 x      (B, I)  read         inputs (the batch, or the previous layer's a)
//   3 params (P)     read         flat parameters; W (O, I) at weight_offset, b (O) at bias_offset
//   4 flags  (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   5 p      Params  uniform
// Dispatch: (ceil(O / 64), ceil(B / 64), 1); workgroup 16×16; each invocation computes a
// 4×4 block of outputs. Tiles of 64 rows × 16 inputs of x and W are staged in workgroup
// memory as vec4s, so every loaded value is used 64 times and each inner step is one
// 16-byte load per tile and four vector FMAs on register accumulators.

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

const TILE: u32 = 64u;
const KTILE: u32 = 16u;
const PHASE_FORWARD: u32 = 1u;

var<workgroup> tile_x: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_x[k * 16 + row / 4][row % 4]
var<workgroup> tile_w: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_w[k * 16 + unit / 4][unit % 4]

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

// Row i of a 4×4 register block, without indexing a local array (which
// could force the accumulators out of registers).
fn pick_row(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row0 = wid.y * TILE;
    let unit0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    // acc_i[j]: row row0 + lid.y*4 + i, unit unit0 + lid.x*4 + j
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < p.inputs; k0 += KTILE) {
        // Stage 64×16 values of x and of W: 1024 each, 4 per invocation.
        // Consecutive invocations read consecutive inputs (coalesced).
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            let r = idx / KTILE;
            let k = idx % KTILE;
            let gk = k0 + k;
            let row = row0 + r;
            var xv = 0.0;
            if (row < p.batch && gk < p.inputs) {
                xv = x[row * p.inputs + gk];
            }
            tile_x[k * 16u + r / 4u][r % 4u] = xv;
            let unit = unit0 + r;
            var wv = 0.0;
            if (unit < p.units && gk < p.inputs) {
                wv = params[p.weight_offset + unit * p.inputs + gk];
            }
            tile_w[k * 16u + r / 4u][r % 4u] = wv;
        }
        workgroupBarrier();
        for (var k = 0u; k < KTILE; k++) {
            // One 16-byte load of each tile per k; four vector FMAs.
            let a4 = tile_x[k * 16u + lid.y];
            let b4 = tile_w[k * 16u + lid.x];
            acc0 = fma(vec4<f32>(a4.x), b4, acc0);
            acc1 = fma(vec4<f32>(a4.y), b4, acc1);
            acc2 = fma(vec4<f32>(a4.z), b4, acc2);
            acc3 = fma(vec4<f32>(a4.w), b4, acc3);
        }
        workgroupBarrier();
    }
    // Epilogue: bias, activation, store, non-finite check.
    for (var i = 0u; i < 4u; i++) {
        let row_acc = pick_row(acc0, acc1, acc2, acc3, i);
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let unit = unit0 + lid.x * 4u + j;
            if (row < p.batch && unit < p.units) {
                let pre = row_acc[j] + bias_of(unit);
                let out = activate(pre, p.activation);
                z[row * p.units + unit] = pre;
                a[row * p.units + unit] = out;
                if (!is_finite(pre) || !is_finite(out)) {
                    let step = atomicLoad(&flags[1]);
                    atomicMin(&flags[0], (step << 16u) | (PHASE_FORWARD << 8u) | p.layer);
                }
            }
        }
    }
}
