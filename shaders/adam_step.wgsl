// adam_step: one torch.optim.Adam / AdamW step over the flat parameters (CPU twin:
// optim::adam_step, operation by operation):
//   AdamW: p ← p·(1 − lr·λ)       Adam: g ← g + λ·p (if λ ≠ 0)   (where the tensor decays)
//   m ← lerp(m, g, 1 − β1)        (torch's lerp: a + w·(b − a) for w < ½, else b − (b − a)·(1 − w))
//   v ← v·β2 + ((1 − β2)·g)·g
//   p ← p + ((−lr/bc1)·m) / (√v / √bc2 + ε);  updates ← p_new − p_old
// (statistics only: a compiler may fold (p + x) − p into x, the step before p_new's
// rounding, which is within an ulp of p_new of the difference)
// The per-step scalars are read at scalars[step], step = flags[1]. A non-finite
// new parameter records (step << 16) | (4 << 8) | layer in flags[0] (atomicMin),
// layer = the first l with index < layer_ends[l].
//
// Bindings (group 0):
//   0 params      (P)      read_write
//   1 exp_avg     (P)      read_write   m
//   2 exp_avg_sq  (P)      read_write   v
//   3 updates     (P)      read_write   p_new − p_old
//   4 flags       (4)      read_write   [0] first non-finite code, [1] step
//   5 grads       (P)      read
//   6 scalars     (steps)  read         StepScalars of each step of the submit
//   7 tensors     (n)      read         TensorRange {offset, len, decays}, read where decay_tensors > 0
//   8 p           Params   uniform
// Dispatch: elementwise_grid(count); workgroup 256, one parameter per invocation.

struct StepScalars {
    neg_lr: f32,
    neg_step_size: f32,
    bias_correction2_sqrt: f32,
    decay: f32,
    bias_correction1: f32,
    bias_correction2: f32,
    first_step: u32,
    _pad: u32,
}

struct TensorRange {
    offset: u32,
    len: u32,
    decays: u32, // 1 where the tensor takes weight decay (its torch parameter group's)
    _pad: u32,
}

struct Params {
    count: u32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    eps: f32,
    weight_decay: f32,
    decoupled: u32, // 1 AdamW, 0 Adam
    n_layers: u32,
    layer_ends: array<vec4<u32>, 4>, // layer l ends (exclusive) at [l / 4][l % 4]
    decay_tensors: u32, // 0: every parameter decays; else the tensors in the table (decay groups)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> params: array<f32>;
@group(0) @binding(1) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(2) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(3) var<storage, read_write> updates: array<f32>;
@group(0) @binding(4) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(5) var<storage, read> grads: array<f32>;
@group(0) @binding(6) var<storage, read> scalars: array<StepScalars>;
@group(0) @binding(7) var<storage, read> tensors: array<TensorRange>;
@group(0) @binding(8) var<uniform> p: Params;

const PHASE_OPTIMIZER: u32 = 4u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// Whether parameter i takes weight decay: every one where decay_tensors is 0,
// else its tensor's flag in the table, found by bisection (the table lists the
// tensors in the flat buffer's order; the tensor of i is the last one starting
// at or before i, which skips empty tensors).
fn decays(i: u32) -> bool {
    if (p.decay_tensors == 0u) {
        return true;
    }
    var lo = 0u;
    var hi = p.decay_tensors;
    while (hi - lo > 1u) {
        let mid = (lo + hi) / 2u;
        if (tensors[mid].offset <= i) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return tensors[lo].decays == 1u;
}

fn layer_of(i: u32) -> u32 {
    for (var l = 0u; l < p.n_layers; l++) {
        if (i < p.layer_ends[l / 4u][l % 4u]) {
            return l;
        }
    }
    return max(p.n_layers, 1u) - 1u;
}

fn lerp(a: f32, b: f32, w: f32) -> f32 {
    if (w < 0.5) {
        return a + w * (b - a);
    }
    return b - (b - a) * (1.0 - w);
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= p.count) {
        return;
    }
    // After a NaN/Inf earlier in this submit (flags[0] set by forward,
    // backward, or an earlier step), leave parameters and optimizer state at
    // the last good step. A code this very dispatch recorded (this step's
    // optimizer phase, possibly from another workgroup that ran first) does
    // not stop the update: every element is updated, and the first bad
    // layer is still the one reported.
    let step = atomicLoad(&flags[1]);
    let first = atomicLoad(&flags[0]);
    if (first != 0xFFFFFFFFu && (first >> 8u) != ((step << 8u) | PHASE_OPTIMIZER)) {
        return;
    }
    let s = scalars[step];
    let p_old = params[i];
    var q = p_old;
    var g = grads[i];
    if (decays(i)) {
        if (p.decoupled == 1u) {
            q = q * s.decay;
        } else if (p.weight_decay != 0.0) {
            g += p.weight_decay * q;
        }
    }
    let m = lerp(exp_avg[i], g, p.one_minus_beta1);
    let v = exp_avg_sq[i] * p.beta2 + p.one_minus_beta2 * g * g;
    let denom = sqrt(v) / s.bias_correction2_sqrt + p.eps;
    let p_new = q + s.neg_step_size * m / denom;
    params[i] = p_new;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    updates[i] = p_new - p_old;
    if (!is_finite(p_new)) {
        atomicMin(&flags[0], (step << 16u) | (PHASE_OPTIMIZER << 8u) | layer_of(i));
    }
}
