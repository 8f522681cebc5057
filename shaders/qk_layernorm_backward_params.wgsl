// qk_layernorm_backward_params: the q and k LayerNorms' dγ and dβ (CPU twin:
// the dγ, dβ part of model::gpt::ops::layernorm_backward over each segment, as
// Gpt's attention backward runs it): for each feature e of the head width,
// dγ_q[e] += Σ n·∂L/∂y and dβ_q[e] += Σ ∂L/∂y over every q segment, rows then
// heads in order (and k's over every k segment). Each of the 2·hs features is
// one invocation's walking its segments in the twin's order (no atomics): the
// twin's sums, added onto the gradients already there.
//
// Bindings (group 0):
//   0 grads  (P)         read_write   flat gradients: the two LayerNorms' dγ, dβ
//   1 dout   (rows, 3C)  read         ∂L/∂(q, k, v)
//   2 inp    (rows, 3C)  read         c_attn's output
//   3 mean   (rows·2H)   read
//   4 rstd   (rows·2H)   read
//   5 p      Params      uniform      as qk_layernorm_forward's
// Dispatch: elementwise_grid(2·hs): one invocation per feature of the two norms.

struct Params {
    rows: u32,
    c: u32,
    h: u32,
    _pad: u32,
    q_weight: u32,
    q_bias: u32,
    k_weight: u32,
    k_bias: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> rstd: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    let hs = p.c / p.h;
    if (i >= 2u * hs) {
        return;
    }
    let is_k = i >= hs;
    let e = i % hs;
    var w = p.q_weight + e;
    var b = p.q_bias + e;
    var first = 0u; // the norm's first segment in a row: q heads 0..H, k heads H..2H
    if (is_k) {
        w = p.k_weight + e;
        b = p.k_bias + e;
        first = p.h;
    }
    var dw = grads[w];
    var db = grads[b];
    for (var r = 0u; r < p.rows; r++) {
        for (var head = 0u; head < p.h; head++) {
            let s = r * 2u * p.h + first + head;
            let k = r * 3u * p.c + (first + head) * hs + e;
            let n = (inp[k] - mean[s]) * rstd[s];
            let dy = dout[k];
            db += dy;
            dw += n * dy;
        }
    }
    grads[w] = dw;
    grads[b] = db;
}
