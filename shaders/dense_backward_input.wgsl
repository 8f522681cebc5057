// dense_backward_input: the gradient with respect to the layer below's pre-activations,
// dx = (dz·W) ⊙ f'(z_in), overwritten (CPU twins: the dx part of model::dense_backward,
// then model::activation_backward of the layer below):
// dx[b, i] = (Σ_o dz[b, o]·W[o, i]) · f'(z_in[b, i]). The activation backward rides in the
// store, so it needs no dispatch of its own; with the linear code f' = 1 and dx is dz·W.
//
// Bindings (group 0):
//   0 dx     (B, I)  read_write   overwritten: ∂L/∂z of the layer below
//   1 dz     (B, O)  read         ∂L/∂z of this layer
//   2 params (P)     read         flat parameters; W (O, I) row-major at weight_offset
//   3 z_in   (B, I)  read         the layer below's pre-activations (its z)
//   4 a_in   (B, I)  read         the layer below's outputs, this layer's x
//   5 p      Params  uniform
// Dispatch: (ceil(I / 64), ceil(B / 64), 1); workgroup 16×16; each invocation computes a
// 4×4 block of outputs (rows lid.y*4.., inputs lid.x*4..). The reduction over the O units
// runs in K-tiles of 16: 64 rows × 16 units of dz and 16 units × 64 inputs of W are staged
// in workgroup memory (coalesced loads), so every loaded value is used 64 times.

struct Params {
    batch: u32,
    inputs: u32,
    units: u32,
    weight_offset: u32,
    activation: u32, // the layer below's (whose outputs x are), as dense_forward's codes
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> dx: array<f32>;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> params: array<f32>;
@group(0) @binding(3) var<storage, read> z_in: array<f32>;
@group(0) @binding(4) var<storage, read> a_in: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const TILE: u32 = 64u;
const KTILE: u32 = 16u;
const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

var<workgroup> tile_dz: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_dz[k * 16 + row / 4][row % 4]
var<workgroup> tile_w: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_w[k * 16 + input / 4][input % 4]

// tanh through exp(−2|v|): finite for every input (a plain tanh may give
// inf/inf = NaN for large |v| on some drivers).
fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

// f'(z) of the activation `kind`, given z and a = f(z) (CPU twin: the
// derivative in model::activation_backward).
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

// Row i of a 4×4 register block, without indexing a local array (which
// could force the accumulators out of registers).
fn pick_row(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    // acc_i[j]: row row0 + lid.y*4 + i, input col0 + lid.x*4 + j
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < p.units; k0 += KTILE) {
        // 1024 values of each tile, 4 per invocation.
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            // dz: 64 rows × 16 units; consecutive invocations read consecutive units.
            let r = idx / KTILE;
            let kd = idx % KTILE;
            let row = row0 + r;
            var dv = 0.0;
            if (row < p.batch && k0 + kd < p.units) {
                dv = dz[row * p.units + k0 + kd];
            }
            tile_dz[kd * 16u + r / 4u][r % 4u] = dv;
            // W: 16 units × 64 inputs; consecutive invocations read consecutive inputs.
            let c = idx % TILE;
            let kw = idx / TILE;
            let col = col0 + c;
            var wv = 0.0;
            if (col < p.inputs && k0 + kw < p.units) {
                wv = params[p.weight_offset + (k0 + kw) * p.inputs + col];
            }
            tile_w[kw * 16u + c / 4u][c % 4u] = wv;
        }
        workgroupBarrier();
        for (var k = 0u; k < KTILE; k++) {
            // One 16-byte load of each tile per k; four vector FMAs.
            let a4 = tile_dz[k * 16u + lid.y];
            let b4 = tile_w[k * 16u + lid.x];
            acc0 = fma(vec4<f32>(a4.x), b4, acc0);
            acc1 = fma(vec4<f32>(a4.y), b4, acc1);
            acc2 = fma(vec4<f32>(a4.z), b4, acc2);
            acc3 = fma(vec4<f32>(a4.w), b4, acc3);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row_acc = pick_row(acc0, acc1, acc2, acc3, i);
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x * 4u + j;
            if (row < p.batch && col < p.inputs) {
                let idx = row * p.inputs + col;
                dx[idx] = row_acc[j] * activation_derivative(z_in[idx], a_in[idx], p.activation);
            }
        }
    }
}
