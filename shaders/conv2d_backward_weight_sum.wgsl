// conv2d_backward_weight_sum: the second of ∂W's two passes (CPU twin: the dweight and dbias
// parts of model::conv2d_backward, with conv2d_backward_weight): each gradient's partial sums
// added in segment order from 0, then the total onto the gradient (accumulated). Records the
// first non-finite resulting gradient in `flags`.
//
// Bindings (group 0):
//   0 grads    (P)                      read_write   flat gradients; dW (F, C, K, K) at weight_offset, db (F) at bias_offset
//   1 flags    (4)                      read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 partials (segments, F, C·K·K + 1)  read         conv2d_backward_weight's sums
//   3 p        Params                   uniform
// Dispatch: `launch::grid_of_64(F·(C·K·K + 1))`; an invocation per gradient, (f, entry).

struct Params {
    batch: u32,
    c_in: u32,
    h: u32,
    w: u32,
    filters: u32,
    kernel: u32,
    stride: u32,
    padding: u32,
    out_h: u32,
    out_w: u32,
    weight_offset: u32,
    bias_offset: u32,
    activation: u32, // forward: this layer's; input gradient: the layer below's (dense_forward's codes)
    layer: u32,
    segments: u32, // ∂W's split of the B·OH·OW terms (conv2d_backward_weight)
    segment_len: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> partials: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const PHASE_BACKWARD: u32 = 3u;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// The invocation's item: workgroups of 64 in a 2-D grid past 65535 (`launch::grid_of_64`).
fn item(lid: vec3<u32>, wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return (wid.y * groups.x + wid.x) * 64u + lid.x;
}

@compute @workgroup_size(64)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
) {
    let i = item(lid, wid, groups);
    let patch_len = p.c_in * p.kernel * p.kernel;
    let entries = patch_len + 1u;
    let per_segment = p.filters * entries;
    if (i >= per_segment) {
        return;
    }
    var total = 0.0;
    for (var seg = 0u; seg < p.segments; seg++) {
        total += partials[seg * per_segment + i];
    }
    let f = i / entries;
    let r = i % entries;
    let at = select(p.weight_offset + f * patch_len + r, p.bias_offset + f, r == patch_len);
    let v = grads[at] + total;
    grads[at] = v;
    if (!is_finite(v)) {
        let step = atomicLoad(&flags[1]);
        atomicMin(&flags[0], (step << 16u) | (PHASE_BACKWARD << 8u) | (255u - p.layer));
    }
}
