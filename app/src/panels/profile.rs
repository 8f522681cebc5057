//! The anatomy's profiled steps (`stepscope_core::engine::profile`): their
//! figures with the clock's bounds, which steps and which path, the clock
//! itself, and why a measured forward : backward is off the FLOP ratio.

use leptos::prelude::*;
use stepscope_core::engine::profile::{resolved_ms, Measured, ProfilePath};
use stepscope_core::trainer::PhaseClock;

pub(super) use crate::model::timeline::{profile_summary, ProfileSummary};
use crate::model::timeline::{shown_means, Split, StepTiming};
use crate::model::words::count;

/// Where the timeline's forward, backward and optimizer come from when the
/// clock (resolution `r` ms) cannot resolve them (`timeline::split_cpu_frame`):
/// the profiled split of the steps' measured compute, with its bounds, or
/// unsplit before the first profile. None: the clock's own readings.
pub(super) fn split_line(recent: &[StepTiming], summary: Option<ProfileSummary>, r: f64) -> Option<String> {
    let (_, parts, split) = shown_means(recent, summary.as_ref());
    let below = format!(
        "Forward, backward and optimizer each last less than one reading of the clock resolves ({} a tick; {} and longer)",
        micros(r),
        micros(resolved_ms(r))
    );
    let plus_minus = |m: &Measured| format!("{:.4} ms ± {}", m.ms, micros(m.uncertainty_ms));
    match (recent.last().map(|s| s.split), split, summary) {
        (Some(Split::Profiled), Some([f, b, o]), Some(p)) => {
            let step = p.steps.last().map_or(String::new(), |s| count(s + 1));
            Some(format!(
                "{below}: each step's compute as the clock read it ({:.4} ms a step over these steps) is split as the profiled steps, the newest {step}, split theirs: forward {}, backward {}, optimizer {} a step (forward : backward 1 : {:.2}; ± from the profile's bounds). The profiled phases sum to {} a step; what the steps' own reading holds beyond that is rounding and time the bursts' fastest rounds left out (the worker taken off the core, cold caches).",
                parts[1] + parts[2] + parts[3],
                plus_minus(&f),
                plus_minus(&b),
                plus_minus(&o),
                b.ms / f.ms.max(f64::MIN_POSITIVE),
                plus_minus(&p.profile().compute()),
            ))
        }
        (Some(Split::Unsplit), ..) => {
            Some(format!("{below}: until the first profiled step each step's compute is shown unsplit."))
        }
        _ => None,
    }
}

/// The clock that times the phases, and how finely.
pub(super) fn clock_line(clock: Option<(PhaseClock, f64)>) -> String {
    let isolated = js_sys::Reflect::get(&js_sys::global(), &"crossOriginIsolated".into())
        .ok()
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let page = if isolated {
        "the page is cross-origin isolated (COOP/COEP), so the browser's clock is fine-grained".to_string()
    } else {
        "the page is not cross-origin isolated, so the browser coarsens its clock (serve it with the COOP/COEP headers of docs/page.md for 5 µs)".to_string()
    };
    match clock {
        Some((PhaseClock::Clock, r)) => format!("Clock: phases timed by performance.now(), which resolves {} here: {page}.", micros(r)),
        Some((PhaseClock::GpuTimestamps, r)) => {
            format!("Clock: GPU phases timed by timestamp queries, which resolve {} here (the browser may round them); {page}.", micros(r))
        }
        Some((PhaseClock::None, r)) => format!(
            "Clock: no timestamp queries on this adapter, so the GPU's phases cannot be timed apart; the CPU's clock resolves {}.",
            micros(r)
        ),
        None => String::new(),
    }
}

fn micros(ms: f64) -> String {
    if ms >= 0.1 {
        format!("{:.0} µs", ms * 1e3)
    } else if ms >= 0.001 {
        format!("{:.1} µs", ms * 1e3)
    } else {
        format!("{:.0} ns", ms * 1e6)
    }
}

/// A figure with its uncertainty, or "not resolved".
fn with_uncertainty(m: &Measured) -> String {
    if m.resolved() {
        format!("{:.4} ms ± {}", m.ms, micros(m.uncertainty_ms))
    } else {
        format!("below {} (not resolved)", micros(m.uncertainty_ms))
    }
}

#[component]
pub(super) fn ProfileTable(p: ProfileSummary) -> impl IntoView {
    let how = match p.path {
        ProfilePath::CpuBurst => format!(
            "CPU engine, each phase repeated in a burst (at least {} repetitions per micro-batch) and timed whole; the step itself is the real one, bit for bit",
            p.forward.reps.min(p.backward.reps).min(p.optimizer.reps)
        ),
        ProfilePath::CpuClock => "CPU engine, one reading per phase: the step is long enough for the clock".to_string(),
        ProfilePath::GpuTimestamps => {
            "GPU engine, the phased kernels with a timestamp pair per phase, one step in its own submit".to_string()
        }
    };
    let shown: Vec<String> = p.steps.iter().rev().take(8).rev().map(|s| count(s + 1)).collect();
    let more = if p.steps.len() > 8 { format!(" (and {} before)", p.steps.len() - 8) } else { String::new() };
    let row = |name: &'static str, m: Measured| {
        view! {
            <tr><td>{name}</td>
                <td data-testid=format!("profile-{name}-ms") data-value=m.ms.to_string() data-uncertainty=m.uncertainty_ms.to_string()>
                    {with_uncertainty(&m)}</td>
                <td>{m.reps}</td></tr>
        }
    };
    view! {
        <div class="profile" data-testid="profile">
            <table class="memory">
                <tr><th>"Profiled"</th><th>"per step"</th><th>"repetitions"</th></tr>
                {row("forward", p.forward)}
                {row("backward", p.backward)}
                {row("optimizer", p.optimizer)}
            </table>
            <p class="note" data-testid="profile-steps">{format!(
                "Profiled steps {}{more}: {how}. Clock resolution {}; each ± is the most the clock's rounding can put a figure off by.",
                shown.join(", "),
                micros(p.resolution_ms)
            )}</p>
        </div>
    }
}

/// Why the measured forward : backward is off the FLOP ratio, from what
/// the FLOP count leaves out.
pub(super) fn why_off(e: &stepscope_core::Experiment, path: ProfilePath, forward_heavy: bool) -> String {
    use stepscope_core::experiment::Activation;
    let takes_exp =
        |a: Activation| matches!(a, Activation::Tanh | Activation::Sigmoid | Activation::GeluTanh | Activation::Silu);
    let widths = e.widths();
    let evaluations: usize = e
        .model
        .layers
        .iter()
        .zip(&widths[1..])
        .filter(|(l, _)| takes_exp(l.activation))
        .map(|(_, &width)| width)
        .sum::<usize>()
        * e.batch_size
        * e.grad_accumulation;
    let transcendental: Vec<&str> = e
        .model
        .layers
        .iter()
        .filter(|l| takes_exp(l.activation))
        .map(|l| match l.activation {
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "the sigmoid",
            Activation::GeluTanh => "GELU",
            _ => "SiLU",
        })
        .collect();
    match path {
        ProfilePath::GpuTimestamps => "on a network this small the GPU's passes are dominated by fixed costs (kernel launches, barriers between them), which FLOPs do not count".into(),
        _ if forward_heavy && !transcendental.is_empty() => format!(
            "the FLOP count leaves out the activations, and forward evaluates {} {} times (B·ΣO), each as costly as dozens of multiply-adds, while backward's derivative reuses the stored outputs",
            transcendental[0],
            count(evaluations as u64)
        ),
        _ => "on a network this small, fixed costs per call (loops over layers, checks for NaN) weigh more than the multiply-adds".into(),
    }
}
