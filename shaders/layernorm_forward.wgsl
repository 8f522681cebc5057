// layernorm_forward: per row of C, y = (x − μ)·r·w + b with μ the row's mean,
// r = 1/√(σ² + 1e-5) and σ² its biased variance (PyTorch's nn.LayerNorm; CPU
// twin: model::gpt::ops::layernorm_forward), keeping μ and r for backward.
// Two passes over the row as the twin (the mean, then Σ(x − μ)²), each summed
// by 64 invocations and a tree in workgroup memory: a different order of the
// same additions (gpu_gpt.rs states the tolerance).
//
// Bindings (group 0):
//   0 out    (rows, C)  read_write
//   1 mean   (rows)     read_write
//   2 rstd   (rows)     read_write
//   3 inp    (rows, C)  read
//   4 params (P)        read         flat parameters: w at weight_offset, b at bias_offset
//   5 p      Params     uniform
// Dispatch: (rows, 1, 1) up to 65535 rows, then rows in y; one workgroup of 64 per row.

struct Params {
    rows: u32,
    c: u32,
    weight_offset: u32,
    bias_offset: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> mean: array<f32>;
@group(0) @binding(2) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> inp: array<f32>;
@group(0) @binding(4) var<storage, read> params: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 64u;
var<workgroup> partial: array<f32, 64>;

// The sum of every invocation's `v` over the workgroup, in each invocation.
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.y * nwg.x + wid.x;
    // Every invocation reaches every barrier: a row past the end sums zeros.
    let live = row < p.rows;
    let base = row * p.c;
    var acc = 0.0;
    if (live) {
        for (var i = lid.x; i < p.c; i += WG) {
            acc += inp[base + i];
        }
    }
    let m = workgroup_sum(lid.x, acc) / f32(p.c);
    acc = 0.0;
    if (live) {
        for (var i = lid.x; i < p.c; i += WG) {
            let d = inp[base + i] - m;
            acc += d * d;
        }
    }
    let v = workgroup_sum(lid.x, acc) / f32(p.c);
    let s = 1.0 / sqrt(v + 1e-5);
    if (!live) {
        return;
    }
    for (var i = lid.x; i < p.c; i += WG) {
        out[base + i] = (inp[base + i] - m) * s * params[p.weight_offset + i] + params[p.bias_offset + i];
    }
    if (lid.x == 0u) {
        mean[row] = m;
        rstd[row] = s;
    }
}
