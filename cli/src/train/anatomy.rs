//! Where an MLP's or conv net's steps went, layer by layer, printed when a
//! run ends: the core's table (`engine::anatomy`, the page shows the same)
//! over every step of the run, with the forward : backward ratio measured
//! and as the FLOPs say it should be.

use stepscope_core::engine::anatomy::LayerTable;

pub use stepscope_core::engine::anatomy::LayerAnatomy;

/// The table's lines, or nothing where no step was timed by layer.
pub fn lines(table: Option<LayerTable>) -> Vec<String> {
    let Some(t) = table else { return Vec::new() };
    let share = |ms: f64| if t.step_ms > 0.0 { 100.0 * ms / t.step_ms } else { 0.0 };
    let mut lines = vec![
        format!(
            "where a step went, layer by layer (mean of {} step{}, the CPU engine's clock; \
             MFLOP for the step's rows; memory for one micro-batch):",
            t.steps,
            if t.steps == 1 { "" } else { "s" }
        ),
        format!(
            "  {:<28} {:>10} {:>11} {:>12} {:>7} {:>11} {:>12} {:>11} {:>10}",
            "layer",
            "output",
            "forward ms",
            "backward ms",
            "share",
            "fwd MFLOP",
            "bwd MFLOP",
            "activations",
            "workspace"
        ),
    ];
    let mflop = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
    for r in &t.rows {
        lines.push(format!(
            "  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}% {:>11} {:>12} {:>11} {:>10}",
            r.name,
            r.output,
            r.forward_ms,
            r.backward_ms,
            share(r.forward_ms + r.backward_ms),
            mflop(r.forward_mflop),
            mflop(r.backward_mflop),
            bytes(r.activation_bytes),
            if r.workspace_bytes > 0 { bytes(r.workspace_bytes) } else { "-".into() }
        ));
    }
    let (lf, lb) = t.loss_ms;
    lines.push(format!("  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}%", "loss", "", lf, lb, share(lf + lb)));
    let (rf, rb) = t.rest_ms;
    lines.push(format!("  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}%", "rest of the phases", "", rf, rb, share(rf + rb)));
    for (name, ms) in [("data", t.data_ms), ("optimizer", t.optimizer_ms)] {
        lines.push(format!("  {:<28} {:>10} {:>11.3} {:>12} {:>6.1}%", name, "", ms, "", share(ms)));
    }
    if let (Some(measured), Some(flops)) = (t.measured_ratio, t.flops_ratio) {
        lines.push(format!(
            "forward : backward = 1 : {measured:.2} measured, 1 : {flops:.2} in FLOPs (the first layer's input \
             gradient is not computed); step {:.3} ms",
            t.step_ms
        ));
    }
    lines
}

/// Bytes in words: B, KiB or MiB.
fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}
