// attention_backward_key: the second half of causal attention's backward, down
// the columns (CPU twin: model::gpt::ops::attention_backward). For each window
// b, head h, key position t2 and element i of the head, with a = P and ∂L/∂s
// as attention_backward_query stored it:
//   ∂L/∂k_t2[i] = Σ_t ∂L/∂s[t, t2]·q_t[i]   (∂L/∂s carries the 1/√hs)
//   ∂L/∂v_t2[i] = Σ_t a[t, t2]·dy_t[i]
// over the queries t ≥ t2 (the twin sums t from 0, where the terms below t2
// are exact zeros), in order from 0, a multiply then an add; both overwritten.
// Each element is one invocation's: no atomics, and the twin's order.
//
// Bindings (group 0):
//   0 dinp (B·T, 3C)     read_write   ∂L/∂k, ∂L/∂v written; ∂L/∂q untouched
//   1 dout (B·T, C)      read         ∂L/∂y
//   2 inp  (B·T, 3C)     read         q, k, v
//   3 att  (B, H, T, T)  read         the probabilities
//   4 ds   (B, H, T, T)  read         ∂L/∂s
//   5 p    Params        uniform
// Dispatch: elementwise_grid(B·T·C); workgroup 256, one (b, t2, h, i) each.

struct Params {
    b: u32,
    t: u32,
    c: u32,
    h: u32,
}

@group(0) @binding(0) var<storage, read_write> dinp: array<f32>;
@group(0) @binding(1) var<storage, read> dout: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<storage, read> att: array<f32>;
@group(0) @binding(4) var<storage, read> ds: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (e >= p.b * p.t * p.c) {
        return;
    }
    // e = (bi·T + t2)·C + head·hs + i: the key's row and the head's column.
    let hs = p.c / p.h;
    let col = e % p.c;
    let head = col / hs;
    let i = col % hs;
    let t2 = (e / p.c) % p.t;
    let bi = e / (p.c * p.t);
    let c3 = 3u * p.c;
    let base = (bi * p.h + head) * p.t * p.t + t2; // att[bi, head, t, t2] = base + t·T
    var dk = 0.0;
    var dv = 0.0;
    for (var t = t2; t < p.t; t++) {
        let r = bi * p.t + t;
        dv += att[base + t * p.t] * dout[r * p.c + col];
        dk += ds[base + t * p.t] * inp[r * c3 + head * hs + i];
    }
    let k = (bi * p.t + t2) * c3 + p.c + col;
    dinp[k] = dk;
    dinp[k + p.c] = dv;
}
