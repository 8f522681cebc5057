// regularization_backward: grads += ∂(regularization)/∂w over ONE weight tensor
// (CPU twin: model::regularization_backward, which runs this over every weight
// tensor; biases are not regularized, so the engine dispatches it per weight tensor).
//   l1 (kind 0): grads[offset + i] += rate · sign(w)   (sign(0) = 0, as torch.sign)
//   l2 (kind 1): grads[offset + i] += rate · w
//
// Bindings (group 0):
//   0 grads  (P)     read_write   flat gradients
//   1 params (P)     read         flat parameters; the tensor is [offset, offset + len)
//   2 p      Params  uniform
// Dispatch: elementwise_grid(len); workgroup 256, one element per invocation.

struct Params {
    offset: u32,
    len: u32,
    kind: u32, // 0 l1, 1 l2
    rate: f32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read> params: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

// As the twin: 1 for w > 0, −1 for w < 0, else 0 (also for NaN, which the
// built-in sign leaves implementation-defined).
fn sign_of(w: f32) -> f32 {
    if (w > 0.0) {
        return 1.0;
    }
    if (w < 0.0) {
        return -1.0;
    }
    return 0.0;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (i >= p.len) {
        return;
    }
    let k = p.offset + i;
    let w = params[k];
    var d: f32;
    if (p.kind == 0u) {
        d = p.rate * sign_of(w);
    } else {
        d = p.rate * w;
    }
    grads[k] = grads[k] + d;
}
