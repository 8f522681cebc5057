// encoder_forward: x[row] = wte[token[row]] + wpe[row mod T], the token and
// position embeddings of each of the B·T positions (CPU twin:
// model::gpt::ops::encoder_forward; one addition each, the same bits). A token
// id past the vocabulary writes NaN, for the sentinel, where the twin would
// stop on the index.
//
// Bindings (group 0):
//   0 out    (rows, C)  read_write
//   1 tokens (rows)     read         u32 token ids
//   2 wte    (V, C)     read
//   3 wpe    (T, C)     read
//   4 p      Params     uniform
// Dispatch: elementwise_grid(rows·C); workgroup 256, one element per invocation.

struct Params {
    rows: u32,
    t: u32,
    c: u32,
    vocab: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> tokens: array<u32>;
@group(0) @binding(2) var<storage, read> wte: array<f32>;
@group(0) @binding(3) var<storage, read> wpe: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= p.rows * p.c) {
        return;
    }
    let row = i / p.c;
    let ch = i % p.c;
    let token = tokens[row];
    if (token >= p.vocab) {
        // A quiet NaN built at run time: WGSL refuses a NaN constant.
        out[i] = bitcast<f32>(0x7fc00000u | (token & 0u));
        return;
    }
    out[i] = wte[token * p.c + ch] + wpe[(row % p.t) * p.c + ch];
}
