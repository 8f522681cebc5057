//! Global gradient-norm clipping as `torch.nn.utils.clip_grad_norm_`
//! (<https://pytorch.org/docs/stable/generated/torch.nn.utils.clip_grad_norm_.html>):
//! total = ‖(‖g_1‖, …, ‖g_n‖)‖₂ over the tensors; every gradient is scaled
//! by min(1, max_norm / (total + 1e-6)).

use crate::model::TensorInfo;

/// Per-tensor L2 norms (sums of squares in f64, then f32, which stays
/// within an ulp of torch's pairwise f32 reduction), combined as torch does.
pub fn global_grad_norm(grads: &[f32], tensors: &[TensorInfo]) -> f32 {
    let mut total_sq = 0.0f32;
    for t in tensors {
        let sq: f64 = grads[t.offset..t.offset + t.len].iter().map(|&g| g as f64 * g as f64).sum();
        let norm = sq.sqrt() as f32;
        total_sq += norm * norm;
    }
    total_sq.sqrt()
}

/// Scales `grads` in place; returns whether they were scaled down.
pub fn clip_grad_norm(grads: &mut [f32], total_norm: f32, max_norm: f64) -> bool {
    let coef = max_norm as f32 / (total_norm + 1e-6);
    if coef < 1.0 {
        for g in grads.iter_mut() {
            *g *= coef;
        }
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensors() -> Vec<TensorInfo> {
        vec![
            TensorInfo { name: "a".into(), shape: vec![2], offset: 0, len: 2, is_weight: true, decays: true },
            TensorInfo { name: "b".into(), shape: vec![1], offset: 2, len: 1, is_weight: false, decays: true },
        ]
    }

    /// By hand: g = [3, 0 | 4]: norms 3 and 4, total 5. max_norm 1 scales by
    /// 1/(5 + 1e-6); max_norm 10 leaves g alone.
    #[test]
    fn worked_by_hand() {
        let mut g = [3.0f32, 0.0, 4.0];
        let norm = global_grad_norm(&g, &tensors());
        assert_eq!(norm, 5.0);
        assert!(!clip_grad_norm(&mut g, norm, 10.0));
        assert_eq!(g, [3.0, 0.0, 4.0]);
        assert!(clip_grad_norm(&mut g, norm, 1.0));
        let coef = 1.0f32 / (5.0 + 1e-6);
        assert_eq!(g, [3.0 * coef, 0.0, 4.0 * coef]);
        assert!((global_grad_norm(&g, &tensors()) - 1.0).abs() < 1e-6);
    }
}
