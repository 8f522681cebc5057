//! Elementwise activations, forward and backward. z is the pre-activation,
//! a = f(z) the output; both (B, O) and stored by the forward pass.

use crate::experiment::Activation;

/// √(2/π), for the tanh approximation of GELU.
const GELU_K: f32 = 0.797_884_6;
const GELU_C: f32 = 0.044_715;
/// PyTorch's default `LeakyReLU` negative slope.
pub const LEAKY_SLOPE: f32 = 0.01;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// a = f(z)
pub fn activation_forward(a: &mut [f32], z: &[f32], act: Activation) {
    for (a, &z) in a.iter_mut().zip(z) {
        *a = match act {
            Activation::Linear => z,
            Activation::Relu => z.max(0.0),
            Activation::LeakyRelu => {
                if z > 0.0 {
                    z
                } else {
                    LEAKY_SLOPE * z
                }
            }
            Activation::Tanh => z.tanh(),
            Activation::Sigmoid => sigmoid(z),
            // GELU(approximate="tanh"): ½ z (1 + tanh(k (z + c z³)))
            Activation::GeluTanh => 0.5 * z * (1.0 + (GELU_K * (z + GELU_C * z * z * z)).tanh()),
            // SiLU: z σ(z)
            Activation::Silu => z * sigmoid(z),
        };
    }
}

/// In place: `grad` holds da = ∂L/∂a on entry and dz = da · f'(z) on exit
/// (the activation is not a parameter).
pub fn activation_backward(grad: &mut [f32], z: &[f32], a: &[f32], act: Activation) {
    for i in 0..grad.len() {
        let (z, a) = (z[i], a[i]);
        let derivative = match act {
            Activation::Linear => 1.0,
            // As torch's threshold_backward: 0 at z = 0.
            Activation::Relu => f32::from(z > 0.0),
            Activation::LeakyRelu => {
                if z > 0.0 {
                    1.0
                } else {
                    LEAKY_SLOPE
                }
            }
            // tanh' = 1 − a²
            Activation::Tanh => 1.0 - a * a,
            // σ' = σ (1 − σ)
            Activation::Sigmoid => a * (1.0 - a),
            // d/dz ½ z (1 + t), t = tanh(u), u = k (z + c z³):
            // ½ (1 + t) + ½ z (1 − t²) k (1 + 3 c z²)
            Activation::GeluTanh => {
                let t = (GELU_K * (z + GELU_C * z * z * z)).tanh();
                0.5 * (1.0 + t) + 0.5 * z * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * z * z)
            }
            // d/dz z σ(z) = σ (1 + z (1 − σ))
            Activation::Silu => {
                let s = sigmoid(z);
                s * (1.0 + z * (1.0 - s))
            }
        };
        grad[i] *= derivative;
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
}
