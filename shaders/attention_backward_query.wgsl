// attention_backward_query: the first half of causal attention's backward, a
// query row at a time (CPU twin: model::gpt::ops::attention_backward). For each
// window b, head h and query t, with the probabilities a = P[b, h, t] kept by
// forward and ∂L/∂y = dy:
//   ∂L/∂a[t2] = dy·v_t2                               (t2 ≤ t)
//   ∂L/∂s[t2] = a[t2]·(∂L/∂a[t2] − Σ_t3 a[t3]·∂L/∂a[t3])·(1/√hs)
//   ∂L/∂q_t   = Σ_t2 ∂L/∂s[t2]·k_t2                   (overwritten)
// and ∂L/∂s is stored (zero above the diagonal) for attention_backward_key,
// which sums the keys' and values' gradients down the columns. Every sum runs
// in the twin's order (i = 0..hs; t3 and t2 from 0 up) from 0, a multiply then
// an add, so the two differ only where a compiler contracts them into an FMA.
//
// Bindings (group 0):
//   0 dinp (B·T, 3C)     read_write   ∂L/∂q written; ∂L/∂k, ∂L/∂v untouched
//   1 ds   (B, H, T, T)  read_write   ∂L/∂s
//   2 dout (B·T, C)      read         ∂L/∂y, the heads side by side
//   3 inp  (B·T, 3C)     read         q, k, v side by side
//   4 att  (B, H, T, T)  read         the probabilities
//   5 p    Params        uniform
// Dispatch: (B·H·T) workgroups, 2-D past 65535 (row_grid); 64 invocations
// each, for one query row. T ≤ 1024 (the row in workgroup memory).

struct Params {
    b: u32,
    t: u32,
    c: u32,
    h: u32,
}

@group(0) @binding(0) var<storage, read_write> dinp: array<f32>;
@group(0) @binding(1) var<storage, read_write> ds: array<f32>;
@group(0) @binding(2) var<storage, read> dout: array<f32>;
@group(0) @binding(3) var<storage, read> inp: array<f32>;
@group(0) @binding(4) var<storage, read> att: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

const WG: u32 = 64u;
const MAX_T: u32 = 1024u;
var<workgroup> row: array<f32, 1024>;
var<workgroup> weighted: f32;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let index = wid.y * nwg.x + wid.x;
    let live = index < p.b * p.h * p.t && p.t <= MAX_T;
    let t = index % p.t;
    let head = (index / p.t) % p.h;
    let bi = index / (p.t * p.h);
    let hs = p.c / p.h;
    let c3 = 3u * p.c;
    let scale = 1.0 / sqrt(f32(hs));
    let a = index * p.t; // the row (bi, head, t) of att and ds
    let y = (bi * p.t + t) * p.c + head * hs;
    // ∂L/∂a[t2] = dy·v_t2 up to the diagonal.
    if (live) {
        for (var t2 = lid.x; t2 <= t; t2 += WG) {
            let v = (bi * p.t + t2) * c3 + 2u * p.c + head * hs;
            var s = 0.0;
            for (var i = 0u; i < hs; i++) {
                s += dout[y + i] * inp[v + i];
            }
            row[t2] = s;
        }
    }
    workgroupBarrier();
    // Σ a·∂L/∂a, left to right by one invocation as the twin does.
    if (lid.x == 0u && live) {
        var w = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            w += att[a + t2] * row[t2];
        }
        weighted = w;
    }
    workgroupBarrier();
    let w = weighted;
    if (!live) {
        return;
    }
    for (var t2 = lid.x; t2 < p.t; t2 += WG) {
        var d = 0.0;
        if (t2 <= t) {
            d = att[a + t2] * (row[t2] - w) * scale;
            row[t2] = d;
        }
        ds[a + t2] = d;
    }
    workgroupBarrier();
    // ∂L/∂q_t = Σ_t2 ∂L/∂s[t2]·k_t2, each of the head's hs by one invocation.
    let q = (bi * p.t + t) * c3 + head * hs;
    for (var i = lid.x; i < hs; i += WG) {
        var s = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            s += row[t2] * inp[(bi * p.t + t2) * c3 + p.c + head * hs + i];
        }
        dinp[q + i] = s;
    }
}
