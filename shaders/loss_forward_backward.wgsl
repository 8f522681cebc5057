// loss_forward_backward: the mean loss of one micro-batch, ADDED to this step's loss sum
// in `stats`, and in the same pass the gradient with respect to the output layer's
// pre-activations, overwritten (CPU twins: model::loss_forward, then model::loss_backward
// and model::activation_backward of the output layer). Records a non-finite mean in
// `flags`.
//   loss:
//     mse:             (1/(B·O)) Σ (y − t)²
//     bce_with_logits: (1/(B·O)) Σ max(y, 0) − y·t + log(1 + e^(−|y|))
//     cross_entropy:   (1/B) Σ_rows logsumexp(row) − row[class]
//   dz = dy · f'(z), with dy = scale · ∂L/∂y:
//     mse:             k · (y − t),                         k = 2·scale / (B·O)
//     bce_with_logits: k · (σ(y) − t),                      k = scale / (B·O)
//     cross_entropy:   k · (softmax(row) − onehot(class)),  k = scale / B
//   f' as activation_derivative below (linear: 1, which leaves dy's bits as they are).
//
// Bindings (group 0):
//   0 stats   (4·steps)  read_write   [step*4 + 0] += mean loss, step = flags[1]
//   1 flags   (4)        read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 dz      (B, O)     read_write   overwritten
//   3 y       (B, O)     read         output layer's a (logits for bce / cross_entropy)
//   4 z       (B, O)     read         output layer's pre-activations
//   5 targets (B, T)     read         T = target_width: O for mse and bce, 1 (class index
//                                     as f32) for cross_entropy
//   6 p       Params     uniform
// Dispatch: (1, 1, 1); one workgroup of 256 invocations. Each takes a strided share of the
// elements (mse, bce) or rows (cross_entropy, each row summed in order as the CPU), adds
// up its loss terms and writes their gradients; then a tree reduction of the loss in
// workgroup memory, and invocation 0 divides and adds.

struct Params {
    batch: u32,
    outputs: u32,
    loss: u32, // 0 mse, 1 bce_with_logits, 2 cross_entropy
    target_width: u32,
    scale: f32, // 1/k under gradient accumulation over k micro-batches
    activation: u32, // the output layer's, as dense_forward's codes
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> stats: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read_write> dz: array<f32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read> z: array<f32>;
@group(0) @binding(5) var<storage, read> targets: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

const WG: u32 = 256u;
const PHASE_LOSS: u32 = 2u;
const STATS_STRIDE: u32 = 4u;
const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

var<workgroup> partial: array<f32, 256>;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// log(1 + v) for v in [0, 1], accurate for small v: below 0.01 the series to
// v⁴ (the next term is under 2e-9 relative), above it log(1 + v) directly (within a
// few ε absolute, under 4e-5 relative). Not Goldberg's log(u)·v/(u − 1), u = 1 + v:
// a shader compiler may simplify (1 + v) − 1 to v and return log(u), 0 for tiny v.
fn log1p(v: f32) -> f32 {
    if (v < 0.01) {
        return v * (1.0 - v * (0.5 - v * (0.33333334 - v * 0.25)));
    }
    return log(1.0 + v);
}

// tanh through exp(−2|v|): finite for every input (a plain tanh may give
// inf/inf = NaN for large |v| on some drivers).
fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

// f'(z) of the activation `kind`, given z and a = f(z) (CPU twin: the
// derivative in model::activation_backward).
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

fn store_grad(k: u32, dy: f32) {
    dz[k] = dy * activation_derivative(z[k], y[k], p.activation);
}

// One row of cross_entropy: writes the row's gradient, returns
// logsumexp(row) − row[class], summed in order as the CPU.
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
    let lse = m + log(s);
    let k = p.scale / f32(p.batch);
    let hot = u32(targets[row * p.target_width]);
    for (var o = 0u; o < p.outputs; o++) {
        let softmax = exp(y[base + o] - lse);
        let onehot = select(0.0, 1.0, o == hot);
        store_grad(base + o, k * (softmax - onehot));
    }
    let cls = min(hot, p.outputs - 1u);
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
        // k as the CPU: 2·scale / n (mse), scale / n (bce).
        let k_bce = p.scale / f32(n);
        let k_mse = 2.0 * p.scale / f32(n);
        for (var k = lid.x; k < n; k += WG) {
            let yv = y[k];
            let tv = targets[k];
            if (p.loss == 1u) {
                // max(y, 0) − y·t as y·(1 − t) or −y·t: no cancellation
                // for a compiler to reassociate away the small log term.
                acc += select(-yv * tv, yv * (1.0 - tv), yv > 0.0) + log1p(exp(-abs(yv)));
                store_grad(k, k_bce * (sigmoid(yv) - tv));
            } else {
                let d = yv - tv;
                acc += d * d;
                store_grad(k, k_mse * d);
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
