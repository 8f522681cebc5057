//! `stepscope open FILE...`: a run from outside, read-only, as its step
//! anatomy: metrics logs (`train --metrics`, or the exported script's, one
//! file per rank), Stepscope traces (`train --trace`, the page's
//! `download-trace`) or PyTorch profiler traces (`.json`, `.json.gz`).
//! Prints each phase's mean time per step and share, the share spent
//! waiting for data with a verdict, the GPU's idle share where the file has
//! GPU events, and each rank's median step time against the median.

use stepscope_core::runs::{data_verdict, open_run};

use crate::{files, say, Failure};

pub fn run(paths: &[String]) -> Result<(), Failure> {
    let contents: Vec<Vec<u8>> = paths.iter().map(|p| files::read(p, "run file")).collect::<Result<_, _>>()?;
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
            say!("  rank {:<4} median step {:.3} ms, {:.2}× the median{flag}", r.rank, r.step_ms, r.ratio);
        }
        let communication: f64 = phases.iter().filter(|(n, _)| *n == "communication").map(|(_, ms)| ms).sum();
        if communication > 0.0 {
            say!("communication: {:.1} % of step time", 100.0 * communication / step_ms);
        }
    }
    Ok(())
}
