//! Runs from outside, opened read-only: metrics logs (JSON Lines from
//! `stepscope train --metrics` or the exported PyTorch script, one file per
//! rank), Stepscope traces (`--trace`, `download-trace`) and PyTorch
//! profiler traces (Kineto's Trace Event JSON, `.json` or `.json.gz`). Each
//! becomes steps with their phases in milliseconds, so the step anatomy can
//! be drawn for a run that happened elsewhere: the share of time spent
//! waiting for data, the GPU's idle share, and each rank's step time.
//!
//! Everything here is hostile until checked: sizes are bounded before
//! anything is decompressed or parsed, a gzip stream stops at its limit (a
//! gzip bomb is refused, not inflated), JSON nesting is bounded by the
//! parser, and a log whose steps go backwards or a trace whose steps
//! overlap is refused with a message naming the line or event.

use std::io::Read;

use crate::error::{Error, Result};
use crate::input;

mod metrics;
mod trace;

pub use metrics::read_metrics_log;
use trace::read_trace;

/// Largest file read (compressed or not).
pub const MAX_RUN_FILE_BYTES: usize = 256 << 20;
/// Largest trace once decompressed.
pub const MAX_TRACE_JSON_BYTES: usize = 512 << 20;

/// How much one opening may read: the command line's limits, or the
/// page's smaller ones (its worker's WebAssembly memory holds the files,
/// their text and the parsed events at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunLimits {
    /// All files together, as given (compressed or not).
    pub total_bytes: usize,
    /// Each file once decompressed.
    pub json_bytes: usize,
}

impl RunLimits {
    pub const CLI: RunLimits = RunLimits { total_bytes: MAX_RUN_FILE_BYTES * 4, json_bytes: MAX_TRACE_JSON_BYTES };
    pub const PAGE: RunLimits = RunLimits { total_bytes: 64 << 20, json_bytes: 128 << 20 };

    /// Fails, before anything is read, when files said to be these sizes
    /// (regular files' metadata, the page's Blob sizes) pass a limit; the
    /// reading holds each file to its limit all the same.
    pub fn check_sizes<'a>(&self, files: impl IntoIterator<Item = (&'a str, u64)>) -> Result<()> {
        let mut total = 0u64;
        for (name, size) in files {
            input::check_size(size, MAX_RUN_FILE_BYTES as u64, name)?;
            total = total.saturating_add(size);
            if total > self.total_bytes as u64 {
                return bad(
                    name,
                    format!(
                        "{total} bytes with the files before it, more than the {} opened at once here",
                        self.total()
                    ),
                );
            }
        }
        Ok(())
    }

    /// The next file of an opening, `read` bytes read before it: held to
    /// the per-file limit or to what the total leaves, whichever is
    /// smaller, so the total is checked before each next read.
    pub fn read_next<R: Read>(&self, reader: R, name: &str, read: u64) -> Result<Vec<u8>> {
        let left = (self.total_bytes as u64).saturating_sub(read);
        let mut file = input::BoundedRead::new(reader, left.min(MAX_RUN_FILE_BYTES as u64), name);
        if left < MAX_RUN_FILE_BYTES as u64 {
            file = file.refused_as(format!(
                "larger than the {left} bytes left of the {} opened at once here after the files before it: refused",
                self.total()
            ));
        }
        while !file.advance()? {}
        Ok(file.finish())
    }

    fn total(&self) -> String {
        input::size_words(self.total_bytes as u64)
    }
}

/// Most steps a file may hold.
pub const MAX_RUN_STEPS: usize = 1_000_000;
/// Most ranks opened at once.
pub const MAX_RANKS: usize = 1024;
/// Longest duration believed, in ms (a day): longer is a broken clock.
const MAX_MS: f64 = 86_400_000.0;

/// Where waiting for data starts to matter, and where it dominates (the
/// shares of step time the slow-loader lesson teaches).
pub const DATA_NOTICEABLE: f64 = 0.05;
pub const DATA_BOTTLENECK: f64 = 0.2;
/// A rank whose compute is this much slower than the median rank's is a
/// straggler.
pub const STRAGGLER: f64 = 1.1;

/// What a share of step time spent waiting for data means.
pub fn data_verdict(share: f64) -> &'static str {
    if share >= DATA_BOTTLENECK {
        "the data loader is the bottleneck: the step waits for its rows; load ahead (prefetch, more workers)"
    } else if share >= DATA_NOTICEABLE {
        "noticeable: loading ahead would win some of it back"
    } else {
        "the data loader keeps up"
    }
}

/// One rank against the others. Synchronised ranks (DDP's, or
/// Stepscope's) end each step together, so their step times agree and a
/// straggler shows in its work before the all-reduce (data, forward and
/// backward), which the others make up for by waiting in communication.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankRow {
    pub rank: u32,
    /// Its median step, ms.
    pub step_ms: f64,
    /// Its median work before the all-reduce (data, forward and backward),
    /// ms, and that against the median over ranks.
    pub compute_ms: f64,
    pub ratio: f64,
    pub straggler: bool,
    /// Its share of step time in communication.
    pub communication_share: f64,
}

/// What a file held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Metrics,
    StepscopeTrace,
    TorchTrace,
}

impl RunKind {
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Metrics => "metrics",
            RunKind::StepscopeTrace => "stepscope-trace",
            RunKind::TorchTrace => "torch-trace",
        }
    }
}

/// One step: its wall time and the phases measured in it, in the order
/// they ran (`data`, `forward`, `backward`, `optimizer`, `communication`,
/// `checkpoint`, `logging`, and `other` for the rest of a traced step).
#[derive(Clone, Debug, PartialEq)]
pub struct OpenedStep {
    pub step: u64,
    pub wall_ms: f64,
    pub phases: Vec<(&'static str, f64)>,
    /// The step's loss, gradient norm and learning rate, where the file
    /// has them (a metrics log's fields, a Stepscope trace's counters).
    pub loss: Option<f64>,
    pub grad_norm: Option<f64>,
    pub lr: Option<f64>,
}

impl OpenedStep {
    pub fn phase_ms(&self, name: &str) -> f64 {
        // From +0.0: an empty sum of f64 is −0.0, which prints as "-0.0".
        self.phases.iter().filter(|(n, _)| *n == name).fold(0.0, |sum, (_, ms)| sum + ms)
    }
}

/// One rank's steps, and its GPU's busy and spanned time where the file
/// has GPU events.
#[derive(Clone, Debug, PartialEq)]
pub struct RankRun {
    pub rank: u32,
    pub steps: Vec<OpenedStep>,
    pub gpu: Option<GpuTime>,
}

/// The GPU's time as Holistic Trace Analysis's temporal breakdown splits
/// it (over the steps before the last, where there are several): the span from its first event to its last; busy, the union of its
/// events; of that, compute (the union of computation kernels), then
/// communication (NCCL kernels) and memory (copies, sets, syncs) where no
/// computation ran. Idle is the span less busy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GpuTime {
    pub busy_ms: f64,
    pub span_ms: f64,
    pub compute_ms: f64,
    pub communication_ms: f64,
    pub memory_ms: f64,
    /// The longest stretch with nothing on the GPU.
    pub longest_gap_ms: f64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct OpenedRun {
    pub kind: RunKind,
    pub ranks: Vec<RankRun>,
}

fn bad<T>(what: &str, why: String) -> Result<T> {
    Err(Error::Other(format!("{what}: {why}")))
}

/// The names a step's phases go by in the files, and what they are.
fn phase_of(name: &str) -> Option<&'static str> {
    Some(match name {
        _ if name.starts_with("enumerate(DataLoader)") => "data",
        "forward" => "forward",
        "backward" => "backward",
        "optimizer" => "optimizer",
        "communication" => "communication",
        "checkpoint" => "checkpoint",
        "logging" => "logging",
        "submit and wait for the GPU" => "gpu wait",
        "page" => "page",
        _ => return None,
    })
}

/// Opens `files` (name, bytes) as one run: one metrics log per rank, or
/// traces (each its rank from `distributedInfo`). Mixed kinds are refused.
pub fn open_run(files: &[(&str, &[u8])]) -> Result<OpenedRun> {
    open_run_within(files, RunLimits::CLI)
}

/// `open_run` within `limits`: past them, refused with the limit named.
pub fn open_run_within(files: &[(&str, &[u8])], limits: RunLimits) -> Result<OpenedRun> {
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    if total > limits.total_bytes {
        return bad("open", format!("{total} bytes in all; at most {} are opened at once here", limits.total_bytes));
    }
    if files.is_empty() {
        return bad("open", "no file given".into());
    }
    if files.len() > MAX_RANKS {
        return bad("open", format!("{} files; at most {MAX_RANKS} ranks are opened at once", files.len()));
    }
    let mut kind: Option<RunKind> = None;
    let mut ranks = Vec::new();
    let mut taken = [false; MAX_RANKS];
    for (i, (name, bytes)) in files.iter().enumerate() {
        if bytes.len() > MAX_RUN_FILE_BYTES {
            return bad(name, format!("{} bytes; at most {MAX_RUN_FILE_BYTES} are read", bytes.len()));
        }
        let (this, rank) = open_file(name, bytes, i as u32, limits.json_bytes)?;
        if let Some(k) = kind.filter(|&k| k != this) {
            return bad(
                name,
                format!("a {} file among {} files: open one run's files together", this.name(), k.name()),
            );
        }
        kind = Some(this);
        trace::tally(1);
        // Readers give ranks below MAX_RANKS: a table, not a search.
        if std::mem::replace(&mut taken[rank.rank as usize], true) {
            return bad(name, format!("rank {} appears in two files", rank.rank));
        }
        ranks.push(rank);
    }
    ranks.sort_by_key(|r| r.rank);
    Ok(OpenedRun { kind: kind.expect("at least one file"), ranks })
}

fn open_file(name: &str, bytes: &[u8], index: u32, json_limit: usize) -> Result<(RunKind, RankRun)> {
    let json = if bytes.starts_with(&[0x1f, 0x8b]) { gunzip_limited(name, bytes, json_limit)? } else { bytes.to_vec() };
    let first = json.iter().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') {
        return bad(name, "neither a metrics log (JSON Lines) nor a trace (a JSON object)".into());
    }
    // A trace is one object holding `traceEvents`; a metrics log is one
    // object per line.
    let text = std::str::from_utf8(&json).map_err(|e| Error::Other(format!("{name}: not UTF-8 text: {e}")))?;
    if text.contains("\"traceEvents\"") {
        let (kind, rank) = read_trace(name, text)?;
        Ok((kind, rank))
    } else {
        Ok((RunKind::Metrics, read_metrics_log(name, text, index)?))
    }
}

/// Inflates at most `limit` bytes: a larger stream is refused.
fn gunzip_limited(name: &str, bytes: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut limited = flate2::read::GzDecoder::new(bytes).take(limit as u64 + 1);
    limited.read_to_end(&mut out).map_err(|e| Error::Other(format!("{name}: not a readable gzip stream ({e})")))?;
    if out.len() > limit {
        return bad(name, format!("inflates past {limit} bytes: refused"));
    }
    Ok(out)
}

impl OpenedRun {
    /// Steps over all ranks.
    pub fn steps(&self) -> usize {
        self.ranks.iter().map(|r| r.steps.len()).sum()
    }

    /// The share of step time spent in the data phase, over all ranks.
    pub fn data_share(&self) -> f64 {
        let (mut data, mut wall) = (0.0, 0.0);
        for s in self.ranks.iter().flat_map(|r| &r.steps) {
            data += s.phase_ms("data");
            wall += s.wall_ms;
        }
        if wall > 0.0 {
            data / wall
        } else {
            0.0
        }
    }

    /// The GPU's idle share of its span, over the ranks that have GPU
    /// events; None where none has.
    pub fn gpu_idle_share(&self) -> Option<f64> {
        self.gpu_breakdown().map(|[.., idle]| idle)
    }

    /// The GPU's time over the ranks that have GPU events, as shares of
    /// their spans: (compute, communication, memory, idle), adding up to 1.
    pub fn gpu_breakdown(&self) -> Option<[f64; 4]> {
        let sum = self.ranks.iter().filter_map(|r| r.gpu).fold(GpuTime::default(), |a, g| GpuTime {
            busy_ms: a.busy_ms + g.busy_ms,
            span_ms: a.span_ms + g.span_ms,
            compute_ms: a.compute_ms + g.compute_ms,
            communication_ms: a.communication_ms + g.communication_ms,
            memory_ms: a.memory_ms + g.memory_ms,
            longest_gap_ms: a.longest_gap_ms.max(g.longest_gap_ms),
        });
        (sum.span_ms > 0.0).then(|| {
            let share = |ms: f64| ms / sum.span_ms;
            [share(sum.compute_ms), share(sum.communication_ms), share(sum.memory_ms), share(sum.span_ms - sum.busy_ms)]
        })
    }

    /// The longest stretch with nothing on any rank's GPU, ms.
    pub fn gpu_longest_gap_ms(&self) -> Option<f64> {
        self.ranks.iter().filter_map(|r| r.gpu).map(|g| g.longest_gap_ms).reduce(f64::max)
    }

    /// Each rank's median step time, ms.
    pub fn rank_step_ms(&self) -> Vec<(u32, f64)> {
        self.ranks.iter().map(|r| (r.rank, median(r.steps.iter().map(|s| s.wall_ms).collect()))).collect()
    }

    /// Each rank's median work before the all-reduce against the median
    /// over ranks, and its
    /// share of time in communication.
    pub fn rank_rows(&self) -> Vec<RankRow> {
        let computes: Vec<f64> = self.ranks.iter().map(|r| median(r.steps.iter().map(compute_ms).collect())).collect();
        let median_ms = median(computes.clone());
        self.rank_step_ms()
            .into_iter()
            .zip(&self.ranks)
            .zip(computes)
            .map(|(((rank, step_ms), r), compute_ms)| {
                let ratio = compute_ms / median_ms.max(f64::MIN_POSITIVE);
                let wall: f64 = r.steps.iter().map(|s| s.wall_ms).sum();
                let communication: f64 = r.steps.iter().map(|s| s.phase_ms("communication")).sum();
                RankRow {
                    rank,
                    step_ms,
                    compute_ms,
                    ratio,
                    straggler: ratio >= STRAGGLER,
                    communication_share: if wall > 0.0 { communication / wall } else { 0.0 },
                }
            })
            .collect()
    }

    /// Mean milliseconds of each phase per step, over all ranks, in the
    /// order they first appear.
    pub fn mean_phases(&self) -> Vec<(&'static str, f64)> {
        let mut sums: Vec<(&'static str, f64)> = Vec::new();
        for s in self.ranks.iter().flat_map(|r| &r.steps) {
            for &(p, ms) in &s.phases {
                match sums.iter_mut().find(|(n, _)| *n == p) {
                    Some(entry) => entry.1 += ms,
                    None => sums.push((p, ms)),
                }
            }
        }
        let n = self.steps().max(1) as f64;
        sums.into_iter().map(|(p, ms)| (p, ms / n)).collect()
    }
}

/// A step's work before its all-reduce: its data, forward and backward
/// (what a rank does before it can join the others), or where the file
/// has none of them, its wall time less its communication.
fn compute_ms(s: &OpenedStep) -> f64 {
    let before = s.phase_ms("data") + s.phase_ms("forward") + s.phase_ms("backward");
    if before > 0.0 {
        return before;
    }
    (s.wall_ms - s.phase_ms("communication")).max(0.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests;
