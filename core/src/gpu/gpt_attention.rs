//! The transformer's two attention variants on the GPU engine, and the
//! timing that picks one per adapter and shape (as `gpu::matmul` picks its
//! variants): the same sums in the same order either way, only the speed
//! differs.

use std::sync::Mutex;

use super::launch;
use super::timing::{seconds_per_dispatch, Seeded};
use super::GpuContext;
use crate::error::Result;

/// Two ways to run attention's forward and its query rows' backward, the
/// same sums in the same order (the same values): a workgroup of 64 per
/// query row, its scores in workgroup memory behind barriers, or an
/// invocation per query row that takes its scores again instead of keeping
/// them and needs no barrier. The engine times both at the run's shape on
/// the adapter and keeps the faster (`GpuEngine::choose_attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionVariant {
    Workgroup,
    Rows,
}

impl AttentionVariant {
    pub const ALL: [AttentionVariant; 2] = [AttentionVariant::Workgroup, AttentionVariant::Rows];

    pub fn name(self) -> &'static str {
        match self {
            AttentionVariant::Workgroup => "a workgroup per query row",
            AttentionVariant::Rows => "an invocation per query row",
        }
    }
}

/// Seconds by adapter and attention shape (B, T, C, H): [workgroup, rows].
pub(super) static ATTENTION_TIMES: Mutex<Vec<(String, [f64; 2])>> = Mutex::new(Vec::new());

/// Seconds of one attention forward and one query-row backward of
/// `variant` at (B, T, C, H) on seeded data.
pub async fn time_attention(
    ctx: &GpuContext,
    variant: AttentionVariant,
    (b, t, c, h): (usize, usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let mut seeded = Seeded::new(&ctx.device, (b * 31 + t * 7 + c) as u64, 9);
    let rows = b * t;
    let (qkv, y, att) =
        (seeded.buffer("qkv", rows * 3 * c), seeded.buffer("y", rows * c), seeded.buffer("att", b * h * t * t));
    let (dqkv, ds, dy) =
        (seeded.buffer("dqkv", rows * 3 * c), seeded.buffer("ds", b * h * t * t), seeded.buffer("dy", rows * c));
    let (forward, query) = match variant {
        AttentionVariant::Workgroup => {
            (launch::attention_forward(b, t, c, h), launch::attention_backward_query(b, t, c, h))
        }
        AttentionVariant::Rows => {
            (launch::attention_forward_rows(b, t, c, h), launch::attention_backward_query_rows(b, t, c, h))
        }
    };
    let forward = forward.bind(ctx, "timed attention forward", [&y, &att, &qkv]);
    let query = query.bind(ctx, "timed attention backward", [&dqkv, &ds, &dy, &qkv, &att]);
    let mut seconds = 0.0;
    for d in [forward, query] {
        seconds += seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await?;
    }
    Ok(seconds)
}

/// Seconds of one key-column backward (`attention_backward_key`, the same
/// in both variants) at (B, T, C, H) on seeded data.
pub async fn time_attention_key(
    ctx: &GpuContext,
    (b, t, c, h): (usize, usize, usize, usize),
    target_s: f64,
) -> Result<f64> {
    let mut seeded = Seeded::new(&ctx.device, (b * 31 + t * 7 + c) as u64, 10);
    let rows = b * t;
    let (dqkv, dy, qkv) =
        (seeded.buffer("dqkv", rows * 3 * c), seeded.buffer("dy", rows * c), seeded.buffer("qkv", rows * 3 * c));
    let (att, ds) = (seeded.buffer("att", b * h * t * t), seeded.buffer("ds", b * h * t * t));
    let d = launch::attention_backward_key(b, t, c, h).bind(ctx, "timed attention key", [&dqkv, &dy, &qkv, &att, &ds]);
    seconds_per_dispatch(ctx, d.kernel, &d.bind_group, d.grid, target_s).await
}
