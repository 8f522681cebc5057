// train_step_fused: K whole training steps in one dispatch of one workgroup (CPU twin:
// engine::CpuEngine::step, K times). For small networks, where the ~20 dispatches of a
// phased step cost more in launches and barriers than in arithmetic. Each phase is a
// strided loop of the workgroup's WG invocations (64, or 4) over its outputs, and phases are
// separated by barriers:
//   zero grads → per micro-batch: gather rows, dense forward per layer (z, a), loss (its
//   mean added to stats), loss gradient times the last activation's derivative (dz), per
//   layer from the top: dW and db (sums over the batch in row order, the bias as an input
//   column of ones, so both in one pass) and dz of the layer below (Σ_o dz·W times that
//   layer's activation derivative, fused) → regularization → per-tensor gradient norms,
//   the global norm and clipping → the optimizer (SGD or Adam/AdamW) → the next step.
// Element by element these are the phased kernels' operations, in the same order, so the
// run agrees with them and with the CPU engine within the same tolerances (only summation
// orders differ: sums over the batch run in row order as on the CPU; a tensor's squared
// norm is the sum of WG strided partial sums).
// The first non-finite value is recorded as in the phased kernels, (step << 16) |
// (phase << 8) | order, and stops every later update of the submit.
//
// Bindings (group 0):
//   0 params        (P)        read_write   flat parameters
//   1 moment1       (P)        read_write   exp_avg (Adam) or momentum_buffer (SGD)
//   2 moment2       (P)        read_write   exp_avg_sq (Adam); unused by SGD
//   3 work          (W)        read_write   u32 words holding f32 bits (exact moves):
//                                           grads (P) | updates (P) | stats (4 per step) |
//                                           flags (4) | x (B, I) | t (B, T) |
//                                           per layer z, a, dz (B, O_l) each
//   4 table_inputs  (N, I)     read         the training table, as u32 bits
//   5 table_targets (N, T)     read
//   6 rows          (K·k·B)    read         row indices of every micro-batch of the submit
//   7 scalars       (K)        read         StepScalars of each step of the submit
//   8 p             Params     uniform      the model and optimizer (built once)
//   9 run           Run        uniform      this submit: steps, zero_grad
// Dispatch: (1, 1, 1); workgroup WG. Eight storage buffers: the WebGPU default limit.

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

struct Layer {
    shape: vec4<u32>, // inputs, units, weight_offset, bias_offset (in params)
    place: vec4<u32>, // activation, z, a, dz (offsets in work)
}

struct Params {
    batch: u32,
    inputs: u32,
    target_width: u32,
    n_layers: u32,
    count: u32,          // P
    loss: u32,           // 0 mse, 1 bce_with_logits, 2 cross_entropy
    micro_batches: u32,  // k
    loss_scale: f32,     // 1 / k
    optimizer: u32,      // 0 SGD, 1 Adam/AdamW
    decoupled: u32,      // 1 AdamW
    use_momentum: u32,
    nesterov: u32,
    momentum: f32,
    one_minus_dampening: f32,
    weight_decay: f32,
    one_minus_beta1: f32,
    beta2: f32,
    one_minus_beta2: f32,
    eps: f32,
    clip_enabled: u32,
    max_norm: f32,
    regularization: u32, // 0 none, 1 l1, 2 l2
    regularization_rate: f32,
    updates_offset: u32,
    stats_offset: u32,
    flags_offset: u32,
    x_offset: u32,
    t_offset: u32,
    layers: array<Layer, 16>,
}

struct Run {
    steps: u32,
    zero_grad: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> params: array<f32>;
@group(0) @binding(1) var<storage, read_write> moment1: array<f32>;
@group(0) @binding(2) var<storage, read_write> moment2: array<f32>;
@group(0) @binding(3) var<storage, read_write> work: array<u32>;
@group(0) @binding(4) var<storage, read> table_inputs: array<u32>;
@group(0) @binding(5) var<storage, read> table_targets: array<u32>;
@group(0) @binding(6) var<storage, read> rows: array<u32>;
@group(0) @binding(7) var<storage, read> scalars: array<StepScalars>;
@group(0) @binding(8) var<uniform> p: Params;
@group(0) @binding(9) var<uniform> run: Run;

// Invocations of the one workgroup: 64, or 4 for the narrow variant (a pipeline
// constant, Kernel::TrainStepFusedNarrow). The calibration times both on the adapter.
override WG: u32 = 64u;
const NONE: u32 = 0xFFFFFFFFu;
const PHASE_FORWARD: u32 = 1u;
const PHASE_LOSS: u32 = 2u;
const PHASE_BACKWARD: u32 = 3u;
const PHASE_OPTIMIZER: u32 = 4u;
const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

// Per tensor t (at most 32: 16 layers × weight, bias), WG (at most 64) partial sums of squares.
var<workgroup> partial: array<f32, 2048>;
var<workgroup> norms: array<f32, 32>;
// The first non-finite code of the submit.
var<workgroup> code: atomic<u32>;

fn ld(i: u32) -> f32 {
    return bitcast<f32>(work[i]);
}

fn st(i: u32, v: f32) {
    work[i] = bitcast<u32>(v);
}

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn record(step: u32, phase: u32, order: u32) {
    atomicMin(&code, (step << 16u) | (phase << 8u) | order);
}

// --- activations (as dense_forward.wgsl and dense_backward_input.wgsl) ------------------

fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

fn activate(v: f32, kind: u32) -> f32 {
    switch kind {
        case 1u: { return max(v, 0.0); }
        case 2u: { return select(LEAKY_SLOPE * v, v, v > 0.0); }
        case 3u: { return tanh_stable(v); }
        case 4u: { return sigmoid(v); }
        case 5u: { return 0.5 * v * (1.0 + tanh_stable(GELU_K * (v + GELU_C * v * v * v))); }
        case 6u: { return v * sigmoid(v); }
        default: { return v; }
    }
}

fn activation_derivative(zv: f32, av: f32, kind: u32) -> f32 {
    switch kind {
        case 1u: { return select(0.0, 1.0, zv > 0.0); }
        case 2u: { return select(LEAKY_SLOPE, 1.0, zv > 0.0); }
        case 3u: { return 1.0 - av * av; }
        case 4u: { return av * (1.0 - av); }
        case 5u: {
            let t = tanh_stable(GELU_K * (zv + GELU_C * zv * zv * zv));
            return 0.5 * (1.0 + t) + 0.5 * zv * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * zv * zv);
        }
        case 6u: {
            let s = sigmoid(zv);
            return s * (1.0 + zv * (1.0 - s));
        }
        default: { return 1.0; }
    }
}

// log(1 + v) for v in [0, 1], accurate for small v (as loss_forward_backward.wgsl).
fn log1p(v: f32) -> f32 {
    if (v < 0.01) {
        return v * (1.0 - v * (0.5 - v * (0.33333334 - v * 0.25)));
    }
    return log(1.0 + v);
}

// --- phases -----------------------------------------------------------------------------

// The layer's input: the micro-batch (layer 0) or the layer below's a.
fn input_of(l: u32) -> u32 {
    if (l == 0u) {
        return p.x_offset;
    }
    return p.layers[l - 1u].place.z;
}

// x[r, c] = table_inputs[rows[m·B + r], c]; t likewise (gather_rows.wgsl).
fn gather(micro: u32, lid: u32) {
    let n_x = p.batch * p.inputs;
    let count = n_x + p.batch * p.target_width;
    for (var index = lid; index < count; index += WG) {
        if (index < n_x) {
            let r = index / p.inputs;
            let row = rows[micro * p.batch + r];
            work[p.x_offset + index] = table_inputs[row * p.inputs + index % p.inputs];
        } else {
            let j = index - n_x;
            let r = j / p.target_width;
            let row = rows[micro * p.batch + r];
            work[p.t_offset + j] = table_targets[row * p.target_width + j % p.target_width];
        }
    }
}

// z = x·Wᵀ + b, a = act(z) (dense_forward.wgsl).
fn forward_layer(l: u32, step: u32, lid: u32) {
    let shape = p.layers[l].shape;
    let place = p.layers[l].place;
    let n_in = shape.x;
    let units = shape.y;
    let x = input_of(l);
    for (var idx = lid; idx < p.batch * units; idx += WG) {
        let row = idx / units;
        let unit = idx % units;
        var acc = 0.0;
        for (var i = 0u; i < n_in; i++) {
            acc = fma(ld(x + row * n_in + i), params[shape.z + unit * n_in + i], acc);
        }
        let pre = acc + params[shape.w + unit];
        let out = activate(pre, place.x);
        st(place.y + idx, pre);
        st(place.z + idx, out);
        if (!is_finite(pre) || !is_finite(out)) {
            record(step, PHASE_FORWARD, l);
        }
    }
}

// logsumexp(row) − row[class] (loss_forward_backward.wgsl).
fn cross_entropy_row(y: u32, row: u32, outputs: u32) -> f32 {
    let base = y + row * outputs;
    var m = ld(base);
    for (var o = 1u; o < outputs; o++) {
        m = max(m, ld(base + o));
    }
    var s = 0.0;
    for (var o = 0u; o < outputs; o++) {
        s += exp(ld(base + o) - m);
    }
    let cls = min(u32(ld(p.t_offset + row * p.target_width)), outputs - 1u);
    return m + log(s) - ld(base + cls);
}

// The micro-batch's mean loss, added to the step's loss sum (loss_forward_backward.wgsl).
fn loss_forward(step: u32, lid: u32) {
    let last = p.layers[p.n_layers - 1u];
    let outputs = last.shape.y;
    let y = last.place.z;
    var acc = 0.0;
    if (p.loss == 2u) {
        for (var r = lid; r < p.batch; r += WG) {
            acc += cross_entropy_row(y, r, outputs);
        }
    } else {
        for (var k = lid; k < p.batch * outputs; k += WG) {
            let yv = ld(y + k);
            let tv = ld(p.t_offset + k);
            if (p.loss == 1u) {
                acc += max(yv, 0.0) - yv * tv + log1p(exp(-abs(yv)));
            } else {
                let d = yv - tv;
                acc += d * d;
            }
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    if (lid == 0u) {
        var total = 0.0;
        for (var j = 0u; j < WG; j++) {
            total += partial[j];
        }
        var count = p.batch * outputs;
        if (p.loss == 2u) {
            count = p.batch;
        }
        let mean = total / f32(count);
        let slot = p.stats_offset + step * 4u;
        st(slot, ld(slot) + mean);
        if (!is_finite(mean)) {
            record(step, PHASE_LOSS, 0u);
        }
    }
    workgroupBarrier();
}

// dz = scale · ∂L/∂y · act'(z) of the last layer (loss_forward_backward.wgsl),
// one invocation per row.
fn loss_backward(lid: u32) {
    let last = p.layers[p.n_layers - 1u];
    let outputs = last.shape.y;
    let place = last.place;
    for (var row = lid; row < p.batch; row += WG) {
        let base = row * outputs;
        if (p.loss == 2u) {
            let k = p.loss_scale / f32(p.batch);
            var m = ld(place.z + base);
            for (var o = 1u; o < outputs; o++) {
                m = max(m, ld(place.z + base + o));
            }
            var s = 0.0;
            for (var o = 0u; o < outputs; o++) {
                s += exp(ld(place.z + base + o) - m);
            }
            let lse = m + log(s);
            let cls = u32(ld(p.t_offset + row * p.target_width));
            for (var o = 0u; o < outputs; o++) {
                let i = base + o;
                let dy = k * (exp(ld(place.z + i) - lse) - select(0.0, 1.0, o == cls));
                st(place.w + i, dy * activation_derivative(ld(place.y + i), ld(place.z + i), place.x));
            }
        } else {
            for (var o = 0u; o < outputs; o++) {
                let i = base + o;
                let yv = ld(place.z + i);
                let tv = ld(p.t_offset + i);
                var dy: f32;
                if (p.loss == 1u) {
                    dy = p.loss_scale / f32(p.batch * outputs) * (1.0 / (1.0 + exp(-yv)) - tv);
                } else {
                    dy = 2.0 * p.loss_scale / f32(p.batch * outputs) * (yv - tv);
                }
                st(place.w + i, dy * activation_derivative(ld(place.y + i), yv, place.x));
            }
        }
    }
}

// dW += dzᵀ·x and db += Σ_b dz in one pass (column n_in of x is all ones), then, below
// the first layer, dz of layer l − 1 = (dz·W) · act'(z) (dense_backward_weight.wgsl,
// bias_backward.wgsl and dense_backward_input.wgsl).
fn backward_layer(l: u32, step: u32, lid: u32) {
    let shape = p.layers[l].shape;
    let dz = p.layers[l].place.w;
    let n_in = shape.x;
    let units = shape.y;
    let x = input_of(l);
    for (var idx = lid; idx < units * (n_in + 1u); idx += WG) {
        let unit = idx / (n_in + 1u);
        let col = idx % (n_in + 1u);
        var acc = 0.0;
        var g: u32;
        if (col < n_in) {
            for (var b = 0u; b < p.batch; b++) {
                acc = fma(ld(dz + b * units + unit), ld(x + b * n_in + col), acc);
            }
            g = shape.z + unit * n_in + col;
        } else {
            for (var b = 0u; b < p.batch; b++) {
                acc += ld(dz + b * units + unit);
            }
            g = shape.w + unit;
        }
        let v = ld(g) + acc;
        st(g, v);
        if (!is_finite(v)) {
            record(step, PHASE_BACKWARD, 255u - l);
        }
    }
    if (l > 0u) {
        let below = p.layers[l - 1u].place;
        for (var idx = lid; idx < p.batch * n_in; idx += WG) {
            let row = idx / n_in;
            let col = idx % n_in;
            var acc = 0.0;
            for (var o = 0u; o < units; o++) {
                acc = fma(ld(dz + row * units + o), params[shape.z + o * n_in + col], acc);
            }
            st(below.w + idx, acc * activation_derivative(ld(below.y + idx), ld(below.z + idx), below.x));
        }
    }
}

// grads += rate·sign(w) (l1) or rate·w (l2) on the weights (regularization_backward.wgsl).
fn regularize(lid: u32) {
    for (var l = 0u; l < p.n_layers; l++) {
        let shape = p.layers[l].shape;
        for (var i = lid; i < shape.x * shape.y; i += WG) {
            let k = shape.z + i;
            let w = params[k];
            var d = p.regularization_rate * w;
            if (p.regularization == 1u) {
                d = p.regularization_rate * sign(w);
            }
            st(k, ld(k) + d);
        }
    }
}

// Tensor t: the weight (even t) or bias (odd t) of layer t / 2.
fn tensor_range(t: u32) -> vec2<u32> {
    let shape = p.layers[t / 2u].shape;
    if (t % 2u == 0u) {
        return vec2<u32>(shape.z, shape.x * shape.y);
    }
    return vec2<u32>(shape.w, shape.y);
}

// Per-tensor norms, the global norm and clipping (grad_norm.wgsl, clip_grad_norm.wgsl).
fn clip(step: u32, lid: u32) {
    let n_tensors = 2u * p.n_layers;
    for (var t = 0u; t < n_tensors; t++) {
        let range = tensor_range(t);
        var acc = 0.0;
        for (var i = lid; i < range.y; i += WG) {
            let g = ld(range.x + i);
            acc += g * g;
        }
        partial[t * WG + lid] = acc;
    }
    workgroupBarrier();
    for (var t = lid; t < n_tensors; t += WG) {
        var sum = 0.0;
        for (var j = 0u; j < WG; j++) {
            sum += partial[t * WG + j];
        }
        norms[t] = sqrt(sum);
    }
    workgroupBarrier();
    var total_sq = 0.0;
    for (var t = 0u; t < n_tensors; t++) {
        total_sq += norms[t] * norms[t];
    }
    let total = sqrt(total_sq);
    let coef = p.max_norm / (total + 1e-6);
    let clipped = p.clip_enabled == 1u && coef < 1.0;
    if (lid == 0u) {
        st(p.stats_offset + step * 4u + 1u, total);
        st(p.stats_offset + step * 4u + 2u, select(0.0, 1.0, clipped));
    }
    if (clipped) {
        for (var i = lid; i < p.count; i += WG) {
            st(i, ld(i) * coef);
        }
    }
}

fn layer_of(i: u32) -> u32 {
    for (var l = 0u; l < p.n_layers; l++) {
        let shape = p.layers[l].shape;
        if (i < shape.w + shape.y) {
            return l;
        }
    }
    return p.n_layers - 1u;
}

// torch's lerp: a + w·(b − a) for w < ½, else b − (b − a)·(1 − w).
fn lerp(a: f32, b: f32, w: f32) -> f32 {
    if (w < 0.5) {
        return a + w * (b - a);
    }
    return b - (b - a) * (1.0 - w);
}

// One SGD or Adam/AdamW update of every parameter (sgd_step.wgsl, adam_step.wgsl).
fn optimize(step: u32, lid: u32) {
    // After a NaN/Inf earlier in the submit, leave the state at the last good step.
    let first = atomicLoad(&code);
    if (first != NONE && (first >> 8u) != ((step << 8u) | PHASE_OPTIMIZER)) {
        return;
    }
    let s = scalars[step];
    for (var i = lid; i < p.count; i += WG) {
        let p_old = params[i];
        var g = ld(i);
        var p_new: f32;
        if (p.optimizer == 1u) {
            var q = p_old;
            if (p.decoupled == 1u) {
                q = q * s.decay;
            } else if (p.weight_decay != 0.0) {
                g += p.weight_decay * q;
            }
            let m = lerp(moment1[i], g, p.one_minus_beta1);
            let v = moment2[i] * p.beta2 + p.one_minus_beta2 * g * g;
            let denom = sqrt(v) / s.bias_correction2_sqrt + p.eps;
            p_new = q + s.neg_step_size * m / denom;
            moment1[i] = m;
            moment2[i] = v;
        } else {
            if (p.weight_decay != 0.0) {
                g += p.weight_decay * p_old;
            }
            if (p.use_momentum == 1u) {
                var b: f32;
                if (s.first_step == 1u) {
                    b = g;
                } else {
                    b = moment1[i] * p.momentum + p.one_minus_dampening * g;
                }
                moment1[i] = b;
                if (p.nesterov == 1u) {
                    g = g + p.momentum * b;
                } else {
                    g = b;
                }
            }
            p_new = p_old + s.neg_lr * g;
        }
        params[i] = p_new;
        st(p.updates_offset + i, p_new - p_old);
        if (!is_finite(p_new)) {
            record(step, PHASE_OPTIMIZER, layer_of(i));
        }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
    if (lid == 0u) {
        atomicStore(&code, NONE);
    }
    workgroupBarrier();
    let k = p.micro_batches;
    for (var step = 0u; step < run.steps; step++) {
        if (run.zero_grad == 1u) {
            for (var i = lid; i < p.count; i += WG) {
                st(i, 0.0);
            }
        }
        for (var i = lid; i < 4u; i += WG) {
            st(p.stats_offset + step * 4u + i, 0.0);
        }
        storageBarrier();
        for (var m = 0u; m < k; m++) {
            gather(step * k + m, lid);
            storageBarrier();
            for (var l = 0u; l < p.n_layers; l++) {
                forward_layer(l, step, lid);
                storageBarrier();
            }
            loss_forward(step, lid);
            loss_backward(lid);
            storageBarrier();
            for (var l = p.n_layers; l > 0u; l--) {
                backward_layer(l - 1u, step, lid);
                storageBarrier();
            }
        }
        if (p.regularization != 0u) {
            regularize(lid);
            storageBarrier();
        }
        clip(step, lid);
        storageBarrier();
        optimize(step, lid);
        storageBarrier();
        workgroupBarrier();
    }
    if (lid == 0u) {
        let f = p.flags_offset;
        work[f] = atomicLoad(&code);
        work[f + 1u] = run.steps;
        work[f + 2u] = run.steps * k;
        work[f + 3u] = 0u;
    }
}
