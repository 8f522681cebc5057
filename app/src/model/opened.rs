//! A run from outside, opened read-only on the engine's side (the worker):
//! what the page draws of it. The core reads the files
//! (`stepscope_core::runs`, within the page's limits); this is the bounded
//! summary that crosses back: the mean step by phase, the last steps'
//! timeline, the data-loader share with its verdict, the GPU's idle share,
//! each rank against the median, and the logged curves (thinned).

use serde::{Deserialize, Serialize};
use stepscope_core::runs::{data_verdict, open_run_within, OpenedRun, RunLimits};
use stepscope_core::Error;

use super::runs::{downsample, Curve, RunCurves, MAX_POINTS};

/// Steps drawn in the opened run's timeline (the last ones of its first
/// rank).
pub const TIMELINE_STEPS: usize = 40;

/// A file to open: its name and bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunFile {
    pub name: String,
    #[serde(with = "crate::model::bytes::vec")]
    pub bytes: Vec<u8>,
}

/// Files to open, as their parts arrive (`Command::RunPart`), within the
/// page's budget (`RunLimits::PAGE`): past it, the parts are dropped and
/// the opening refused with the limit named.
#[derive(Debug, Default)]
pub struct RunParts {
    files: Vec<RunFile>,
    bytes: usize,
}

impl RunParts {
    pub fn receive(&mut self, index: usize, name: String, part: Vec<u8>) -> Result<(), Error> {
        self.bytes += part.len();
        if self.bytes > RunLimits::PAGE.total_bytes {
            *self = RunParts::default();
            let limit = RunLimits::PAGE.total_bytes;
            return Err(Error::Other(format!(
                "more than {limit} bytes in all: at most {limit} are opened at once on the page"
            ))
            .context("The run was not opened"));
        }
        let known = self.files.len();
        match self.files.get_mut(index) {
            Some(file) => file.bytes.extend_from_slice(&part),
            None if index == known => self.files.push(RunFile { name, bytes: part }),
            None => {
                *self = RunParts::default();
                return Err(Error::Other(format!("a part of file {index} came before file {known}"))
                    .context("The run was not opened"));
            }
        }
        Ok(())
    }

    pub fn into_files(self) -> Vec<RunFile> {
        self.files
    }
}

/// One step as the timeline draws it: its wall time and phases, in ms.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepBar {
    pub step: u64,
    pub wall_ms: f64,
    pub phases: Vec<(String, f64)>,
}

/// One rank against the others.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankLine {
    pub rank: u32,
    pub steps: usize,
    pub step_ms: f64,
    /// Its median data, forward and backward (`runs::RankRow`).
    pub compute_ms: f64,
    pub ratio: f64,
    pub straggler: bool,
    pub communication_share: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenedView {
    pub files: Vec<String>,
    /// `metrics`, `stepscope-trace` or `torch-trace`.
    pub kind: String,
    /// Steps read, over all ranks.
    pub steps: usize,
    /// Mean ms per step of each phase, in the order they ran.
    pub mean_phases: Vec<(String, f64)>,
    pub timeline: Vec<StepBar>,
    pub data_share: f64,
    pub verdict: String,
    pub gpu_idle: Option<f64>,
    /// The GPU's span as (compute, communication, memory, idle) shares.
    pub gpu: Option<[f64; 4]>,
    pub gpu_longest_gap_ms: Option<f64>,
    pub ranks: Vec<RankLine>,
    /// The first rank's logged loss, gradient norm and learning rate.
    pub loss: Curve,
    pub grad_norm: Curve,
    pub lr: Curve,
}

impl OpenedView {
    /// Reads `files` as one run within the page's limits.
    pub fn open(files: &[RunFile]) -> Result<OpenedView, Error> {
        let named: Vec<(&str, &[u8])> = files.iter().map(|f| (f.name.as_str(), f.bytes.as_slice())).collect();
        let run = open_run_within(&named, RunLimits::PAGE).map_err(|e| e.context("The run was not opened"))?;
        Ok(OpenedView::of(&run, files.iter().map(|f| f.name.clone()).collect()))
    }

    pub fn of(run: &OpenedRun, files: Vec<String>) -> OpenedView {
        let first = &run.ranks[0];
        let start = first.steps.len().saturating_sub(TIMELINE_STEPS);
        let timeline = first.steps[start..]
            .iter()
            .map(|s| StepBar {
                step: s.step,
                wall_ms: s.wall_ms,
                phases: s.phases.iter().map(|(p, ms)| (p.to_string(), *ms)).collect(),
            })
            .collect();
        let curve = |figure: fn(&stepscope_core::runs::OpenedStep) -> Option<f64>| {
            let points: Curve = first.steps.iter().filter_map(|s| Some((s.step, figure(s)? as f32))).collect();
            downsample(&points, MAX_POINTS)
        };
        let data_share = run.data_share();
        OpenedView {
            files,
            kind: run.kind.name().to_string(),
            steps: run.steps(),
            mean_phases: run.mean_phases().into_iter().map(|(p, ms)| (p.to_string(), ms)).collect(),
            timeline,
            data_share,
            verdict: data_verdict(data_share).to_string(),
            gpu_idle: run.gpu_idle_share(),
            gpu: run.gpu_breakdown(),
            gpu_longest_gap_ms: run.gpu_longest_gap_ms(),
            ranks: run
                .rank_rows()
                .into_iter()
                .zip(&run.ranks)
                .map(|(r, rank)| RankLine {
                    rank: r.rank,
                    steps: rank.steps.len(),
                    step_ms: r.step_ms,
                    compute_ms: r.compute_ms,
                    ratio: r.ratio,
                    straggler: r.straggler,
                    communication_share: r.communication_share,
                })
                .collect(),
            loss: curve(|s| s.loss),
            grad_norm: curve(|s| s.grad_norm),
            lr: curve(|s| s.lr),
        }
    }

    /// How the runs list names it: "two.jsonl + 1 more (metrics, 2 ranks)".
    pub fn describe(&self) -> String {
        let first = self.files.first().map_or("", String::as_str);
        let more = if self.files.len() > 1 { format!(" + {} more", self.files.len() - 1) } else { String::new() };
        let ranks = if self.ranks.len() > 1 { format!(", {} ranks", self.ranks.len()) } else { String::new() };
        format!("{first}{more} ({}{ranks})", self.kind)
    }

    /// Its curves as a kept run's: the logged per-step loss stands for the
    /// train loss (an opened run has no evaluations of its own).
    pub fn curves(&self) -> RunCurves {
        RunCurves {
            train_loss: self.loss.clone(),
            test_loss: Vec::new(),
            accuracy: Vec::new(),
            grad_norm: self.grad_norm.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(rank: u32, data_ms: f64) -> RunFile {
        let text: String = (1..=60u64)
            .map(|s| {
                format!(
                    "{{\"step\": {s}, \"rank\": {rank}, \"loss\": {}, \"grad_norm\": 1.5, \"lr\": 0.01, \"data_ms\": {data_ms}, \"forward_ms\": 2.0, \"backward_ms\": 4.0, \"optimizer_ms\": 1.0, \"communication_ms\": 1.0}}\n",
                    1.0 / s as f64
                )
            })
            .collect();
        RunFile { name: format!("rank{rank}.jsonl"), bytes: text.into_bytes() }
    }

    /// Two ranks' logs: the view holds the core's figures, the timeline
    /// the last steps of rank 0, the curves the logged values.
    #[test]
    fn a_two_rank_log_opens_as_the_core_reads_it() {
        let view = OpenedView::open(&[log(0, 1.0), log(1, 3.0)]).unwrap();
        assert_eq!((view.kind.as_str(), view.steps, view.ranks.len()), ("metrics", 120, 2));
        assert_eq!(view.timeline.len(), TIMELINE_STEPS);
        assert_eq!(view.timeline.last().unwrap().step, 60);
        let bar = &view.timeline[0];
        assert_eq!(bar.phases.iter().map(|(_, ms)| ms).sum::<f64>(), bar.wall_ms);
        assert!((view.data_share - 4.0 * 60.0 / (9.0 * 60.0 + 11.0 * 60.0)).abs() < 1e-12);
        assert_eq!(view.verdict, data_verdict(view.data_share));
        assert_eq!((view.ranks[0].step_ms, view.ranks[1].step_ms), (9.0, 11.0));
        assert!(view.ranks[1].straggler && !view.ranks[0].straggler);
        assert!((view.ranks[0].communication_share - 1.0 / 9.0).abs() < 1e-12);
        assert_eq!(view.loss.len(), 60);
        assert_eq!(view.loss[1], (2, 0.5));
        assert_eq!(view.lr[0], (1, 0.01));
        assert_eq!(view.describe(), "rank0.jsonl + 1 more (metrics, 2 ranks)");
        assert_eq!(view.gpu_idle, None);
    }

    /// Files arrive in parts, in order; past the page's budget they are
    /// dropped with the limit named.
    #[test]
    fn files_arrive_in_parts_within_the_budget() {
        let whole = log(0, 1.0).bytes;
        let mut parts = RunParts::default();
        for (i, chunk) in whole.chunks(1000).enumerate() {
            parts.receive(0, "rank0.jsonl".into(), chunk.to_vec()).unwrap();
            if i == 0 {
                parts.receive(1, "rank1.jsonl".into(), log(1, 3.0).bytes).unwrap();
            }
        }
        let files = parts.into_files();
        assert_eq!((files[0].bytes.len(), files[1].name.as_str()), (whole.len(), "rank1.jsonl"));
        assert_eq!(OpenedView::open(&files).unwrap().ranks.len(), 2);
        let mut parts = RunParts::default();
        assert!(parts.receive(1, "x".into(), vec![1]).unwrap_err().to_string().contains("came before file 0"));
        let big = vec![b' '; RunLimits::PAGE.total_bytes / 2 + 1];
        parts.receive(0, "a".into(), big.clone()).unwrap();
        let refused = parts.receive(0, "a".into(), big).unwrap_err().to_string();
        assert!(refused.contains("are opened at once on the page"), "{refused}");
        assert!(parts.into_files().is_empty());
    }

    #[test]
    fn refusals_say_what_was_not_opened() {
        let bad = RunFile { name: "x.jsonl".into(), bytes: b"{\"step\": 1}\n".to_vec() };
        let err = OpenedView::open(&[bad]).unwrap_err().to_string();
        assert!(err.contains("The run was not opened") && err.contains("no phase times"), "{err}");
    }
}
