// dense_backward_input_blocked: the gradient with respect to the layer below's
// pre-activations, dx = (dz·W) ⊙ f'(z_in), overwritten, without workgroup memory or
// barriers (CPU twins: the dx part of model::dense_backward, then
// model::activation_backward of the layer below; the same sums in the same order as
// dense_backward_input): dx[b, i] = (Σ_o dz[b, o]·W[o, i]) · f'(z_in[b, i]). The training
// plan picks this or dense_backward_input per layer by timing both (gpu::matmul).
//
// Bindings (group 0), as dense_backward_input:
//   0 dx     (B, I)  read_write   overwritten: ∂L/∂z of the layer below
//   1 dz     (B, O)  read         ∂L/∂z of this layer
//   2 params (P)     read         flat parameters; W (O, I) row-major at weight_offset
//   3 z_in   (B, I)  read         the layer below's pre-activations (its z)
//   4 a_in   (B, I)  read         the layer below's outputs, this layer's x
//   5 p      Params  uniform
// Dispatch: (ceil(ceil(B / 8) · ceil(I / 8) / 64), 1, 1); workgroup 64. Invocation g
// computes an 8 × 8 block of dx in registers: rows 8·(g / ceil(I / 8)) + 0..8, inputs
// 8·(g mod ceil(I / 8)) + 0..8; each step of the loop over the units loads 8 values of dz
// and 8 of W and does 64 FMAs. Rows and inputs past the end are clamped for the loads and
// not stored.

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

const BLOCK: u32 = 8u;
const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

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

fn store(idx: u32, v: f32) {
    dx[idx] = v * activation_derivative(z_in[idx], a_in[idx], p.activation);
}

fn store_row(row: u32, col0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (row >= p.batch) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (col0 + j < p.inputs) {
            store(row * p.inputs + col0 + j, lo[j]);
        }
        if (col0 + 4u + j < p.inputs) {
            store(row * p.inputs + col0 + 4u + j, hi[j]);
        }
    }
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let col_blocks = (p.inputs + BLOCK - 1u) / BLOCK;
    let row0 = (gid.x / col_blocks) * BLOCK;
    let col0 = (gid.x % col_blocks) * BLOCK;
    if (row0 >= p.batch) {
        return;
    }
    let last_row = p.batch - 1u;
    let last_col = p.inputs - 1u;
    let d0 = min(row0 + 0u, last_row) * p.units;
    let d1 = min(row0 + 1u, last_row) * p.units;
    let d2 = min(row0 + 2u, last_row) * p.units;
    let d3 = min(row0 + 3u, last_row) * p.units;
    let d4 = min(row0 + 4u, last_row) * p.units;
    let d5 = min(row0 + 5u, last_row) * p.units;
    let d6 = min(row0 + 6u, last_row) * p.units;
    let d7 = min(row0 + 7u, last_row) * p.units;
    let c0 = p.weight_offset + min(col0 + 0u, last_col);
    let c1 = p.weight_offset + min(col0 + 1u, last_col);
    let c2 = p.weight_offset + min(col0 + 2u, last_col);
    let c3 = p.weight_offset + min(col0 + 3u, last_col);
    let c4 = p.weight_offset + min(col0 + 4u, last_col);
    let c5 = p.weight_offset + min(col0 + 5u, last_col);
    let c6 = p.weight_offset + min(col0 + 6u, last_col);
    let c7 = p.weight_offset + min(col0 + 7u, last_col);
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
    for (var o = 0u; o < p.units; o++) {
        let w = o * p.inputs;
        let lo = vec4<f32>(params[c0 + w], params[c1 + w], params[c2 + w], params[c3 + w]);
        let hi = vec4<f32>(params[c4 + w], params[c5 + w], params[c6 + w], params[c7 + w]);
        let v0 = vec4<f32>(dz[d0 + o]);
        a0l = fma(v0, lo, a0l);
        a0h = fma(v0, hi, a0h);
        let v1 = vec4<f32>(dz[d1 + o]);
        a1l = fma(v1, lo, a1l);
        a1h = fma(v1, hi, a1h);
        let v2 = vec4<f32>(dz[d2 + o]);
        a2l = fma(v2, lo, a2l);
        a2h = fma(v2, hi, a2h);
        let v3 = vec4<f32>(dz[d3 + o]);
        a3l = fma(v3, lo, a3l);
        a3h = fma(v3, hi, a3h);
        let v4 = vec4<f32>(dz[d4 + o]);
        a4l = fma(v4, lo, a4l);
        a4h = fma(v4, hi, a4h);
        let v5 = vec4<f32>(dz[d5 + o]);
        a5l = fma(v5, lo, a5l);
        a5h = fma(v5, hi, a5h);
        let v6 = vec4<f32>(dz[d6 + o]);
        a6l = fma(v6, lo, a6l);
        a6h = fma(v6, hi, a6h);
        let v7 = vec4<f32>(dz[d7 + o]);
        a7l = fma(v7, lo, a7l);
        a7h = fma(v7, hi, a7h);
    }
    store_row(row0 + 0u, col0, a0l, a0h);
    store_row(row0 + 1u, col0, a1l, a1h);
    store_row(row0 + 2u, col0, a2l, a2h);
    store_row(row0 + 3u, col0, a3l, a3h);
    store_row(row0 + 4u, col0, a4l, a4h);
    store_row(row0 + 5u, col0, a5l, a5h);
    store_row(row0 + 6u, col0, a6l, a6h);
    store_row(row0 + 7u, col0, a7l, a7h);
}
