// clip_grad_norm: combines the per-tensor norms of grad_norm into the global norm
// and scales every gradient by min(1, max_norm / (total + 1e-6)) when clipping is
// enabled (CPU twins: the combination in optim::global_grad_norm, then
// optim::clip_grad_norm). Every invocation recomputes
//   total = sqrt(Σ_t norm_t · norm_t)
// sequentially in f32, in tensor order, exactly as the CPU does, so all agree.
// Invocation 0 records stats[step·4 + 1] = total and stats[step·4 + 2] = 1.0 if
// it clipped, else 0.0 (step = flags[1]).
//
// Bindings (group 0):
//   0 grads        (P)          read_write   flat gradients, scaled in place
//   1 stats        (4·steps)    read_write   per-step statistics
//   2 flags        (4)          read_write   [1] step within the submit
//   3 tensor_norms (n_tensors)  read         from grad_norm
//   4 p            Params       uniform
// Dispatch: elementwise_grid(count); workgroup 256, one gradient per invocation.

struct Params {
    count: u32,
    n_tensors: u32,
    max_norm: f32,
    clip_enabled: u32, // 0: only record the norm; 1: also clip
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read_write> stats: array<f32>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(3) var<storage, read> tensor_norms: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    var total_sq = 0.0;
    for (var t = 0u; t < p.n_tensors; t++) {
        let norm = tensor_norms[t];
        total_sq += norm * norm;
    }
    let total = sqrt(total_sq);
    let coef = p.max_norm / (total + 1e-6);
    let clip = p.clip_enabled == 1u && coef < 1.0;
    if (i == 0u) { // also when count is 0
        let step = atomicLoad(&flags[1]);
        stats[step * 4u + 1u] = total;
        stats[step * 4u + 2u] = select(0.0, 1.0, clip);
    }
    if (clip && i < p.count) {
        grads[i] = grads[i] * coef;
    }
}
