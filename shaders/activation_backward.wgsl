// activation_backward: dz = da · f'(z), overwritten (CPU twin: model::activation_backward).
//   linear 1; relu 1 for z > 0 else 0; leaky_relu 1 for z > 0 else 0.01; tanh 1 − a²;
//   sigmoid a (1 − a); gelu_tanh ½ (1 + t) + ½ z (1 − t²) k (1 + 3 c z²) with
//   t = tanh(k (z + c z³)); silu σ(z) (1 + z (1 − σ(z))).
//
// Bindings (group 0):
//   0 dz  (n)     read_write   overwritten
//   1 da  (n)     read         gradient with respect to the outputs a
//   2 z   (n)     read         pre-activations kept by the forward pass
//   3 a   (n)     read         outputs a = f(z) kept by the forward pass
//   4 p   Params  uniform
// Dispatch: elementwise_grid(n); one invocation per element.

struct Params {
    count: u32,
    activation: u32, // 0 linear, 1 relu, 2 leaky_relu, 3 tanh, 4 sigmoid, 5 gelu_tanh, 6 silu
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<storage, read_write> dz: array<f32>;
@group(0) @binding(1) var<storage, read> da: array<f32>;
@group(0) @binding(2) var<storage, read> z: array<f32>;
@group(0) @binding(3) var<storage, read> a: array<f32>;
@group(0) @binding(4) var<uniform> p: Params;

const GELU_K: f32 = 0.7978846; // √(2/π)
const GELU_C: f32 = 0.044715;
const LEAKY_SLOPE: f32 = 0.01;

// tanh through exp(−2|v|): finite for every input (a plain tanh may give
// inf/inf = NaN for large |v| on some drivers).
fn tanh_stable(v: f32) -> f32 {
    let e = exp(-2.0 * abs(v));
    return sign(v) * (1.0 - e) / (1.0 + e);
}

fn sigmoid(v: f32) -> f32 {
    return 1.0 / (1.0 + exp(-v));
}

fn derivative(zv: f32, av: f32, kind: u32) -> f32 {
    switch kind {
        case 1u: { return select(0.0, 1.0, zv > 0.0); }
        case 2u: { return select(LEAKY_SLOPE, 1.0, zv > 0.0); }
        case 3u: { return 1.0 - av * av; }
        case 4u: { return av * (1.0 - av); }
        case 5u: {
            let t = tanh_stable(GELU_K * (zv + GELU_C * zv * zv * zv));
            return 0.5 * (1.0 + t) + 0.5 * zv * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * zv * zv);
        }
        case 6u: {
            let s = sigmoid(zv);
            return s * (1.0 + zv * (1.0 - s));
        }
        default: { return 1.0; }
    }
}

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
) {
    let idx = (wid.y * nwg.x + wid.x) * 256u + lid.x;
    if (idx >= p.count) {
        return;
    }
    dz[idx] = da[idx] * derivative(z[idx], a[idx], p.activation);
}
