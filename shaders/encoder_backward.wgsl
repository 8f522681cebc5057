// encoder_backward: ∂L/∂wte[v] += Σ over the positions whose token is v of
// ∂L/∂x[row]; ∂L/∂wpe[t] += Σ over the positions at t of ∂L/∂x[row] (CPU
// twin: model::gpt::ops::encoder_backward). WGSL has no f32 atomics: each
// element of wte and wpe is one invocation's, which walks the positions in
// order and adds those that are its own, so every sum is taken in the twin's
// order: the same bits. (It reads every token id once per wte element: V·C·B·T
// reads, fine for a character vocabulary; a large one would sort first.)
//
// Bindings (group 0):
//   0 grads  (P)        read_write   flat gradients: dwte (V, C) at wte_offset, dwpe
//                                    (T, C) at wpe_offset, accumulated into
//   1 dout   (rows, C)  read
//   2 tokens (rows)     read         token ids as f32 (the gathered batch)
//   3 p      Params     uniform
// Dispatch: elementwise_grid(V·C + T·C); workgroup 256: the first V·C
// invocations own wte's elements, the next T·C wpe's.

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

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> tokens: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    let in_wte = p.vocab * p.c;
    if (i < in_wte) {
        let v = i / p.c;
        let ch = i % p.c;
        var acc = grads[p.wte_offset + i];
        for (var row = 0u; row < p.rows; row++) {
            if (tokens[row] == f32(v)) {
                acc += dout[row * p.c + ch];
            }
        }
        grads[p.wte_offset + i] = acc;
        return;
    }
    let j = i - in_wte;
    if (j >= p.t * p.c) {
        return;
    }
    let pos = j / p.c;
    let ch = j % p.c;
    var acc = grads[p.wpe_offset + j];
    for (var row = pos; row < p.rows; row += p.t) {
        acc += dout[row * p.c + ch];
    }
    grads[p.wpe_offset + j] = acc;
}
