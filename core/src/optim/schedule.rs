//! Learning-rate schedules; `t` is the 0-based optimizer step, computed in
//! f64. Warmup: lr·(t+1)/W for t < W. Then p = clamp((t−W)/max(1, T−W), 0, 1)
//! and cosine: min + (lr − min)·½(1 + cos πp); linear: min + (lr − min)(1 − p).

use crate::experiment::Schedule;

pub fn learning_rate(schedule: &Schedule, base_lr: f64, t: u64) -> f64 {
    let (warmup, total, min_lr, cosine) = match *schedule {
        Schedule::Constant => return base_lr,
        Schedule::WarmupCosine { warmup_steps, total_steps, min_lr } => (warmup_steps, total_steps, min_lr, true),
        Schedule::WarmupLinear { warmup_steps, total_steps, min_lr } => (warmup_steps, total_steps, min_lr, false),
    };
    if t < warmup {
        return base_lr * (t + 1) as f64 / warmup as f64;
    }
    let progress = ((t - warmup) as f64 / total.saturating_sub(warmup).max(1) as f64).clamp(0.0, 1.0);
    let factor = if cosine { 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()) } else { 1.0 - progress };
    min_lr + (base_lr - min_lr) * factor
}
