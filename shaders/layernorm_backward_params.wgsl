// layernorm_backward_params: per feature i, ∂L/∂w_i += Σ_rows n·∂L/∂y and
// ∂L/∂b_i += Σ_rows ∂L/∂y, n = (x − μ)·r (CPU twin: the dγ, dβ part of
// model::gpt::ops::layernorm_backward). WGSL has no f32 atomics: each
// feature's sums are one workgroup's, 64 invocations striding the rows and a
// tree (another order of the twin's additions; gpu_gpt.rs states the tolerance).
//
// Bindings (group 0):
//   0 grads   (P)        read_write   flat gradients: dw at weight_offset, db at
//                                     bias_offset, accumulated into
//   1 dout    (rows, C)  read
//   2 inp     (rows, C)  read
//   3 mean    (rows)     read
//   4 rstd    (rows)     read
//   5 p       Params     uniform
// Dispatch: (C, 1, 1); one workgroup of 64 per feature.

struct Params {
    rows: u32,
    c: u32,
    weight_offset: u32,
    bias_offset: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> rstd: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 64u;
var<workgroup> partial: array<vec2<f32>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = wid.x;
    var acc = vec2<f32>(0.0, 0.0);
    if (i < p.c) {
        for (var r = lid.x; r < p.rows; r += WG) {
            let dy = dout[r * p.c + i];
            let n = (inp[r * p.c + i] - mean[r]) * rstd[r]; // the twin's order: n, then n·dy
            acc += vec2<f32>(n * dy, dy);
        }
    }
    partial[lid.x] = acc;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid.x < k) {
            partial[lid.x] += partial[lid.x + k];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u && i < p.c) {
        let w = p.weight_offset + i;
        let b = p.bias_offset + i;
        grads[w] = grads[w] + partial[0].x;
        grads[b] = grads[b] + partial[0].y;
    }
}
