//! LAMB (You et al., 2019, <https://arxiv.org/abs/1904.00962>) as
//! `optax.lamb` = scale_by_adam → add_decayed_weights → scale_by_trust_ratio
//! → scale by −lr (<https://optax.readthedocs.io/en/latest/api/optimizers.html#optax.lamb>).

use super::StepScalars;

/// One step over one tensor (the trust ratio is per tensor).
#[allow(clippy::too_many_arguments)]
pub fn lamb_step(
    params: &mut [f32],
    exp_avg: &mut [f32],
    exp_avg_sq: &mut [f32],
    grads: &[f32],
    scalars: &StepScalars,
    betas: [f64; 2],
    eps: f64,
    weight_decay: f64,
) {
    let [beta1, beta2] = betas;
    let (b1, b2) = (beta1 as f32, beta2 as f32);
    let (one_minus_b1, one_minus_b2) = ((1.0 - beta1) as f32, (1.0 - beta2) as f32);
    let (bias_correction1, bias_correction2) = (scalars.bias_correction1, scalars.bias_correction2);
    let (eps, wd) = (eps as f32, weight_decay as f32);
    // Pass 1: moments, the update direction r = m̂/(√v̂ + ε) + λ·p, and the
    // squared norms of p and r. r is kept in `grads`' place by recomputing
    // it in pass 2 (cheap), so no scratch buffer is needed.
    let direction = |m: f32, v: f32, p: f32| {
        let m_hat = m / bias_correction1;
        let v_hat = v / bias_correction2;
        m_hat / (v_hat.sqrt() + eps) + wd * p
    };
    let (mut param_sq, mut update_sq) = (0.0f32, 0.0f32);
    for i in 0..params.len() {
        let g = grads[i];
        // m ← (1 − β1)·g + β1·m;  v ← (1 − β2)·g² + β2·v
        exp_avg[i] = one_minus_b1 * g + b1 * exp_avg[i];
        exp_avg_sq[i] = one_minus_b2 * (g * g) + b2 * exp_avg_sq[i];
        let r = direction(exp_avg[i], exp_avg_sq[i], params[i]);
        param_sq += params[i] * params[i];
        update_sq += r * r;
    }
    // Trust ratio ‖p‖/‖r‖, 1 where either norm is 0.
    let (param_norm, update_norm) = (param_sq.sqrt(), update_sq.sqrt());
    let ratio = if param_norm == 0.0 || update_norm == 0.0 { 1.0 } else { param_norm / update_norm };
    let neg_lr = scalars.neg_lr;
    for i in 0..params.len() {
        let r = direction(exp_avg[i], exp_avg_sq[i], params[i]);
        params[i] += neg_lr * (r * ratio);
    }
}
