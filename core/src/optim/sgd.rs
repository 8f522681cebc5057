//! SGD as `torch.optim.SGD`
//! (<https://pytorch.org/docs/stable/generated/torch.optim.SGD.html>).

use super::StepScalars;

/// On the first step the momentum buffer starts as the gradient.
#[allow(clippy::too_many_arguments)]
pub fn sgd_step(
    params: &mut [f32],
    momentum_buffer: &mut [f32],
    grads: &[f32],
    scalars: &StepScalars,
    momentum: f64,
    dampening: f64,
    nesterov: bool,
    weight_decay: f64,
) {
    let (wd, mu) = (weight_decay as f32, momentum as f32);
    let one_minus_dampening = (1.0 - dampening) as f32;
    let neg_lr = scalars.neg_lr;
    for i in 0..params.len() {
        let p = params[i];
        // g ← g + λ·p
        let mut g = grads[i];
        if weight_decay != 0.0 {
            g += wd * p;
        }
        if momentum != 0.0 {
            // b ← g on the first step, else b ← μ·b + (1 − τ)·g
            let b = if scalars.first_step == 1 { g } else { momentum_buffer[i] * mu + one_minus_dampening * g };
            momentum_buffer[i] = b;
            // nesterov: g ← g + μ·b, else g ← b
            g = if nesterov { g + mu * b } else { b };
        }
        // p ← p − lr·g
        params[i] = p + neg_lr * g;
    }
}
