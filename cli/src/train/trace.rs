//! `stepscope train --trace FILE`: each step's phases on the host clock,
//! and on the GPU engine its timed passes, recorded as the run goes and
//! written as a Kineto-shaped trace (`stepscope_core::export::trace`) when
//! it ends: `.json`, or gzip-compressed for `.json.gz`. A run on several
//! ranks writes one trace per rank, as torchrun's ranks do: rank 0's at the
//! path given, rank r's beside it with `.rank{r}` before the extension
//! (`rank_path`), so `stepscope open` and HTA read them as a torchrun run's.

use std::io::Write;

use web_time::Instant;

use stepscope_core::engine::{PhaseTimes, RankTimes};
use stepscope_core::export::trace::{rank_traces, tile, Part, Span, TraceInfo, TraceStep, DATA_EVENT};
use stepscope_core::gpu::{GpuPass, PassKind};
use stepscope_core::StepMetrics;

use crate::{files, say, Failure};

/// Steps a trace keeps (the first ones): a profiler's window, not a log;
/// about a megabyte of JSON per thousand steps.
pub(crate) const MAX_TRACE_STEPS: usize = 10_000;

/// Where rank `rank`'s trace goes, for a run traced to `path`: the path
/// itself for rank 0, else `.rank{rank}` before its `.json` or `.json.gz`
/// (or at its end).
pub(crate) fn rank_path(path: &str, rank: u32) -> String {
    if rank == 0 {
        return path.to_string();
    }
    let at = [".json.gz", ".json"].iter().find_map(|ext| path.strip_suffix(ext).map(|stem| stem.len()));
    match at {
        Some(at) => format!("{}.rank{rank}{}", &path[..at], &path[at..]),
        None => format!("{path}.rank{rank}"),
    }
}

pub(crate) struct TraceRecorder {
    path: String,
    origin: Instant,
    steps: Vec<TraceStep>,
    /// Each kept step's ranks (`StepMetrics::ranks`).
    ranks: Vec<Vec<RankTimes>>,
    parts: Vec<Part>,
    gpu: Vec<Span>,
    submit_us: Option<f64>,
    extra: Vec<Span>,
    step_start: Option<f64>,
    dropped: u64,
}

/// The phases whose times grew from `before` to `after`, in the order a
/// step runs them, with the milliseconds each grew by.
fn grown(before: &PhaseTimes, after: &PhaseTimes) -> Vec<(&'static str, f64)> {
    [
        (DATA_EVENT, after.data_ms - before.data_ms),
        ("forward", after.forward_ms - before.forward_ms),
        ("backward", after.backward_ms - before.backward_ms),
        ("communication", after.communication_ms - before.communication_ms),
        ("optimizer", after.optimizer_ms - before.optimizer_ms),
    ]
    .into_iter()
    .filter(|(_, ms)| *ms > 0.0)
    .collect()
}

impl TraceRecorder {
    pub(crate) fn new(path: &str, origin: Instant) -> TraceRecorder {
        TraceRecorder {
            path: path.to_string(),
            origin,
            steps: Vec::new(),
            ranks: Vec::new(),
            parts: Vec::new(),
            gpu: Vec::new(),
            submit_us: None,
            extra: Vec::new(),
            step_start: None,
            dropped: 0,
        }
    }

    fn us(&self, t: Instant) -> f64 {
        (t - self.origin).as_secs_f64() * 1e6
    }

    fn full(&self) -> bool {
        self.steps.len() >= MAX_TRACE_STEPS
    }

    /// One part of a CPU step: its wall-clock span and the engine's phase
    /// times before and after it.
    pub(crate) fn part(&mut self, start: Instant, end: Instant, before: &PhaseTimes, after: &PhaseTimes) {
        if self.full() {
            return;
        }
        let (s, e) = (self.us(start), self.us(end));
        self.step_start.get_or_insert(s);
        self.parts.push((s, e, grown(before, after)));
    }

    /// A whole GPU step: the host's span (its data preparation, then the
    /// submit and the wait for the readback) and the GPU's passes, placed
    /// on the host clock with the last pass ending when the readback came
    /// (no later than that, no earlier than the step's start: the GPU's
    /// clock is not the host's).
    pub(crate) fn gpu_step(&mut self, start: Instant, end: Instant, m: &StepMetrics, passes: &[GpuPass]) {
        if self.full() {
            return;
        }
        let (s, e) = (self.us(start), self.us(end));
        self.step_start.get_or_insert(s);
        let gpu_data: f64 = passes.iter().filter(|p| p.kind == PassKind::Data).map(|p| p.end_ms - p.start_ms).sum();
        let cpu_data = (m.phases.data_ms - gpu_data).max(0.0);
        self.parts.push((s, e, vec![(DATA_EVENT, cpu_data), ("submit and wait for the GPU", (e - s) / 1e3)]));
        self.submit_us = Some((s + cpu_data * 1e3).min(e));
        let last = passes.iter().map(|p| p.end_ms).fold(0.0, f64::max);
        let offset = s.max(e - last * 1e3);
        self.gpu.extend(passes.iter().map(|p| Span {
            name: p.kind.name().to_string(),
            start_us: offset + p.start_ms * 1e3,
            end_us: offset + p.end_ms * 1e3,
        }));
    }

    /// A span of the CLI's own after the step (checkpoint, logging).
    pub(crate) fn span(&mut self, name: &str, start: Instant, end: Instant) {
        if !self.full() && self.step_start.is_some() {
            self.extra.push(Span { name: name.to_string(), start_us: self.us(start), end_us: self.us(end) });
        }
    }

    /// Ends the step `m` at `end`.
    pub(crate) fn end_step(&mut self, m: &StepMetrics, end: Instant) {
        let Some(start) = self.step_start.take() else {
            self.dropped += 1;
            return;
        };
        let mut phases = tile(&std::mem::take(&mut self.parts));
        phases.append(&mut self.extra);
        // The CLI's few microseconds between one phase and the next (its
        // bookkeeping) go to the phase before, so the phases tile the step.
        let end = self.us(end);
        for i in 0..phases.len() {
            let next = phases.get(i + 1).map_or(end, |p| p.start_us);
            phases[i].end_us = phases[i].end_us.max(next);
        }
        self.ranks.push(m.ranks.clone());
        self.steps.push(TraceStep {
            step: m.step,
            start_us: start,
            end_us: phases.last().map_or(end, |p| p.end_us),
            phases,
            gpu: std::mem::take(&mut self.gpu),
            submit_us: self.submit_us.take(),
            loss: m.loss,
            grad_norm: m.grad_norm,
            lr: m.lr,
        });
    }

    /// Writes the trace, one file per rank (gzip for a name ending in
    /// `.gz`).
    pub(crate) fn finish(self, device: Option<String>) -> Result<(), Failure> {
        let info = TraceInfo { pid: std::process::id(), rank: 0, world_size: 1, device };
        let traces = rank_traces(&info, &self.steps, &self.ranks);
        let mut written = Vec::new();
        for (rank, json) in traces {
            let bytes = if self.path.ends_with(".gz") {
                let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(json.as_bytes())
                    .and_then(|()| gz.finish())
                    .map_err(|e| Failure { message: format!("--trace: compressing: {e}"), status: 1 })?
            } else {
                json.into_bytes()
            };
            let path = rank_path(&self.path, rank);
            files::write_atomic(&path, &bytes)?;
            written.push(path);
        }
        let more = if self.dropped > 0 {
            format!(" (the first {MAX_TRACE_STEPS}; later steps not kept)")
        } else {
            String::new()
        };
        match written.len() {
            1 => say!("trace of {} steps{more} written to {}", self.steps.len(), self.path),
            n => say!(
                "traces of {} steps{more} on {n} ranks written to {} (one per rank, as torchrun's: `stepscope open` them together)",
                self.steps.len(),
                written.join(", ")
            ),
        }
        Ok(())
    }
}
