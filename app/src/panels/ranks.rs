//! The step's ranks (`host::ranks`): each rank's share of the shards, its
//! compute and its wait for the slowest, the slowest named, and what
//! replicating the model on every rank costs in memory.

use leptos::prelude::*;

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
    view! {
        <Show when=move || !ranks.get().last.is_empty()>
            <div class="ranks-table">
                <p class="note" data-testid="slowest-rank">{slowest}</p>
                <table>
                    <thead><tr><th>"rank"</th><th>"shards"</th><th>"forward ms"</th><th>"backward ms"</th><th>"wait ms"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
                <p class="note" data-testid="rank-memory">{memory}</p>
            </div>
        </Show>
    }
}
