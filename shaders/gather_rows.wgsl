// gather_rows: assembles micro-batch m of the submit from the whole table, which is
// uploaded once (CPU twin: data::Table::copy_row for each of the B rows, as
// data::Batcher::next_batch does). x[r, c] = table_inputs[rows[m·B + r], c] and
// t[r, c] = table_targets[rows[m·B + r], c], with m = flags[2], the micro-batch
// index within the submit. Values are moved as u32 bit patterns, so the copy is
// exact for every value, NaN payloads included.
//
// Bindings (group 0):
//   0 x             (B, I)   read_write   the micro-batch's inputs
//   1 t             (B, T)   read_write   the micro-batch's targets
//   2 flags         (4)      read_write   [2] micro-batch index m (only read here)
//   3 table_inputs  (N, I)   read         the whole table's inputs
//   4 table_targets (N, T)   read         the whole table's targets
//   5 rows          (M·B)    read         row indices of all M micro-batches of the submit
//   6 p             Params   uniform
// Dispatch: elementwise_grid(B·(I + T)), workgroup 256; one invocation per copied
// value: indices [0, B·I) fill x, [B·I, B·(I + T)) fill t.

struct Params {
    batch: u32,
    inputs: u32,
    target_width: u32,
    _pad: u32,
}

@group(0) @binding(0) var<storage, read_write> x: array<u32>;
@group(0) @binding(1) var<storage, read_write> t: array<u32>;
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(3) var<storage, read> table_inputs: array<u32>;
@group(0) @binding(4) var<storage, read> table_targets: array<u32>;
@group(0) @binding(5) var<storage, read> rows: array<u32>;
@group(0) @binding(6) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let index = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    let n_x = p.batch * p.inputs;
    let count = n_x + p.batch * p.target_width;
    if (index >= count) {
        return;
    }
    let m = atomicLoad(&flags[2]);
    let first = m * p.batch;
    if (index < n_x) {
        let r = index / p.inputs;
        let c = index % p.inputs;
        let row = rows[first + r];
        x[index] = table_inputs[row * p.inputs + c];
    } else {
        let j = index - n_x;
        let r = j / p.target_width;
        let c = j % p.target_width;
        let row = rows[first + r];
        t[j] = table_targets[row * p.target_width + c];
    }
}
