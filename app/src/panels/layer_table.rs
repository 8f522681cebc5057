//! An MLP's or conv net's step, layer by layer (`engine::anatomy`, the
//! table the CLI prints at the end of a run): each layer's measured
//! forward and backward time and share of the step, its FLOPs (the first
//! layer's backward makes no input gradient), what forward keeps for
//! backward, and a conv layer's patch-matrix workspace; then the loss, the
//! rest of the phases, the data and the optimizer. The mean of the last
//! sampled steps on the CPU engine (the GPU engine's steps are not timed
//! by layer).

use leptos::prelude::*;

use crate::model::words::bytes;
use crate::state::AppState;

#[component]
pub fn LayerTablePanel() -> impl IntoView {
    let state = expect_context::<AppState>();
    let table = state.charts.layer_table;
    let checkpointing = state.lessons.activation_checkpointing;
    move || {
        let t = table.get()?;
        let share = move |ms: f64| if t.step_ms > 0.0 { 100.0 * ms / t.step_ms } else { 0.0 };
        let mflop = |x: Option<f64>| x.map_or("–".to_string(), |x| format!("{x:.2}"));
        let activations: u64 = t.rows.iter().map(|r| r.activation_bytes).sum();
        let workspace = t.rows.iter().map(|r| r.workspace_bytes).max().unwrap_or(0);
        let heaviest = t.rows.iter().max_by(|a, b| a.activation_bytes.cmp(&b.activation_bytes)).map(|r| r.name.clone());
        let rows = t
            .rows
            .iter()
            .enumerate()
            .map(|(l, r)| {
                view! {
                    <tr data-testid="layer-anatomy-row" data-layer=l.to_string()
                        data-forward-ms=r.forward_ms.to_string() data-backward-ms=r.backward_ms.to_string()
                        data-activation-bytes=r.activation_bytes.to_string() data-workspace-bytes=r.workspace_bytes.to_string()>
                        <td>{r.name.clone()}</td>
                        <td>{r.output.clone()}</td>
                        <td>{format!("{:.3}", r.forward_ms)}</td>
                        <td>{format!("{:.3}", r.backward_ms)}</td>
                        <td>{format!("{:.1} %", share(r.forward_ms + r.backward_ms))}</td>
                        <td>{mflop(r.forward_mflop)}</td>
                        <td>{mflop(r.backward_mflop)}</td>
                        <td>{bytes(r.activation_bytes)}</td>
                        <td>{if r.workspace_bytes > 0 { bytes(r.workspace_bytes) } else { "–".into() }}</td>
                    </tr>
                }
            })
            .collect_view();
        let extra = [
            ("loss", t.loss_ms.0, t.loss_ms.1),
            ("rest of the phases", t.rest_ms.0, t.rest_ms.1),
            ("data", t.data_ms, 0.0),
            ("optimizer", t.optimizer_ms, 0.0),
        ]
        .into_iter()
        .map(|(name, f, b)| {
            view! {
                <tr class="rest" data-testid=format!("layer-anatomy-{}", name.replace(' ', "-"))>
                    <td>{name}</td><td></td>
                    <td>{format!("{f:.3}")}</td>
                    <td>{if b > 0.0 { format!("{b:.3}") } else { String::new() }}</td>
                    <td>{format!("{:.1} %", share(f + b))}</td>
                    <td></td><td></td><td></td><td></td>
                </tr>
            }
        })
        .collect_view();
        let ratio = match (t.measured_ratio, t.flops_ratio) {
            (Some(m), Some(f)) => format!(
                "forward : backward = 1 : {m:.2} measured, 1 : {f:.2} in FLOPs (backward makes each weight's gradient and, but for the first layer, the input's); step {:.3} ms, the mean of {} sampled steps.",
                t.step_ms, t.steps
            ),
            _ => String::new(),
        };
        let memory = format!(
            "Forward keeps {} for backward ({}), most in {}; the conv layers' patch matrices take {} more (one image at a time, the largest layer's, shared). {}",
            bytes(activations),
            if checkpointing.get() { "outputs only: pre-activations are recomputed in backward" } else { "outputs and pre-activations" },
            heaviest.unwrap_or_default(),
            bytes(workspace),
            if checkpointing.get() {
                "Activation checkpointing halves what is kept and recomputes each layer's pre-activation in backward: the backward column grows by about a forward's elementwise work."
            } else {
                "Activation checkpointing (Memory) would keep half of it and recompute the rest in backward."
            }
        );
        Some(view! {
            <div class="layer-anatomy" data-testid="layer-anatomy">
                <h4>"Layer by layer"</h4>
                <table class="numbers">
                    <thead><tr>
                        <th>"layer"</th><th>"output"</th><th>"forward ms"</th><th>"backward ms"</th><th>"share"</th>
                        <th>"fwd MFLOP"</th><th>"bwd MFLOP"</th><th>"kept for backward"</th><th>"workspace"</th>
                    </tr></thead>
                    <tbody>{rows}{extra}</tbody>
                </table>
                <p class="note" data-testid="layer-anatomy-ratio">{ratio}</p>
                <p class="note" data-testid="layer-anatomy-memory">{memory}</p>
            </div>
        })
    }
}
