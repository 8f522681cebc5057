// lamb_moments: pass 1 of a LAMB step (optax.lamb), per tensor (CPU twin: the
// first loop of optim::lamb_step, operation by operation):
//   m ← (1 − β1)·g + β1·m;  v ← (1 − β2)·(g·g) + β2·v
//   r = (m / bc1) / (√(v / bc2) + ε) + λ·p   (λ = 0 for a tensor that does not decay)
// and the tensor's norms ‖p‖ and ‖r‖ (sums of squares in f32: a stride-256 slice
// per invocation, then a tree reduction; the CPU sums sequentially). lamb_step
// turns them into the trust ratio. The per-step scalars are read at
// scalars[step], step = flags[1].
//
// Bindings (group 0):
//   0 exp_avg     (P)            read_write   m
//   1 exp_avg_sq  (P)            read_write   v
//   2 lamb_norms  (2·n_tensors)  read_write   [2t] ‖p‖, [2t + 1] ‖r‖ of tensor t
//   3 flags       (4)            read_write   [1] step (only read)
//   4 params      (P)            read
//   5 grads       (P)            read
//   6 scalars     (steps)        read         StepScalars of each step of the submit
//   7 tensors     (n_tensors)    read         TensorRange {offset, len, decays} of each tensor
//   8 p           Params         uniform
// Dispatch: (n_tensors, 1, 1); workgroup 256; workgroup t handles tensor t.

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

@group(0) @binding(0) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(1) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(2) var<storage, read_write> lamb_norms: array<f32>;
@group(0) @binding(3) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(4) var<storage, read> params: array<f32>;
@group(0) @binding(5) var<storage, read> grads: array<f32>;
@group(0) @binding(6) var<storage, read> scalars: array<StepScalars>;
@group(0) @binding(7) var<storage, read> tensors: array<TensorRange>;
@group(0) @binding(8) var<uniform> p: Params;

const WG: u32 = 256u;

var<workgroup> param_sq: array<f32, 256>;
var<workgroup> update_sq: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = wid.x;
    if (wid.x >= p.n_tensors) {
        return; // uniform across the workgroup
    }
    let range = tensors[t];
    // λ of the tensor's parameter group: 0 where it does not decay.
    let weight_decay = select(0.0, p.weight_decay, range.decays == 1u);
    // After a NaN/Inf earlier in this submit (flags[0] set by forward or
    // backward), leave parameters and optimizer state at the last good step.
    // Writes are skipped rather than returning early: the barriers below
    // must stay in uniform control flow.
    let skip = atomicLoad(&flags[0]) != 0xFFFFFFFFu;
    let step = atomicLoad(&flags[1]);
    let s = scalars[step];
    var psq = 0.0;
    var rsq = 0.0;
    for (var j = lid.x; j < range.len; j += WG) {
        let i = range.offset + j;
        let g = grads[i];
        let m = p.one_minus_beta1 * g + p.beta1 * exp_avg[i];
        let v = p.one_minus_beta2 * (g * g) + p.beta2 * exp_avg_sq[i];
        if (!skip) {
            exp_avg[i] = m;
            exp_avg_sq[i] = v;
        }
        let w = params[i];
        let m_hat = m / s.bias_correction1;
        let v_hat = v / s.bias_correction2;
        let r = m_hat / (sqrt(v_hat) + p.eps) + weight_decay * w;
        psq += w * w;
        rsq += r * r;
    }
    param_sq[lid.x] = psq;
    update_sq[lid.x] = rsq;
    workgroupBarrier();
    for (var h = WG / 2u; h > 0u; h >>= 1u) {
        if (lid.x < h) {
            param_sq[lid.x] = param_sq[lid.x] + param_sq[lid.x + h];
            update_sq[lid.x] = update_sq[lid.x] + update_sq[lid.x + h];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        lamb_norms[2u * t] = sqrt(param_sq[0]);
        lamb_norms[2u * t + 1u] = sqrt(update_sq[0]);
    }
}
