// qk_layernorm_forward: the q/k LayerNorm of a transformer's attention (CPU
// twin: the q/k part of Gpt's attention op, model::gpt::ops::layernorm_forward
// over each head's q and each head's k, hs wide). Each row of qkv_raw (3C) holds
// 2H segments of hs to normalise (the H heads' q, then their k; the q LayerNorm's
// w and b for the first H, the k LayerNorm's for the rest) and v, copied as it is.
// A segment is one invocation's, summed left to right as the twin: the mean,
// then Σ(x − μ)², then y = (x − μ)·r·w + b; μ and r kept for backward.
//
// Bindings (group 0):
//   0 out    (rows, 3C)     read_write   q, k normalised; v copied
//   1 mean   (rows·2H)      read_write   per segment, s = row·2H + j
//   2 rstd   (rows·2H)      read_write
//   3 inp    (rows, 3C)     read         c_attn's output
//   4 params (P)            read         flat parameters: the two LayerNorms' w, b
//   5 p      Params         uniform
// Dispatch: elementwise_grid(rows·2H + rows·C): the first rows·2H invocations a
// segment each, the rest an element of v each.

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

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> mean: array<f32>;
@group(0) @binding(2) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(3) var<storage, read> inp: array<f32>;
@group(0) @binding(4) var<storage, read> params: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const EPS: f32 = 1e-5;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    let segments = p.rows * 2u * p.h;
    let hs = p.c / p.h;
    if (i >= segments) {
        // v, copied.
        let e = i - segments;
        if (e < p.rows * p.c) {
            let k = (e / p.c) * 3u * p.c + 2u * p.c + e % p.c;
            out[k] = inp[k];
        }
        return;
    }
    let j = i % (2u * p.h);
    let base = (i / (2u * p.h)) * 3u * p.c + j * hs;
    var w = p.q_weight;
    var b = p.q_bias;
    if (j >= p.h) {
        w = p.k_weight;
        b = p.k_bias;
    }
    var sum = 0.0;
    for (var e = 0u; e < hs; e++) {
        sum += inp[base + e];
    }
    let m = sum / f32(hs);
    var sq = 0.0;
    for (var e = 0u; e < hs; e++) {
        let d = inp[base + e] - m;
        sq += d * d;
    }
    let s = 1.0 / sqrt(sq / f32(hs) + EPS);
    for (var e = 0u; e < hs; e++) {
        out[base + e] = (inp[base + e] - m) * s * params[w + e] + params[b + e];
    }
    mean[i] = m;
    rstd[i] = s;
}
