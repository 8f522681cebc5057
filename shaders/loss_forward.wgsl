// loss_forward: the mean loss of one micro-batch (CPU twin: model::loss_forward), ADDED to
// this step's loss sum in `stats`. Records a non-finite mean in `flags`.
//   mse:            (1/(B·O)) Σ (y − t)²
//   bce_with_logits: (1/(B·O)) Σ max(y, 0) − y·t + log(1 + e^(−|y|))
//   cross_entropy:  (1/B) Σ_rows logsumexp(row) − row[class]
//
// Bindings (group 0):
//   0 stats   (4·steps)  read_write   [step*4 + 0] += mean loss, step = flags[1]
//   1 flags   (4)        read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 y       (B, O)     read         last layer's outputs (logits for bce / cross_entropy)
//   3 targets (B, T)     read         T = target_width: O for mse and bce, 1 (class index
//                                     as f32) for cross_entropy
//   4 p       Params     uniform
// Dispatch: (1, 1, 1); one workgroup of 256 invocations. Each sums a strided share of the
// elements (mse, bce) or rows (cross_entropy, each row summed in order as the CPU), then a
// tree reduction in workgroup memory; invocation 0 divides and adds.

struct Params {
    batch: u32,
    outputs: u32,
    loss: u32, // 0 mse, 1 bce_with_logits, 2 cross_entropy
    target_width: u32,
    layer: u32, // unused: a loss code's order is 0
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> stats: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const WG: u32 = 256u;
const PHASE_LOSS: u32 = 2u;
const STATS_STRIDE: u32 = 4u;

var<workgroup> partial: array<f32, 256>;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// log(1 + v) for v in [0, 1], accurate for small v (Goldberg's trick: the
// rounding of 1 + v is compensated by v / (u − 1)).
fn log1p(v: f32) -> f32 {
    let u = 1.0 + v;
    if (u == 1.0) {
        return v;
    }
    return log(u) * v / (u - 1.0);
}

// logsumexp(row) − row[class] for one row, summed in order as the CPU.
fn cross_entropy_row(row: u32) -> f32 {
    let base = row * p.outputs;
    var m = y[base];
    for (var o = 1u; o < p.outputs; o++) {
        m = max(m, y[base + o]);
    }
    var s = 0.0;
    for (var o = 0u; o < p.outputs; o++) {
        s += exp(y[base + o] - m);
    }
    let cls = min(u32(targets[row * p.target_width]), p.outputs - 1u);
    return m + log(s) - y[base + cls];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    var acc = 0.0;
    if (p.loss == 2u) {
        for (var r = lid.x; r < p.batch; r += WG) {
            acc += cross_entropy_row(r);
        }
    } else {
        let n = p.batch * p.outputs;
        for (var k = lid.x; k < n; k += WG) {
            let yv = y[k];
            let tv = targets[k];
            if (p.loss == 1u) {
                acc += max(yv, 0.0) - yv * tv + log1p(exp(-abs(yv)));
            } else {
                let d = yv - tv;
                acc += d * d;
            }
        }
    }
    partial[lid.x] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid.x < s) {
            partial[lid.x] += partial[lid.x + s];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        var count = p.batch * p.outputs;
        if (p.loss == 2u) {
            count = p.batch;
        }
        let mean = partial[0] / f32(count);
        let step = atomicLoad(&flags[1]);
        stats[step * STATS_STRIDE] += mean;
        if (!is_finite(mean)) {
            atomicMin(&flags[0], (step << 16u) | (PHASE_LOSS << 8u));
        }
    }
}
