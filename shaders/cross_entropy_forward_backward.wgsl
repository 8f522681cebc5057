// cross_entropy_forward_backward: the transformer's loss over the vocabulary, a
// row (one position) per workgroup, and in the same pass its gradient (CPU
// twins: model::gpt::ops::cross_entropy_forward and cross_entropy_backward).
// With m = max(x), lse = m + log Σ exp(x − m) (summed left to right, as the
// twin) and p = exp(x − lse):
//   the row's cross-entropy lse − x[target] and its lse are stored for
//   cross_entropy_loss, which takes their means in order;
//   ∂/∂x_i [lse − x_target + c·lse²]·scale = (p_i·(1 + 2c·lse) − δ_i,target)·scale,
//   overwritten (the twin adds onto zeros); scale = 1/(rows·k) under k micro-batches.
// A target that is not a token id (past the vocabulary, negative, fractional)
// makes the row's loss NaN, for the sentinel.
//
// Bindings (group 0):
//   0 dlogits (rows, V)  read_write   overwritten
//   1 losses  (rows, 2)  read_write   [r·2] lse − x[target], [r·2 + 1] lse
//   2 logits  (rows, V)  read
//   3 targets (rows)     read         token ids as f32 (the gathered batch)
//   4 p       Params     uniform
// Dispatch: row_grid(rows); 64 invocations a row.

struct Params {
    rows: u32,
    v: u32,
    z_loss: f32,
    scale: f32,
}

@group(0) @binding(0) var<storage, read_write> dlogits: array<f32>;
@group(0) @binding(1) var<storage, read_write> losses: array<f32>;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const WG: u32 = 64u;
var<workgroup> partial: array<f32, 64>;
var<workgroup> lse_shared: f32;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wid.y * nwg.x + wid.x;
    let live = r < p.rows;
    let base = r * p.v;
    // The max: exact in any order.
    var m = -3.0e38; // below every finite logit that matters (Tint refuses −f32::MAX written out)
    if (live) {
        for (var i = lid.x; i < p.v; i += WG) {
            m = max(m, logits[base + i]);
        }
    }
    partial[lid.x] = m;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid.x < s) {
            partial[lid.x] = max(partial[lid.x], partial[lid.x + s]);
        }
        workgroupBarrier();
    }
    if (lid.x == 0u && live) {
        let mx = partial[0];
        var sum = 0.0;
        for (var i = 0u; i < p.v; i++) {
            sum += exp(logits[base + i] - mx);
        }
        let lse = mx + log(sum);
        lse_shared = lse;
        let target_f = targets[r];
        let id = u32(max(target_f, 0.0));
        var ce = lse - logits[base + min(id, p.v - 1u)];
        if (target_f < 0.0 || target_f != f32(id) || id >= p.v) {
            ce = bitcast<f32>(0x7fc00000u | (id & 0u)); // a NaN built at run time
        }
        losses[2u * r] = ce;
        losses[2u * r + 1u] = lse;
    }
    workgroupBarrier();
    if (!live) {
        return;
    }
    let lse = lse_shared;
    let factor = 1.0 + 2.0 * p.z_loss * lse;
    let id = u32(max(targets[r], 0.0));
    for (var i = lid.x; i < p.v; i += WG) {
        let prob = exp(logits[base + i] - lse);
        let hot = select(0.0, 1.0, i == id);
        dlogits[base + i] = (prob * factor - hot) * p.scale;
    }
}
