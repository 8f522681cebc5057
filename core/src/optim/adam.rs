//! Adam and AdamW as `torch.optim.Adam` / `torch.optim.AdamW`
//! (<https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html>),
//! following the single-tensor code path operation by operation.

use super::StepScalars;

/// torch's `lerp`: a + w·(b − a) for w < 0.5, else b − (b − a)·(1 − w).
fn lerp(a: f32, b: f32, w: f32) -> f32 {
    if w < 0.5 {
        a + w * (b - a)
    } else {
        b - (b - a) * (1.0 - w)
    }
}

/// One step. `decoupled` selects
/// AdamW's decay p ← p·(1 − lr·λ) instead of Adam's g ← g + λ·p.
#[allow(clippy::too_many_arguments)]
pub fn adam_step(
    params: &mut [f32],
    exp_avg: &mut [f32],
    exp_avg_sq: &mut [f32],
    grads: &[f32],
    scalars: &StepScalars,
    betas: [f64; 2],
    eps: f64,
    weight_decay: f64,
    decoupled: bool,
) {
    let [beta1, beta2] = betas;
    // Bias corrections come in f64-computed, as torch's Python floats.
    let neg_step_size = scalars.neg_step_size;
    let bias_correction2_sqrt = scalars.bias_correction2_sqrt;
    let decay = scalars.decay;
    let (wd, eps) = (weight_decay as f32, eps as f32);
    let (one_minus_beta1, beta2_f, one_minus_beta2) = ((1.0 - beta1) as f32, beta2 as f32, (1.0 - beta2) as f32);
    for i in 0..params.len() {
        let mut p = params[i];
        let mut g = grads[i];
        if decoupled {
            p *= decay;
        } else if weight_decay != 0.0 {
            g += wd * p;
        }
        // m ← lerp(m, g, 1 − β1)
        let m = lerp(exp_avg[i], g, one_minus_beta1);
        // v ← β2·v + (1 − β2)·g²
        let v = exp_avg_sq[i] * beta2_f + one_minus_beta2 * g * g;
        // p ← p − (lr / bc1) · m / (√v / √bc2 + ε)
        let denom = v.sqrt() / bias_correction2_sqrt + eps;
        params[i] = p + neg_step_size * m / denom;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
    }
}
