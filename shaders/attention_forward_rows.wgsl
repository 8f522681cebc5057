// attention_forward_rows: attention_forward with one invocation per query row
// and no workgroup memory or barrier (CPU twin: model::gpt::ops::attention_forward).
// Each invocation takes its row's scores three times (for the max, for Σ exp,
// for P) instead of keeping them, then y = Σ P·v from the P it wrote: every
// sum in the twin's order, so the same values as attention_forward (only exp
// is WGSL's). The engine times both variants on the adapter and keeps the
// faster (gpu::gpt::AttentionVariant): on software adapters, where a barrier
// costs far more than arithmetic, and at short windows this one wins.
//
// Bindings (group 0):
//   0 out (B·T, C)      read_write   the heads side by side
//   1 att (B, H, T, T)  read_write   the probabilities
//   2 inp (B·T, 3C)     read         q, k, v side by side
//   3 p   Params        uniform
// Dispatch: elementwise_grid(B·H·T) with workgroups of 64 (attention_rows_grid).

struct Params {
    b: u32,
    t: u32,
    c: u32,
    h: u32,
}

@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> att: array<f32>;
@group(0) @binding(2) var<storage, read> inp: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

fn score(q: u32, bi: u32, head: u32, t2: u32, hs: u32, scale: f32) -> f32 {
    let k = (bi * p.t + t2) * 3u * p.c + p.c + head * hs;
    var s = 0.0;
    for (var i = 0u; i < hs; i++) {
        s += inp[q + i] * inp[k + i];
    }
    return s * scale;
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
    let q = (bi * p.t + t) * c3 + head * hs;
    var m = -3.0e38;
    for (var t2 = 0u; t2 <= t; t2++) {
        m = max(m, score(q, bi, head, t2, hs, scale));
    }
    var sum = 0.0;
    for (var t2 = 0u; t2 <= t; t2++) {
        sum += exp(score(q, bi, head, t2, hs, scale) - m);
    }
    let a = index * p.t; // att row (bi, head, t)
    for (var t2 = 0u; t2 < p.t; t2++) {
        var v = 0.0;
        if (t2 <= t) {
            v = exp(score(q, bi, head, t2, hs, scale) - m) / sum;
        }
        att[a + t2] = v;
    }
    for (var i = 0u; i < hs; i++) {
        var y = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            y += att[a + t2] * inp[(bi * p.t + t2) * c3 + 2u * p.c + head * hs + i];
        }
        out[(bi * p.t + t) * p.c + head * hs + i] = y;
    }
}
