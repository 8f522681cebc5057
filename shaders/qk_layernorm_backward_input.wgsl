// qk_layernorm_backward_input: ∂L/∂(c_attn's output) through the q/k LayerNorm
// (CPU twin: the ∂L/∂x part of model::gpt::ops::layernorm_backward over each
// segment, as Gpt's attention backward runs it): per q or k segment, with
// n = (x − μ)·r and g = w ⊙ ∂L/∂y, ∂L/∂x = r·(g − mean g − n·mean(g ⊙ n)),
// overwritten (the twin adds onto zeros); v's gradient passes through, copied.
// A segment is one invocation's, its two means summed left to right as the twin.
//
// Bindings (group 0):
//   0 dinp   (rows, 3C)  read_write   overwritten
//   1 dout   (rows, 3C)  read         ∂L/∂(q, k, v) from attention's backward
//   2 inp    (rows, 3C)  read         c_attn's output
//   3 params (P)         read         flat parameters: the two LayerNorms' w
//   4 mean   (rows·2H)   read
//   5 rstd   (rows·2H)   read
//   6 p      Params      uniform      as qk_layernorm_forward's
// Dispatch: elementwise_grid(rows·2H + rows·C), as qk_layernorm_forward.

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

@group(0) @binding(0) var<storage, read_write> dinp: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> params: array<f32>;
@group(0) @binding(4) var<storage, read> mean: array<f32>;
@group(0) @binding(5) var<storage, read> rstd: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    let segments = p.rows * 2u * p.h;
    let hs = p.c / p.h;
    if (i >= segments) {
        let e = i - segments;
        if (e < p.rows * p.c) {
            let k = (e / p.c) * 3u * p.c + 2u * p.c + e % p.c;
            dinp[k] = dout[k];
        }
        return;
    }
    let j = i % (2u * p.h);
    let base = (i / (2u * p.h)) * 3u * p.c + j * hs;
    var w = p.q_weight;
    if (j >= p.h) {
        w = p.k_weight;
    }
    let m = mean[i];
    let s = rstd[i];
    var g_mean = 0.0;
    var gn_mean = 0.0;
    for (var e = 0u; e < hs; e++) {
        let g = params[w + e] * dout[base + e];
        g_mean += g;
        gn_mean += g * (inp[base + e] - m) * s;
    }
    g_mean /= f32(hs);
    gn_mean /= f32(hs);
    for (var e = 0u; e < hs; e++) {
        let n = (inp[base + e] - m) * s;
        dinp[base + e] = (params[w + e] * dout[base + e] - g_mean - n * gn_mean) * s;
    }
}
