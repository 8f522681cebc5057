//! `stepscope open FILE...`: a run from outside, read-only, as its step
//! anatomy: metrics logs (`train --metrics`, or the exported script's, one
//! file per rank), Stepscope traces (`train --trace`, the page's
//! `download-trace`) or PyTorch profiler traces (`.json`, `.json.gz`).
//! Prints each phase's mean time per step and share, the share spent
//! waiting for data with a verdict, the GPU's idle share where the file has
//! GPU events, and each rank's median step time against the median.

use stepscope_core::runs::{data_verdict, open_run, RunLimits, MAX_RANKS};

use crate::{say, Failure};

/// The files, each held to its limit and the total checked before each
/// next one is read (`RunLimits::read_next`); regular files' sizes refuse
/// an opening before anything is read.
fn read_files(paths: &[String]) -> Result<Vec<Vec<u8>>, Failure> {
    let limits = RunLimits::CLI;
    if paths.len() > MAX_RANKS {
        return Err(Failure::usage(format!("{} files; at most {MAX_RANKS} ranks are opened at once", paths.len())));
    }
    let names: Vec<String> = paths.iter().map(|p| format!("run file `{p}`")).collect();
    let sizes: Vec<(&str, u64)> = names
        .iter()
        .zip(paths)
        .filter_map(|(name, p)| std::fs::metadata(p).ok().filter(|m| m.is_file()).map(|m| (name.as_str(), m.len())))
        .collect();
    limits.check_sizes(sizes).map_err(|e| Failure::usage(e.to_string()))?;
    let mut read = 0u64;
    let mut contents = Vec::with_capacity(paths.len());
    for (path, name) in paths.iter().zip(&names) {
        let file = std::fs::File::open(path).map_err(|e| Failure::usage(format!("cannot read {name}: {e}")))?;
        let bytes = limits.read_next(file, name, read).map_err(|e| match e {
            stepscope_core::Error::Io(m) | stepscope_core::Error::Other(m) => Failure::usage(m),
            other => Failure::from(other),
        })?;
        read += bytes.len() as u64;
        contents.push(bytes);
    }
    Ok(contents)
}

pub fn run(paths: &[String]) -> Result<(), Failure> {
    let contents = read_files(paths)?;
    let named: Vec<(&str, &[u8])> = paths.iter().map(String::as_str).zip(contents.iter().map(Vec::as_slice)).collect();
    let run = open_run(&named).map_err(|e| Failure::usage(e.to_string()))?;
    say!(
        "{}: {} rank{}, {} steps",
        run.kind.name(),
        run.ranks.len(),
        if run.ranks.len() == 1 { "" } else { "s" },
        run.steps()
    );
    let phases = run.mean_phases();
    let step_ms: f64 = phases.iter().map(|(_, ms)| ms).sum();
    say!("mean step {step_ms:.3} ms:");
    for (name, ms) in &phases {
        say!("  {name:<14} {ms:>10.3} ms  {:>5.1} %", 100.0 * ms / step_ms.max(f64::MIN_POSITIVE));
    }
    let share = run.data_share();
    let verdict = data_verdict(share);
    say!("waiting for data: {:.1} % of step time ({verdict})", 100.0 * share);
    if let Some([compute, communication, memory, idle]) = run.gpu_breakdown() {
        say!(
            "GPU over the span of its events (HTA's temporal breakdown): compute {:.2} %, communication {:.2} %, memory {:.2} %, idle {:.2} %",
            100.0 * compute,
            100.0 * communication,
            100.0 * memory,
            100.0 * idle
        );
        if let Some(gap) = run.gpu_longest_gap_ms() {
            say!("longest GPU gap: {gap:.3} ms");
        }
    }
    if run.ranks.len() > 1 {
        for r in run.rank_rows() {
            let flag = if r.straggler { "  straggler" } else { "" };
            say!(
                "  rank {:<4} median step {:.3} ms, before the all-reduce {:.3} ms ({:.2}× the median), communication {:.1} %{flag}",
                r.rank,
                r.step_ms,
                r.compute_ms,
                r.ratio,
                100.0 * r.communication_share
            );
        }
        let communication: f64 = phases.iter().filter(|(n, _)| *n == "communication").map(|(_, ms)| ms).sum();
        if communication > 0.0 {
            say!("communication: {:.1} % of step time", 100.0 * communication / step_ms);
        }
    }
    Ok(())
}
