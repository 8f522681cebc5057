// dense_backward_input: dx = dz·W, overwritten (CPU twin: the dx part of
// model::dense_backward): dx[b, i] = Σ_o dz[b, o]·W[o, i].
//
// Bindings (group 0):
//   0 dx     (B, I)  read_write   overwritten
//   1 dz     (B, O)  read         gradient with respect to the pre-activations
//   2 params (P)     read         flat parameters; W (O, I) row-major at weight_offset
//   3 p      Params  uniform
// Dispatch: (ceil(I / 64), ceil(B / 64), 1); workgroup 16×16; each invocation computes a
// 4×4 block of outputs (rows lid.y*4.., inputs lid.x*4..). The reduction over the O units
// runs in K-tiles of 16: 64 rows × 16 units of dz and 16 units × 64 inputs of W are staged
// in workgroup memory (coalesced loads), so every loaded value is used 64 times.

struct Params {
    batch: u32,
    inputs: u32,
    units: u32,
    weight_offset: u32,
}

@group(0) @binding(0) var<storage, read_write> dx: array<f32>;
@group(0) @binding(1) var<storage, read> dz: array<f32>;
@group(0) @binding(2) var<storage, read> params: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

const TILE: u32 = 64u;
const KTILE: u32 = 16u;

var<workgroup> tile_dz: array<f32, 1024>; // [KTILE][TILE]: tile_dz[k * 64 + row]
var<workgroup> tile_w: array<f32, 1024>;  // [KTILE][TILE]: tile_w[k * 64 + input]

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row0 = wid.y * TILE;
    let col0 = wid.x * TILE;
    let tid = lid.y * 16u + lid.x;
    var acc: array<f32, 16>; // acc[i * 4 + j]: row row0 + lid.y*4 + i, input col0 + lid.x*4 + j
    for (var k0 = 0u; k0 < p.units; k0 += KTILE) {
        // 1024 values of each tile, 4 per invocation.
        for (var e = 0u; e < 4u; e++) {
            let idx = tid + e * 256u;
            // dz: 64 rows × 16 units; consecutive invocations read consecutive units.
            let r = idx / KTILE;
            let kd = idx % KTILE;
            let row = row0 + r;
            var dv = 0.0;
            if (row < p.batch && k0 + kd < p.units) {
                dv = dz[row * p.units + k0 + kd];
            }
            tile_dz[kd * TILE + r] = dv;
            // W: 16 units × 64 inputs; consecutive invocations read consecutive inputs.
            let c = idx % TILE;
            let kw = idx / TILE;
            let col = col0 + c;
            var wv = 0.0;
            if (col < p.inputs && k0 + kw < p.units) {
                wv = params[p.weight_offset + (k0 + kw) * p.inputs + col];
            }
            tile_w[kw * TILE + c] = wv;
        }
        workgroupBarrier();
        for (var k = 0u; k < KTILE; k++) {
            var ds: array<f32, 4>;
            var ws: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) {
                ds[i] = tile_dz[k * TILE + lid.y * 4u + i];
                ws[i] = tile_w[k * TILE + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) {
                    acc[i * 4u + j] = fma(ds[i], ws[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let row = row0 + lid.y * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let col = col0 + lid.x * 4u + j;
            if (row < p.batch && col < p.inputs) {
                dx[row * p.inputs + col] = acc[i * 4u + j];
            }
        }
    }
}
