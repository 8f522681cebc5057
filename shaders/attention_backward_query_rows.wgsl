// attention_backward_query_rows: attention_backward_query with one invocation
// per query row and no workgroup memory or barrier (CPU twin:
// model::gpt::ops::attention_backward). ∂L/∂a[t2] = dy·v_t2 is taken twice
// (for Σ a·∂L/∂a, then for ∂L/∂s) instead of kept; ∂L/∂q from the ∂L/∂s it
// stored: every sum in the twin's order, the same values as
// attention_backward_query. Picked by timing against it
// (gpu::gpt::AttentionVariant).
//
// Bindings (group 0):
//   0 dinp (B·T, 3C)     read_write   ∂L/∂q written; ∂L/∂k, ∂L/∂v untouched
//   1 ds   (B, H, T, T)  read_write   ∂L/∂s
//   2 dout (B·T, C)      read         ∂L/∂y
//   3 inp  (B·T, 3C)     read         q, k, v
//   4 att  (B, H, T, T)  read         the probabilities
//   5 p    Params        uniform
// Dispatch: elementwise_grid(B·H·T) with workgroups of 64 (attention_rows_grid).

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

// ∂L/∂a[t2] = dy·v_t2, summed over the head's i in order.
fn da(y: u32, bi: u32, head: u32, t2: u32, hs: u32) -> f32 {
    let v = (bi * p.t + t2) * 3u * p.c + 2u * p.c + head * hs;
    var s = 0.0;
    for (var i = 0u; i < hs; i++) {
        s += dout[y + i] * inp[v + i];
    }
    return s;
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let index = (wid.y * nwg.x + wid.x) * 64u + lid.x;
    if (index >= p.b * p.h * p.t) {
        return;
    }
    let t = index % p.t;
    let head = (index / p.t) % p.h;
    let bi = index / (p.t * p.h);
    let hs = p.c / p.h;
    let c3 = 3u * p.c;
    let scale = 1.0 / sqrt(f32(hs));
    let a = index * p.t;
    let y = (bi * p.t + t) * p.c + head * hs;
    var w = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) {
        w += att[a + t2] * da(y, bi, head, t2, hs);
    }
    for (var t2 = 0u; t2 < p.t; t2++) {
        var d = 0.0;
        if (t2 <= t) {
            d = att[a + t2] * (da(y, bi, head, t2, hs) - w) * scale;
        }
        ds[a + t2] = d;
    }
    let q = (bi * p.t + t) * c3 + head * hs;
    for (var i = 0u; i < hs; i++) {
        var s = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            s += ds[a + t2] * inp[(bi * p.t + t2) * c3 + p.c + head * hs + i];
        }
        dinp[q + i] = s;
    }
}
