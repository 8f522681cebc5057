// bias_backward: dbias += Σ_b dz, accumulated (CPU twin: the dbias part of
// model::dense_backward): grads[bias_offset + o] += Σ_b dz[b, o].
// Records the first non-finite resulting gradient in `flags`.
//
// Bindings (group 0):
//   0 grads (P)     read_write   flat gradients; db (O) at bias_offset
//   1 flags (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 dz    (B, O)  read         gradient with respect to the pre-activations
//   3 p     Params  uniform
// Dispatch: (O, 1, 1); one workgroup of 256 invocations per unit: a strided sum over the
// rows, then a tree reduction in workgroup memory; invocation 0 adds the total.

struct Params {
    batch: u32,
    units: u32,
    bias_offset: u32,
    layer: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> dz: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const WG: u32 = 256u;
const PHASE_BACKWARD: u32 = 3u;

var<workgroup> partial: array<f32, 256>;

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let unit = wid.x;
    var acc = 0.0;
    if (unit < p.units) {
        for (var b = lid.x; b < p.batch; b += WG) {
            acc += dz[b * p.units + unit];
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
    if (lid.x == 0u && unit < p.units) {
        let g = p.bias_offset + unit;
        let v = grads[g] + partial[0];
        grads[g] = v;
        if (!is_finite(v)) {
            let step = atomicLoad(&flags[1]);
            atomicMin(&flags[0], (step << 16u) | (PHASE_BACKWARD << 8u) | (255u - p.layer));
        }
    }
}
