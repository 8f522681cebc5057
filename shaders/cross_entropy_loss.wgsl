// cross_entropy_loss: a micro-batch's mean cross-entropy and z-loss from the
// rows cross_entropy_forward_backward stored, ADDED to this step's sums in
// `stats` (CPU twin: the sums of model::gpt::ops::cross_entropy_forward, over
// the rows in order, each divided by the rows once). Records a non-finite mean
// in `flags` as the loss phase of `order`.
//   stats[step·4 + 0] += (Σ_r ce_r)/rows      (the reported loss)
//   stats[step·4 + 3] += (Σ_r lse_r²)/rows    (the z-loss, mean(logsumexp²))
//
// Bindings (group 0):
//   0 stats  (4·steps)  read_write
//   1 flags  (4)        read_write   [0] first non-finite code, [1] step
//   2 losses (rows, 2)  read         ce_r, lse_r
//   3 p      Params     uniform
// Dispatch: (1, 1, 1); one invocation, the twin's order (rows adds, a few
// microseconds for the thousands of positions a step has).

struct Params {
    rows: u32,
    order: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> stats: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> losses: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const PHASE_LOSS: u32 = 2u;
const STATS_STRIDE: u32 = 4u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(1)
fn main() {
    var ce = 0.0;
    var z = 0.0;
    for (var r = 0u; r < p.rows; r++) {
        ce += losses[2u * r];
        let l = losses[2u * r + 1u];
        z += l * l;
    }
    let n = f32(p.rows);
    let step = atomicLoad(&flags[1]);
    stats[step * STATS_STRIDE] += ce / n;
    stats[step * STATS_STRIDE + 3u] += z / n;
    if (!is_finite(ce) || !is_finite(z)) {
        atomicMin(&flags[0], (step << 16u) | (PHASE_LOSS << 8u) | p.order);
    }
}
