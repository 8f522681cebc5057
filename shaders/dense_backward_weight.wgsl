// dense_backward_weight: dweight += dzᵀ·x, accumulated (CPU twin: the dweight part of
// model::dense_backward): grads[weight_offset + o*I + i] += Σ_b dz[b, o]·x[b, i].
// Records the first non-finite resulting gradient in `flags`.
//
// Bindings (group 0):
//   0 grads (P)     read_write   flat gradients; dW (O, I) row-major at weight_offset
//   1 flags (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   2 dz    (B, O)  read         gradient with respect to the pre-activations
//   3 x     (B, I)  read         the layer's inputs (the batch, or the previous layer's a)
//   4 p     Params  uniform
// Dispatch: (ceil(I / 64), ceil(O / 64), 1); workgroup 16×16; each invocation computes a
// 4×4 block of gradients (units lid.y*4.., inputs lid.x*4..). The reduction over the batch
// runs in K-tiles of 16 rows: 16 rows × 64 units of dz and 16 rows × 64 inputs of x are
// staged in workgroup memory (coalesced loads), so every loaded value is used 64 times.

struct Params {
    batch: u32,
    inputs: u32,
    units: u32,
    weight_offset: u32,
    layer: u32,
    bias_offset: u32, // read by dense_backward_weight_blocked only
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> grads: array<f32>;
@group(0) @binding(1) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(2) var<storage, read> dz: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const TILE: u32 = 64u;
const KTILE: u32 = 16u;
const PHASE_BACKWARD: u32 = 3u;

var<workgroup> tile_dz: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_dz[k * 16 + unit / 4][unit % 4]
var<workgroup> tile_x: array<vec4<f32>, 256>; // [KTILE][TILE / 4]: tile_x[k * 16 + input / 4][input % 4]

fn is_finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// Row i of a 4×4 register block, without indexing a local array (which
// could force the accumulators out of registers).
fn pick_row(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, i: u32) -> vec4<f32> {
    return select(select(a0, a1, i == 1u), select(a2, a3, i == 3u), i >= 2u);
}

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let unit0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    // acc_i[j]: unit unit0 + lid.y*4 + i, input col0 + lid.x*4 + j
    var acc0 = vec4<f32>();
    var acc1 = vec4<f32>();
    var acc2 = vec4<f32>();
    var acc3 = vec4<f32>();
    for (var k0 = 0u; k0 < p.batch; k0 += KTILE) {
        // 16 rows × 64 columns of each, 4 per invocation; consecutive invocations read
        // consecutive columns of one row.
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            let c = idx % TILE;
            let k = idx / TILE;
            let row = k0 + k;
            var dv = 0.0;
            if (row < p.batch && unit0 + c < p.units) {
                dv = dz[row * p.units + unit0 + c];
            }
            tile_dz[k * 16u + c / 4u][c % 4u] = dv;
            var xv = 0.0;
            if (row < p.batch && col0 + c < p.inputs) {
                xv = x[row * p.inputs + col0 + c];
            }
            tile_x[k * 16u + c / 4u][c % 4u] = xv;
        }
        workgroupBarrier();
        for (var k = 0u; k < KTILE; k++) {
            // One 16-byte load of each tile per k; four vector FMAs.
            let a4 = tile_dz[k * 16u + lid.y];
            let b4 = tile_x[k * 16u + lid.x];
            acc0 = fma(vec4<f32>(a4.x), b4, acc0);
            acc1 = fma(vec4<f32>(a4.y), b4, acc1);
            acc2 = fma(vec4<f32>(a4.z), b4, acc2);
            acc3 = fma(vec4<f32>(a4.w), b4, acc3);
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row_acc = pick_row(acc0, acc1, acc2, acc3, i);
        let unit = unit0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x * 4u + j;
            if (unit < p.units && col < p.inputs) {
                let g = p.weight_offset + unit * p.inputs + col;
                let v = grads[g] + row_acc[j];
                grads[g] = v;
                if (!is_finite(v)) {
                    let step = atomicLoad(&flags[1]);
                    atomicMin(&flags[0], (step << 16u) | (PHASE_BACKWARD << 8u) | (255u - p.layer));
                }
            }
        }
    }
}
