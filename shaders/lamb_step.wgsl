// lamb_step: pass 2 of a LAMB step (optax.lamb), per tensor (CPU twin: the trust
// ratio and second loop of optim::lamb_step):
//   ratio = ‖p‖ / ‖r‖, or 1 where either norm is 0   (norms from lamb_moments)
//   r = (m / bc1) / (√(v / bc2) + ε) + λ·p           (recomputed, as the twin)
//   (λ = 0 for a tensor that does not decay)
//   p ← p + (−lr)·(r·ratio);  updates ← p_new − p_old
// (statistics only: a compiler may fold (p + x) − p into x, the step before p_new's
// rounding, which is within an ulp of p_new of the difference)
// The per-step scalars are read at scalars[step], step = flags[1]. A non-finite
// new parameter records (step << 16) | (4 << 8) | layer in flags[0] (atomicMin),
// layer = t / 2 (tensors alternate weight, bias per layer).
//
// Bindings (group 0):
//   0 params      (P)            read_write
//   1 updates     (P)            read_write   p_new − p_old
//   2 flags       (4)            read_write   [0] first non-finite code, [1] step
//   3 exp_avg     (P)            read         m (already updated by lamb_moments)
//   4 exp_avg_sq  (P)            read         v (already updated by lamb_moments)
//   5 lamb_norms  (2·n_tensors)  read         [2t] ‖p‖, [2t + 1] ‖r‖
//   6 scalars     (steps)        read         StepScalars of each step of the submit
//   7 tensors     (n_tensors)    read         TensorRange {offset, len, decays} of each tensor
//   8 p           Params         uniform
// Dispatch: (n_tensors, 1, 1); workgroup 256; workgroup t walks tensor t with stride 256.

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
    n_tensors: u32,
    beta1: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    eps: f32,
    weight_decay: f32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> params: array<f32>;
@group(0) @binding(1) var<storage, read_write> updates: array<f32>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(3) var<storage, read> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read> exp_avg_sq: array<f32>;
@group(0) @binding(5) var<storage, read> lamb_norms: array<f32>;
@group(0) @binding(6) var<storage, read> scalars: array<StepScalars>;
@group(0) @binding(7) var<storage, read> tensors: array<TensorRange>;
@group(0) @binding(8) var<uniform> p: Params;

const WG: u32 = 256u;
const PHASE_OPTIMIZER: u32 = 4u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = wid.x;
    if (wid.x >= p.n_tensors) {
        return;
    }
    let range = tensors[t];
    // λ of the tensor's parameter group: 0 where it does not decay.
    let weight_decay = select(0.0, p.weight_decay, range.decays == 1u);
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
    let param_norm = lamb_norms[2u * t];
    let update_norm = lamb_norms[2u * t + 1u];
    var ratio = 1.0;
    if (!(param_norm == 0.0 || update_norm == 0.0)) {
        ratio = param_norm / update_norm;
    }
    for (var j = lid.x; j < range.len; j += WG) {
        let i = range.offset + j;
        let p_old = params[i];
        let m_hat = exp_avg[i] / s.bias_correction1;
        let v_hat = exp_avg_sq[i] / s.bias_correction2;
        let r = m_hat / (sqrt(v_hat) + p.eps) + weight_decay * p_old;
        let p_new = p_old + s.neg_lr * (r * ratio);
        params[i] = p_new;
        updates[i] = p_new - p_old;
        if (!is_finite(p_new)) {
            atomicMin(&flags[0], (step << 16u) | (PHASE_OPTIMIZER << 8u) | (t / 2u));
        }
    }
}
