// residual_forward: y += x, the residual adds of a transformer block (CPU twin:
// model::gpt::ops::residual_forward, out = a + b, with out the branch's output
// a; one addition each, the same bits).
//
// Bindings (group 0):
//   0 y (count)  read_write   the branch's output, then the sum
//   1 x (count)  read         the block's stream
//   2 p Params   uniform
// Dispatch: elementwise_grid(count); workgroup 256, one element per invocation.

struct Params {
    count: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i < p.count) {
        y[i] = y[i] + x[i];
    }
}
