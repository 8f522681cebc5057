//! The step's ranks (`host::ranks`): each rank's share of the shards, its
//! compute and its wait for the slowest, the slowest named, and what
//! replicating the model on every rank costs in memory.

use leptos::prelude::*;

use crate::model::scaling::Scaling;
use crate::model::words::{bytes, count};
use crate::state::AppState;

#[component]
pub fn RanksPanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let ranks = state.run.ranks;
    let rows = move || {
        let last = ranks.get().last;
        let slowest = (0..last.len()).max_by(|&a, &b| last[a].compute_ms().total_cmp(&last[b].compute_ms()));
        last.iter()
            .enumerate()
            .map(|(r, t)| {
                let mark = if Some(r) == slowest { " (slowest)" } else { "" };
                view! {
                    <tr data-testid="rank-row" data-rank=r.to_string() data-compute-ms=t.compute_ms().to_string()
                        data-wait-ms=t.wait_ms.to_string()>
                        <td>{format!("rank {r}{mark}")}</td>
                        <td>{t.shards.to_string()}</td>
                        <td>{format!("{:.2}", t.forward_ms)}</td>
                        <td>{format!("{:.2}", t.backward_ms)}</td>
                        <td>{format!("{:.2}", t.wait_ms)}</td>
                    </tr>
                }
            })
            .collect_view()
    };
    let slowest = move || {
        let last = ranks.get().last;
        let (r, t) = last.iter().enumerate().max_by(|a, b| a.1.compute_ms().total_cmp(&b.1.compute_ms()))?;
        let others: f64 = last.iter().map(|t| t.wait_ms).sum::<f64>() / (last.len().max(2) - 1) as f64;
        Some(format!(
            "Slowest: rank {r}, {:.2} ms of forward and backward; the others waited {:.2} ms on average for it before the all-reduce.",
            t.compute_ms(),
            others
        ))
    };
    let memory = move || {
        let n = ranks.get().in_use.max(1) as u64;
        let m = state.run.memory.get();
        let replica = m.params + m.grads + m.optimizer;
        format!(
            "Every rank holds a replica: parameters, gradients and optimizer state ({} each, {} in all on {} ranks). Sharding the optimizer state over the ranks (ZeRO stage 1) would keep 1/{n} of it on each, saving {}.",
            bytes(replica),
            bytes(replica * n),
            count(n),
            bytes(m.optimizer * (n - 1))
        )
    };
    // The page's own rate at each number of ranks this run has used
    // (none while the straggler lesson slows a rank).
    let measured = RwSignal::new(Scaling::default());
    let unit = move || if state.run.experiment.with(|e| e.gpt().is_some()) { "tokens/s" } else { "steps/s" };
    Effect::new(move || {
        let rate = state.run.steps_per_second.get();
        if !state.run.running.get_untracked() || state.run.straggler.get_untracked() > 0 {
            return;
        }
        let (key, per_step) = state.run.experiment.with_untracked(|e| {
            let per_step = e.gpt().map_or(1.0, |g| (e.batch_size * e.grad_accumulation * g.context) as f64);
            (format!("{}|S{}", crate::model::runner::shape_key(e), e.shards), per_step)
        });
        let in_use = ranks.get_untracked().in_use.max(1);
        measured.update(|m| m.record(&key, in_use, rate * per_step));
    });
    // The ranks' busy share of the parallel part of the step, from their
    // own readings: Σ compute ÷ (ranks × the slowest's compute + wait);
    // then the rates measured at each number of ranks.
    let scaling = move || {
        let last = ranks.get().last;
        let span = last.iter().map(|t| t.compute_ms() + t.wait_ms).fold(0.0, f64::max);
        let busy: f64 = last.iter().map(|t| t.compute_ms()).sum();
        let share = (span > 0.0).then(|| {
            let share = busy / (span * last.len() as f64);
            format!(
                "{} ranks busy {:.0} % of the step's parallel part: about {:.2}× one rank's speed on this work, before the all-reduce.",
                last.len(),
                100.0 * share,
                share * last.len() as f64
            )
        });
        let rates = measured
            .with(|m| m.readout(unit()))
            .map(|r| format!("{r} Ask for another number of ranks in the header to measure it beside these."));
        [share, rates].into_iter().flatten().collect::<Vec<_>>().join(" ")
    };
    // The straggler lesson: the last rank does its work twice (really),
    // and every other rank waits for it.
    let straggler = state.run.straggler;
    let waited_before = RwSignal::new(None::<f64>);
    let others_wait = move || {
        let last = ranks.get_untracked().last;
        let n = last.len().saturating_sub(1).max(1) as f64;
        last.iter().take(last.len().saturating_sub(1)).map(|t| t.wait_ms).sum::<f64>() / n
    };
    let toggle = move |_| {
        if straggler.get_untracked() == 0 {
            waited_before.set(Some(others_wait()));
            straggler.set(1);
        } else {
            straggler.set(0);
        }
    };
    let lesson = move || {
        let on = ranks.get().straggler;
        let last = ranks.get().last;
        let n = last.len().saturating_sub(1).max(1) as f64;
        let now: f64 = last.iter().take(last.len().saturating_sub(1)).map(|t| t.wait_ms).sum::<f64>() / n;
        match (on, waited_before.get()) {
            (true, Some(before)) => format!(
                "Rank {} now computes each of its shards twice. The other ranks wait {now:.2} ms a step for it (they waited {before:.2} ms before): a data-parallel step is as slow as its slowest rank.",
                last.len() - 1
            ),
            _ => "Make the last rank do its shards twice (real work, the same results) and watch the others wait for it.".into(),
        }
    };
    view! {
        <Show when=move || !ranks.get().last.is_empty()>
            <div class="ranks-table">
                <p class="note" data-testid="slowest-rank">{slowest}</p>
                <p class="note" data-testid="scaling-readout">{scaling}</p>
                <table>
                    <thead><tr><th>"rank"</th><th>"shards"</th><th>"forward ms"</th><th>"backward ms"</th><th>"wait ms"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                <p class="note" data-testid="rank-memory">{memory}</p>
                <p class="lesson">
                    <button data-testid="lesson-slow-rank" on:click=toggle>
                        {move || if straggler.get() == 0 { "Slow down the last rank" } else { "Back to even ranks" }}
                    </button>
                    " "<span data-testid="lesson-slow-rank-readout">{lesson}</span>
                </p>
            </div>
        </Show>
    }
}
