// encoder_forward: x[row] = wte[token[row]] + wpe[row mod T], the token and
// position embeddings of each of the B·T positions (CPU twin:
// model::gpt::ops::encoder_forward; one addition each, the same bits). A value
// that is not a token id (past the vocabulary, negative, fractional) writes
// NaN, for the sentinel, where the twin would stop on the index.
//
// Bindings (group 0):
//   0 out    (rows, C)  read_write
//   1 tokens (rows)     read         token ids as f32 (the gathered batch)
//   2 params (P)        read         flat parameters: wte (V, C) at wte_offset, wpe (T, C)
//                                    at wpe_offset
//   3 p      Params     uniform
// Dispatch: elementwise_grid(rows·C); workgroup 256, one element per invocation.

struct Params {
    rows: u32,
    t: u32,
    c: u32,
    vocab: u32,
    wte_offset: u32,
    wpe_offset: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> tokens: array<f32>;
@group(0) @binding(2) var<storage, read> params: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= p.rows * p.c) {
        return;
    }
    let row = i / p.c;
    let ch = i % p.c;
    let id = tokens[row];
    let token = u32(max(id, 0.0));
    if (id < 0.0 || id != f32(token) || token >= p.vocab) {
        // Not a token id: a quiet NaN built at run time (WGSL refuses a NaN constant).
        out[i] = bitcast<f32>(0x7fc00000u | (token & 0u));
        return;
    }
    out[i] = params[p.wte_offset + token * p.c + ch] + params[p.wpe_offset + (row % p.t) * p.c + ch];
}
