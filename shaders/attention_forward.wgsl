// attention_forward: causal self-attention, unfused, keeping the probabilities
// (F.scaled_dot_product_attention(q, k, v, is_causal=True); CPU twin:
// model::gpt::ops::attention_forward). For each window b, head h and query t:
// s[t2] = q_t·k_t2/√hs for t2 ≤ t, P[t2] = softmax(s) (the max, exp(s − max)
// summed, each divided by the sum), P[t2] = 0 above the diagonal, and
// y_t = Σ_t2 P[t2]·v_t2. Each score and each output is summed in the twin's
// order (i = 0..hs, t2 = 0..t); exp is WGSL's, not libm's (gpu_gpt.rs states
// the tolerance).
//
// Bindings (group 0):
//   0 out (B·T, C)      read_write   the heads side by side
//   1 att (B, H, T, T)  read_write   the probabilities
//   2 inp (B·T, 3C)     read         q, k, v side by side
//   3 p   Params        uniform
// Dispatch: (B·H·T) workgroups, 2-D past 65535 (row_grid); 64 invocations
// each, for one query row. T ≤ 1024 (the row's scores in workgroup memory).

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

const WG: u32 = 64u;
const MAX_T: u32 = 1024u;
var<workgroup> row: array<f32, 1024>;
var<workgroup> partial: array<f32, 64>;

fn reduce_max(lid: u32, v: f32) -> f32 {
    partial[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] = max(partial[lid], partial[lid + s]);
        }
        workgroupBarrier();
    }
    let m = partial[0];
    workgroupBarrier();
    return m;
}

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
    let q = (bi * p.t + t) * c3 + head * hs;
    // Scores up to the diagonal, and their max.
    var m = -3.0e38;
    if (live) {
        for (var t2 = lid.x; t2 <= t; t2 += WG) {
            let k = (bi * p.t + t2) * c3 + p.c + head * hs;
            var s = 0.0;
            for (var i = 0u; i < hs; i++) {
                s += inp[q + i] * inp[k + i];
            }
            s *= scale;
            row[t2] = s;
            m = max(m, s);
        }
    }
    m = reduce_max(lid.x, m);
    // exp(s − max), summed left to right by one invocation as the twin does.
    if (live) {
        for (var t2 = lid.x; t2 <= t; t2 += WG) {
            row[t2] = exp(row[t2] - m);
        }
    }
    workgroupBarrier();
    if (lid.x == 0u && live) {
        var sum = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            sum += row[t2];
        }
        partial[0] = sum;
    }
    workgroupBarrier();
    let sum = partial[0];
    if (!live) {
        return;
    }
    let a = (index) * p.t; // att row (bi, head, t)
    for (var t2 = lid.x; t2 < p.t; t2 += WG) {
        var v = 0.0;
        if (t2 <= t) {
            v = row[t2] / sum;
        }
        att[a + t2] = v;
        row[t2] = v;
    }
    workgroupBarrier();
    // y_t = Σ_t2 P[t2]·v_t2, each of the head's hs outputs by one invocation.
    for (var i = lid.x; i < hs; i += WG) {
        var y = 0.0;
        for (var t2 = 0u; t2 <= t; t2++) {
            y += row[t2] * inp[(bi * p.t + t2) * c3 + 2u * p.c + head * hs + i];
        }
        out[(bi * p.t + t) * p.c + head * hs + i] = y;
    }
}
