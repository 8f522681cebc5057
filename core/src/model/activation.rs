//! Elementwise activations, forward and backward. z is the pre-activation,
//! a = f(z) the output; both (B, O) and stored by the forward pass.
//!
//! tanh, σ, GELU and SiLU are straight-line f32 arithmetic on `math`'s exp
//! (no libm, no branch, never fused), one loop per activation compiled by
//! `widest`: a batch's activations vectorise (AVX-512, AVX2 or simd128)
//! and every build, native or browser, gives the same bits. Their errors
//! against f64, the worst over every finite f32, are stated in `math` and
//! in the doc of each function below; the tests at the bottom of `math`
//! and of this file hold them to it over dense samples.

use crate::experiment::Activation;
use crate::model::gpt::ops::math::{exp, sigmoid, sigmoid_and_slope, tanh};
use crate::model::wide::widest;

/// √(2/π), for the tanh approximation of GELU.
const GELU_K: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;
/// PyTorch's default `LeakyReLU` negative slope.
pub const LEAKY_SLOPE: f32 = 0.01;

/// x·σ(v) as one quotient: x/(1 + e) for v ≥ 0, x·e/(1 + e) below, with
/// e = exp(−|v|) ≤ 1, so that nothing overflows and nothing cancels.
#[inline(always)]
fn times_sigmoid(x: f32, v: f32) -> f32 {
    let e = exp(-v.abs());
    let n = if v < 0.0 { x * e } else { x };
    n / (1.0 + e)
}

/// GELU's tanh argument doubled: 2u, u = k (z + c z³).
#[inline(always)]
fn gelu_2u(z: f32) -> f32 {
    let u = GELU_K * (z + GELU_C * z * z * z);
    u + u
}

widest! {
    fn tanh_forward(a: &mut [f32], z: &[f32]) {
        for (a, &z) in a.iter_mut().zip(z) {
            *a = tanh(z);
        }
    }
}

widest! {
    fn sigmoid_forward(a: &mut [f32], z: &[f32]) {
        for (a, &z) in a.iter_mut().zip(z) {
            *a = sigmoid(z);
        }
    }
}

widest! {
    /// GELU(approximate="tanh"), ½ z (1 + tanh(u)), as z·σ(2u), the same
    /// function (1 + tanh u = 2σ(2u)) with no 1 + (nearly −1) for z < 0.
    /// Within 5.2e-7 absolute (5.16e-7 at z = 4.67, 1.1 ulp of the value)
    /// and 1.86 ulp for z ≥ 0; for z < 0 the rounding of u in f32 costs
    /// about 2|u| ulp (15.1 at z = −2.99), where the value is small. The
    /// ½ z (1 + tanh) form in f32 (PyTorch's) loses every bit below z ≈ −6.
    fn gelu_tanh_forward(a: &mut [f32], z: &[f32]) {
        for (a, &z) in a.iter_mut().zip(z) {
            *a = times_sigmoid(z, gelu_2u(z));
        }
    }
}

widest! {
    /// SiLU, z·σ(z): within 3.4 ulp where the value is normal (z > −87;
    /// 3.39 at z = −3.21, 1.5 for z ≥ 0) and 1.3e-6 absolute (1.27e-6 at
    /// z = 13.8, 1.3 ulp of the value).
    fn silu_forward(a: &mut [f32], z: &[f32]) {
        for (a, &z) in a.iter_mut().zip(z) {
            *a = times_sigmoid(z, z);
        }
    }
}

/// a = f(z)
pub fn activation_forward(a: &mut [f32], z: &[f32], act: Activation) {
    match act {
        Activation::Linear => {
            for (a, &z) in a.iter_mut().zip(z) {
                *a = z;
            }
        }
        Activation::Relu => {
            for (a, &z) in a.iter_mut().zip(z) {
                *a = z.max(0.0);
            }
        }
        Activation::LeakyRelu => {
            for (a, &z) in a.iter_mut().zip(z) {
                *a = if z > 0.0 { z } else { LEAKY_SLOPE * z };
            }
        }
        Activation::Tanh => tanh_forward(a, z),
        Activation::Sigmoid => sigmoid_forward(a, z),
        Activation::GeluTanh => gelu_tanh_forward(a, z),
        Activation::Silu => silu_forward(a, z),
    }
}

widest! {
    /// d/dz z·σ(2u) = σ(2u) + z·σ′(2u)·2k (1 + 3 c z²), σ′ = σ (1 − σ)
    /// taken without the 1 − σ (`sigmoid_and_slope`): within 2.2e-7
    /// absolute (2.13e-7 at z = 1.31; it crosses 0 near z = −0.75, so not
    /// in ulps). Past
    /// |z| ≈ 5e19, 3cz² overflows and 0·∞ gives NaN, as in the GPU
    /// kernels: a run that far gone is stopped in backward, on both.
    fn gelu_tanh_backward(grad: &mut [f32], z: &[f32]) {
        for (g, &z) in grad.iter_mut().zip(z) {
            let (s, slope) = sigmoid_and_slope(gelu_2u(z));
            *g *= s + z * slope * (2.0 * GELU_K) * (1.0 + 3.0 * GELU_C * z * z);
        }
    }
}

widest! {
    /// d/dz z σ(z) = σ + z σ (1 − σ): within 1.9e-7 absolute (1.80e-7 at
    /// z = 2.44; it crosses 0 near z = −1.28, so not in ulps).
    fn silu_backward(grad: &mut [f32], z: &[f32]) {
        for (g, &z) in grad.iter_mut().zip(z) {
            let (s, slope) = sigmoid_and_slope(z);
            *g *= s + z * slope;
        }
    }
}

/// In place: `grad` holds da = ∂L/∂a on entry and dz = da · f'(z) on exit
/// (the activation is not a parameter).
pub fn activation_backward(grad: &mut [f32], z: &[f32], a: &[f32], act: Activation) {
    match act {
        Activation::Linear => {}
        // As torch's threshold_backward: 0 at z = 0.
        Activation::Relu => {
            for (g, &z) in grad.iter_mut().zip(z) {
                *g *= f32::from(z > 0.0);
            }
        }
        Activation::LeakyRelu => {
            for (g, &z) in grad.iter_mut().zip(z) {
                *g *= if z > 0.0 { 1.0 } else { LEAKY_SLOPE };
            }
        }
        // tanh' = 1 − a², from the stored output.
        Activation::Tanh => {
            for (g, &a) in grad.iter_mut().zip(a) {
                *g *= 1.0 - a * a;
            }
        }
        // σ' = σ (1 − σ), from the stored output.
        Activation::Sigmoid => {
            for (g, &a) in grad.iter_mut().zip(a) {
                *g *= a * (1.0 - a);
            }
        }
        Activation::GeluTanh => gelu_tanh_backward(grad, z),
        Activation::Silu => silu_backward(grad, z),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Activation; 7] = [
        Activation::Linear,
        Activation::Relu,
        Activation::LeakyRelu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::GeluTanh,
        Activation::Silu,
    ];

    /// Central differences in f64 of the f32 forward: (f(z+h) − f(z−h)) / 2h,
    /// h = 1e-2. Truncation error O(h²·f''') ≈ 1e-4 and rounding
    /// ≈ 2·6e-8/2e-2 ≈ 6e-6, so 2e-3 absolute is a safe bound. Points sit
    /// away from the kinks of relu/leaky_relu at 0.
    #[test]
    fn finite_difference_check_every_activation() {
        let zs: Vec<f32> = vec![-3.1, -1.2, -0.37, 0.21, 0.8, 1.7, 2.9];
        let h = 1e-2f32;
        for act in ALL {
            let mut a = vec![0.0; zs.len()];
            activation_forward(&mut a, &zs, act);
            let mut dz = vec![1.0; zs.len()];
            activation_backward(&mut dz, &zs, &a, act);
            for (i, &z) in zs.iter().enumerate() {
                let (mut plus, mut minus) = ([0.0f32], [0.0f32]);
                activation_forward(&mut plus, &[z + h], act);
                activation_forward(&mut minus, &[z - h], act);
                let numeric = (plus[0] as f64 - minus[0] as f64) / (2.0 * h as f64);
                assert!((numeric - dz[i] as f64).abs() < 2e-3, "{act:?} at {z}: analytic {} numeric {numeric}", dz[i]);
            }
        }
    }

    #[test]
    fn values_match_pytorch_at_known_points() {
        // torch.nn.functional.gelu(torch.tensor(1.0), approximate="tanh") = 0.8411920
        // torch.nn.functional.silu(torch.tensor(1.0)) = 0.7310586
        let mut a = [0.0f32];
        activation_forward(&mut a, &[1.0], Activation::GeluTanh);
        assert!((a[0] - 0.841_192).abs() < 1e-6);
        activation_forward(&mut a, &[1.0], Activation::Silu);
        assert!((a[0] - 0.731_058_6).abs() < 1e-6);
        activation_forward(&mut a, &[-2.0], Activation::LeakyRelu);
        assert_eq!(a[0], -0.02);
    }

    /// f64 references: GELU(tanh) as z·σ(2u) and SiLU as z·σ(z), the same
    /// functions as ½ z (1 + tanh u) and z/(1 + e⁻ᶻ) with nothing that
    /// cancels in f64 either; their derivatives as the docs above.
    fn reference(act: Activation, z: f64) -> (f64, f64) {
        let sigma = |v: f64| 1.0 / (1.0 + (-v).exp());
        let (k, c) = (GELU_K as f64, GELU_C as f64);
        match act {
            Activation::GeluTanh => {
                let s = sigma(2.0 * k * (z + c * z * z * z));
                (z * s, s + z * s * (1.0 - s) * 2.0 * k * (1.0 + 3.0 * c * z * z))
            }
            Activation::Silu => {
                let s = sigma(z);
                (z * s, s + z * s * (1.0 - s))
            }
            _ => unreachable!(),
        }
    }

    fn ulps(got: f32, want: f64) -> f64 {
        let w = want.abs() as f32;
        (got as f64 - want).abs() / (f32::from_bits(w.to_bits() + 1) - w) as f64
    }

    /// The bounds in the docs of `gelu_tanh_forward`, `silu_forward` and
    /// their backwards, at every 4099th f32 bit pattern (about a million
    /// points, every finite f32 magnitude) and 200,001 points over
    /// [−10, 10]. Each bound is the worst over every finite f32, rounded
    /// up in its last digit.
    #[test]
    fn gelu_and_silu_are_within_their_stated_errors() {
        let grid = (0..=200_000).map(|i| -10.0 + 20.0 * i as f32 / 200_000.0);
        let zs: Vec<f32> =
            (0..=u32::MAX).step_by(4099).map(f32::from_bits).filter(|z| z.is_finite()).chain(grid).collect();
        // (activation, forward ulp bound where z ≥ lo, lo, forward absolute bound, backward absolute bound)
        let cases = [(Activation::GeluTanh, 1.86, 0.0, 5.2e-7, 2.2e-7), (Activation::Silu, 3.4, -87.0, 1.3e-6, 1.9e-7)];
        for (act, ulp_bound, lo, abs_bound, grad_bound) in cases {
            let mut a = vec![0.0; zs.len()];
            activation_forward(&mut a, &zs, act);
            let mut g = vec![1.0; zs.len()];
            activation_backward(&mut g, &zs, &a, act);
            for ((&z, &a), &g) in zs.iter().zip(&a).zip(&g) {
                let (want, want_grad) = reference(act, z as f64);
                assert!((a as f64 - want).abs() <= abs_bound, "{act:?}({z}) = {a}, want {want}");
                if z >= lo {
                    assert!(ulps(a, want) <= ulp_bound, "{act:?}({z}) = {a}, want {want}");
                }
                if (3.0 * GELU_C * z * z).is_finite() {
                    assert!((g as f64 - want_grad).abs() <= grad_bound, "{act:?}'({z}) = {g}, want {want_grad}");
                } else {
                    assert!(act != Activation::GeluTanh || g.is_nan(), "GELU'({z}) is NaN, as on the GPU");
                }
            }
        }
    }

    /// The forward loops compute what `math` states, in every lane: the
    /// same bits as the scalar functions over a slice of odd length.
    #[test]
    fn forward_loops_give_the_scalar_bits() {
        let zs: Vec<f32> = (0..1001).map(|i| -12.0 + 0.024 * i as f32).chain([f32::NAN, -0.0, 1e-30]).collect();
        let mut a = vec![0.0; zs.len()];
        activation_forward(&mut a, &zs, Activation::Tanh);
        assert!(zs.iter().zip(&a).all(|(&z, &a)| a.to_bits() == tanh(z).to_bits()));
        activation_forward(&mut a, &zs, Activation::Sigmoid);
        assert!(zs.iter().zip(&a).all(|(&z, &a)| a.to_bits() == sigmoid(z).to_bits()));
    }

    /// Forward checks only the pre-activations for NaN/Inf
    /// (`engine::forward_layer`): that holds because every activation
    /// maps a finite z to a finite a, here over a sample of every finite
    /// f32 (each 4,099th bit pattern) and the extremes.
    #[test]
    fn every_activation_maps_finite_to_finite() {
        let zs: Vec<f32> = (0..=u32::MAX)
            .step_by(4099)
            .map(f32::from_bits)
            .filter(|z| z.is_finite())
            .chain([f32::MAX, f32::MIN, f32::MIN_POSITIVE, -f32::MIN_POSITIVE, 0.0, -0.0])
            .collect();
        let mut a = vec![0.0; zs.len()];
        for act in ALL {
            activation_forward(&mut a, &zs, act);
            if let Some((z, a)) = zs.iter().zip(&a).find(|(_, a)| !a.is_finite()) {
                panic!("{act:?}({z}) = {a}");
            }
        }
    }
}
