// advance: moves a counter of `flags` on by one between the kernels of a submit,
// so that later kernels see the next optimizer step or micro-batch without a new
// uniform (CPU twin: the engine's step and micro-batch loop counters).
// counter 1: flags[1] += 1 (next optimizer step; the micro-batch counter is not
// reset, micro-batches are numbered across the submit); counter 2: flags[2] += 1
// (next micro-batch). Any other value changes nothing.
//
// Bindings (group 0):
//   0 flags  (4)     read_write   [0] first non-finite code, [1] step, [2] micro-batch
//   1 p      Params  uniform
// Dispatch: (1, 1, 1), workgroup 1.

struct Params {
    counter: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> flags: array<atomic<u32>, 4>;
@group(0) @binding(1) var<uniform> p: Params;

@compute @workgroup_size(1)
fn main() {
    if (p.counter == 1u || p.counter == 2u) {
        atomicAdd(&flags[p.counter], 1u);
    }
}
