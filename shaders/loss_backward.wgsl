// loss_backward: dy = scale · ∂L/∂y, overwritten (CPU twin: model::loss_backward).
//   mse:            k · (y − t),              k = 2·scale / (B·O)
//   bce_with_logits: k · (σ(y) − t),           k = scale / (B·O)
//   cross_entropy:  k · (softmax(row) − onehot(class)), k = scale / B
//
// Bindings (group 0):
//   0 dy      (B, O)  read_write   overwritten
//   1 y       (B, O)  read         last layer's outputs (logits for bce / cross_entropy)
//   2 targets (B, T)  read         T = target_width: O for mse and bce, 1 (class index as
//                                  f32) for cross_entropy
//   3 p       Params  uniform
// Dispatch: elementwise_grid(B); one invocation per ROW, handling its O outputs
// (cross_entropy needs the row's logsumexp, summed in order as the CPU).

struct Params {
    batch: u32,
    outputs: u32,
    loss: u32, // 0 mse, 1 bce_with_logits, 2 cross_entropy
    target_width: u32,
    scale: f32, // 1/k under gradient accumulation over k micro-batches
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> dy: array<f32>;
@group(0) @binding(1) var<storage, read> y: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let row = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (row >= p.batch) {
        return;
    }
    let base = row * p.outputs;
    if (p.loss == 2u) {
        let k = p.scale / f32(p.batch);
        var m = y[base];
        for (var o = 1u; o < p.outputs; o++) {
            m = max(m, y[base + o]);
        }
        var s = 0.0;
        for (var o = 0u; o < p.outputs; o++) {
            s += exp(y[base + o] - m);
        }
        let lse = m + log(s);
        let cls = u32(targets[row * p.target_width]);
        for (var o = 0u; o < p.outputs; o++) {
            let softmax = exp(y[base + o] - lse);
            let onehot = select(0.0, 1.0, o == cls);
            dy[base + o] = k * (softmax - onehot);
        }
    } else if (p.loss == 1u) {
        let k = p.scale / f32(p.batch * p.outputs);
        for (var o = 0u; o < p.outputs; o++) {
            let sigmoid = 1.0 / (1.0 + exp(-y[base + o]));
            dy[base + o] = k * (sigmoid - targets[base + o]);
        }
    } else {
        let k = 2.0 * p.scale / f32(p.batch * p.outputs);
        for (var o = 0u; o < p.outputs; o++) {
            dy[base + o] = k * (y[base + o] - targets[base + o]);
        }
    }
}
