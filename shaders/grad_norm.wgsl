// grad_norm: the L2 norm of each gradient tensor (CPU twin: the per-tensor norms
// inside optim::global_grad_norm, which sums the squares in f64; here the sum is
// f32: each invocation sums a stride-256 slice, then a tree reduction over the
// workgroup). clip_grad_norm combines the norms.
//
// Bindings (group 0):
//   0 tensor_norms (n_tensors)  read_write   ‖g_t‖ for tensor t
//   1 grads        (P)          read         flat gradients
//   2 tensors      (n_tensors)  read         TensorRange {offset, len} of each tensor
//   3 p            Params       uniform
// Dispatch: (n_tensors, 1, 1); workgroup 256; workgroup t reduces tensor t.

struct Params {
    n_tensors: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

struct TensorRange {
    offset: u32,
    len: u32,
    decays: u32, // 1 where the tensor takes weight decay (its torch parameter group's)
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> tensor_norms: array<f32>;
@group(0) @binding(1) var<storage, read> grads: array<f32>;
@group(0) @binding(2) var<storage, read> tensors: array<TensorRange>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 256u;

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let t = wid.x;
    if (t >= p.n_tensors) {
        return; // uniform across the workgroup
    }
    let range = tensors[t];
    var acc = 0.0;
    for (var i = lid.x; i < range.len; i += WG) {
        let g = grads[range.offset + i];
        acc += g * g;
    }
    partial[lid.x] = acc;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid.x < s) {
            partial[lid.x] = partial[lid.x] + partial[lid.x + s];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        tensor_norms[t] = sqrt(partial[0]);
    }
}
