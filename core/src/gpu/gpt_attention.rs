//! The transformer's two attention variants on the GPU engine, and the
//! timing that picks one per adapter and shape (as `gpu::matmul` picks its
//! variants): the same sums in the same order either way, only the speed
//! differs.

use std::sync::Mutex;

use super::engine::GpuEngine;
use super::launch;
use super::probe::{seconds_per_dispatch, Seeded};
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
static ATTENTION_TIMES: Mutex<Vec<(String, [f64; 2])>> = Mutex::new(Vec::new());

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

impl GpuEngine {
    /// The attention kernels the plan records (a transformer's).
    pub fn attention(&self) -> Option<AttentionVariant> {
        self.buffers.gpt.as_ref().map(|g| g.attention)
    }

    /// Records `variant`'s attention kernels from the next step on: the
    /// same values either way (twin-tested), only the speed differs.
    pub fn set_attention(&mut self, variant: AttentionVariant) -> Result<()> {
        match self.buffers.gpt.as_mut() {
            Some(g) if g.attention != variant => g.attention = variant,
            _ => return Ok(()),
        }
        self.rebuild_plan()
    }

    /// Times both attention variants at this run's shape on this adapter
    /// (or takes the figures measured before) and records the faster:
    /// [workgroup, rows] seconds of a forward and a query-row backward, or
    /// None for an MLP.
    pub async fn choose_attention(&mut self) -> Result<Option<[f64; 2]>> {
        let Some(shape) = self.layout.gpt else { return Ok(None) };
        let dims = (self.experiment.batch_size, shape.context, shape.embed, shape.heads);
        let key = format!("{}|{dims:?}", self.ctx.describe());
        let cached =
            ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|(k, _)| *k == key).map(|c| c.1);
        let seconds = match cached {
            Some(s) => s,
            None => {
                let mut s = [0.0; 2];
                for (i, v) in AttentionVariant::ALL.into_iter().enumerate() {
                    s[i] = time_attention(&self.ctx, v, dims, 2e-3).await?;
                }
                ATTENTION_TIMES.lock().unwrap_or_else(|p| p.into_inner()).push((key, s));
                s
            }
        };
        // Ties (within 5 %) keep a workgroup per row, the one that scales to long windows.
        let variant = if seconds[1] < 0.95 * seconds[0] { AttentionVariant::Rows } else { AttentionVariant::Workgroup };
        self.set_attention(variant)?;
        Ok(Some(seconds))
    }
}
