// layernorm_backward_input: per row, with n = (x − μ)·r and g = w ⊙ ∂L/∂y,
// ∂L/∂x += r·(g − mean(g) − n·mean(g ⊙ n)) (CPU twin: the ∂L/∂x part of
// model::gpt::ops::layernorm_backward; dγ and dβ are layernorm_backward_params).
// The two means are summed by 64 invocations and a tree: another order of the
// same additions (gpu_gpt.rs states the tolerance).
//
// Bindings (group 0):
//   0 dinp   (rows, C)  read_write   accumulated into (accumulate = 1) or overwritten
//                                    (0: the twin adding onto zeros)
//   1 dout   (rows, C)  read
//   2 inp    (rows, C)  read
//   3 params (P)        read         flat parameters: w at weight_offset
//   4 mean   (rows)     read
//   5 rstd   (rows)     read
//   6 p      Params     uniform
// Dispatch: (rows, 1, 1) up to 65535 rows, then rows in y; one workgroup of 64 per row.

struct Params {
    rows: u32,
    c: u32,
    weight_offset: u32,
    accumulate: u32,
}

@group(0) @binding(0) var<storage, read_write> dinp: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<f32>;
@group(0) @binding(4) var<storage, read> mean: array<f32>;
@group(0) @binding(5) var<storage, read> rstd: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const WG: u32 = 64u;
var<workgroup> partial: array<vec2<f32>, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    let live = row < p.rows;
    let base = row * p.c;
    var m = 0.0;
    var s = 0.0;
    if (live) {
        m = mean[row];
        s = rstd[row];
    }
    // Σ g and Σ g·n in one pass.
    var acc = vec2<f32>(0.0, 0.0);
    if (live) {
        for (var i = lid.x; i < p.c; i += WG) {
            let g = params[p.weight_offset + i] * dout[base + i];
            acc += vec2<f32>(g, g * (inp[base + i] - m) * s);
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
    let means = partial[0] / f32(p.c);
    if (!live) {
        return;
    }
    for (var i = lid.x; i < p.c; i += WG) {
        let n = (inp[base + i] - m) * s;
        let g = params[p.weight_offset + i] * dout[base + i];
        var before = 0.0;
        if (p.accumulate != 0u) {
            before = dinp[base + i];
        }
        dinp[base + i] = before + (g - means.x - n * means.y) * s;
    }
}
