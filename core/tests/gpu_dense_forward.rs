//! Every WGSL kernel against its CPU twin, over awkward sizes. Runs on
//! whatever adapter wgpu finds (lavapipe in CI); a missing adapter fails.
//! The same bodies run in Chromium on WebGPU (`tests/tests/gpu_kernels.rs`).

#[cfg(not(target_arch = "wasm32"))]
mod gpu_common;
#[cfg(target_arch = "wasm32")]
use crate::gpu_common;

use gpu_common::{flags, random, run_launch, BATCHES, SIZES};
use stepscope_core::experiment::Activation;
use stepscope_core::gpu::harness::{f32_bytes, to_f32, to_u32, Arg};
use stepscope_core::gpu::matmul::{self, MatmulVariant};
use stepscope_core::gpu::params::*;
use stepscope_core::model::{activation_forward, dense_forward, LayerOp, LayerShape};

/// dense_forward against dense_forward + activation_forward. The two sum
/// the I products in different orders (and the GPU fuses multiply-adds),
/// so each result may differ by up to 2·γ_I·(|b| + Σ|x_i·w_i|) with
/// γ_I ≈ I·2⁻²⁴; the activation (Lipschitz < 1.2) and its own exp/tanh
/// implementation add at most 1e-6 for these O(1) values. Both variants
/// (tiled and blocked) run every case, and give the same bits.
async fn dense_forward_matches_cpu() {
    let activations = [
        Activation::Linear,
        Activation::Relu,
        Activation::LeakyRelu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::GeluTanh,
        Activation::Silu,
    ];
    let mut case = 0;
    for &inputs in &SIZES {
        for &units in &SIZES {
            for &batch in &BATCHES {
                case += 1;
                if case % 3 != 0 && !(inputs == 257 || units == 257) {
                    continue; // every size appears; the full cross product is slow on lavapipe
                }
                let act = activations[case % activations.len()];
                let offset = 5; // parameters need not start at 0
                let x = random(batch * inputs, case as u64, 1.0);
                let mut params =
                    random(offset + units * inputs + units, case as u64 + 1000, 1.0 / (inputs as f64).sqrt());
                params[..offset].fill(f32::NAN); // must not be read
                let (w, b) = params[offset..].split_at(units * inputs);
                let mut z_cpu = vec![0.0; batch * units];
                dense_forward(&mut z_cpu, &x, w, b, batch, inputs, units);
                let mut a_cpu = vec![0.0; batch * units];
                activation_forward(&mut a_cpu, &z_cpu, act);
                let bias_offset = offset + units * inputs;
                let shape = LayerShape { inputs, units, weight_offset: offset, bias_offset, op: LayerOp::Dense };
                let zeros = vec![0u8; 4 * batch * units];
                let (x_bytes, params_bytes, flags) = (f32_bytes(&x), f32_bytes(&params), flags());
                let mut first: Option<Vec<Vec<u8>>> = None;
                for v in MatmulVariant::ALL {
                    let l = matmul::forward(v, batch, &shape, act, 3);
                    let args = [
                        Arg::Out(&zeros),
                        Arg::Out(&zeros),
                        Arg::In(&x_bytes),
                        Arg::In(&params_bytes),
                        Arg::Out(&flags),
                    ];
                    let out = run_launch(&l, args).await;
                    let (z_gpu, a_gpu) = (to_f32(&out[0]), to_f32(&out[1]));
                    for r in 0..batch {
                        for o in 0..units {
                            let mag: f32 = b[o].abs()
                                + (0..inputs).map(|i| (x[r * inputs + i] * w[o * inputs + i]).abs()).sum::<f32>();
                            let tol = 2.0 * inputs as f32 * f32::EPSILON / 2.0 * mag + 1e-6;
                            let k = r * units + o;
                            assert!(
                                (z_gpu[k] - z_cpu[k]).abs() <= tol,
                                "{v:?} {act:?} I={inputs} O={units} B={batch} z[{r},{o}] {} vs {}",
                                z_gpu[k],
                                z_cpu[k]
                            );
                            assert!(
                                (a_gpu[k] - a_cpu[k]).abs() <= 1.2 * tol + 1e-6,
                                "{v:?} {act:?} I={inputs} O={units} B={batch} a[{r},{o}] {} vs {}",
                                a_gpu[k],
                                a_cpu[k]
                            );
                        }
                    }
                    assert_eq!(to_u32(&out[2])[0], u32::MAX, "no non-finite value");
                    match &first {
                        None => first = Some(out),
                        Some(tiled) => assert!(
                            tiled[0] == out[0] && tiled[1] == out[1],
                            "{act:?} I={inputs} O={units} B={batch}: the variants' z and a differ in their bits"
                        ),
                    }
                }
            }
        }
    }
}
gpu_common::twin_test!(dense_forward_matches_cpu);

async fn dense_forward_flags_first_non_finite_layer() {
    let (batch, inputs, units) = (3, 4, 5);
    let mut x = random(batch * inputs, 1, 1.0);
    x[6] = f32::INFINITY;
    let params = random(units * inputs + units, 2, 0.5);
    let shape = LayerShape { inputs, units, weight_offset: 0, bias_offset: 20, op: LayerOp::Dense };
    let zeros = vec![0u8; 4 * batch * units];
    let mut flags_in = FLAGS_INIT;
    flags_in[1] = 7; // step 7 of this submit
    for v in MatmulVariant::ALL {
        let l = matmul::forward(v, batch, &shape, Activation::Tanh, 2);
        let (x, params) = (f32_bytes(&x), f32_bytes(&params));
        let flags = bytemuck::cast_slice(&flags_in);
        let out =
            run_launch(&l, [Arg::Out(&zeros), Arg::Out(&zeros), Arg::In(&x), Arg::In(&params), Arg::Out(flags)]).await;
        assert_eq!(to_u32(&out[2])[0], (7 << 16) | (PHASE_FORWARD << 8) | 2, "{v:?}");
    }
}
gpu_common::twin_test!(dense_forward_flags_first_non_finite_layer);
