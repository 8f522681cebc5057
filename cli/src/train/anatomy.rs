//! Where an MLP's or conv net's steps went, layer by layer: the CPU
//! engine's clock around each layer's forward and backward
//! (`LayerTimes`), summed over the steps of the run beside those same
//! steps' phases, so that the rows add up to the steps they describe.
//! Printed when a run ends, with the forward : backward ratio measured and
//! as the FLOPs say it should be.

use stepscope_core::engine::{LayerTimes, PhaseTimes};
use stepscope_core::{Experiment, StepMetrics};

/// The run's steps so far whose layers were timed.
#[derive(Default)]
pub struct LayerAnatomy {
    steps: u64,
    phases: PhaseTimes,
    layers: LayerTimes,
    /// The first timed step is left out (memory touched for the first
    /// time), unless it is the only one.
    first: Option<(PhaseTimes, LayerTimes)>,
}

impl LayerAnatomy {
    /// Adds a step: its metrics and, where they are this step's, its
    /// layers' times.
    pub fn add(&mut self, metrics: &StepMetrics, layers: Option<(u64, LayerTimes)>) {
        let Some((_, times)) = layers.filter(|(step, _)| *step == metrics.step) else { return };
        if self.first.is_none() {
            self.first = Some((metrics.phases, times));
            return;
        }
        self.steps += 1;
        let (p, q) = (&mut self.phases, &metrics.phases);
        p.data_ms += q.data_ms;
        p.forward_ms += q.forward_ms;
        p.backward_ms += q.backward_ms;
        p.optimizer_ms += q.optimizer_ms;
        self.layers.add(&times);
    }

    /// The table, or nothing where no step was timed by layer.
    pub fn lines(&self, e: &Experiment) -> Vec<String> {
        let (steps, phases, layers) = match (&self.first, self.steps) {
            (None, _) => return Vec::new(),
            (Some((p, l)), 0) => (1, *p, l.clone()),
            (_, n) => (n, self.phases, self.layers.clone()),
        };
        if layers.forward.len() != e.model.layers.len() {
            return Vec::new();
        }
        let n = steps as f64;
        let step_ms = (phases.data_ms + phases.forward_ms + phases.backward_ms + phases.optimizer_ms) / n;
        let share = |ms: f64| if step_ms > 0.0 { 100.0 * ms / step_ms } else { 0.0 };
        let rows = (e.batch_size * e.grad_accumulation) as f64;
        let macs: Vec<usize> = stepscope_core::model::Layout::new(e).layers.iter().map(|l| l.macs()).collect();
        let outputs = e.output_words();
        let mut lines = vec![
            format!(
                "where a step went, layer by layer (mean of {steps} step{}, the CPU engine's clock; \
                 MFLOP for the step's {rows} rows):",
                if steps == 1 { "" } else { "s" }
            ),
            format!(
                "  {:<28} {:>10} {:>11} {:>12} {:>7} {:>11} {:>12}",
                "layer", "output", "forward ms", "backward ms", "share", "fwd MFLOP", "bwd MFLOP"
            ),
        ];
        let (mut forward_layers, mut backward_layers) = (0.0, 0.0);
        for (l, layer) in e.model.layers.iter().enumerate() {
            let (f, b) = (layers.forward[l] / n, layers.backward[l] / n);
            forward_layers += f;
            backward_layers += b;
            let flops = 2.0 * rows * macs[l] as f64 / 1e6;
            // The first layer's backward has no input gradient to make.
            let back_flops = if l == 0 { flops } else { 2.0 * flops };
            let (fwd, bwd) = if macs[l] == 0 {
                ("-".to_string(), "-".to_string())
            } else {
                (format!("{flops:.2}"), format!("{back_flops:.2}"))
            };
            lines.push(format!(
                "  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}% {:>11} {:>12}",
                format!("{l} {}", layer.words()),
                outputs[l],
                f,
                b,
                share(f + b),
                fwd,
                bwd
            ));
        }
        let (lf, lb) = (layers.loss_forward / n, layers.loss_backward / n);
        lines.push(format!("  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}%", "loss", "", lf, lb, share(lf + lb)));
        let (rest_f, rest_b) = (
            (phases.forward_ms / n - forward_layers - lf).max(0.0),
            (phases.backward_ms / n - backward_layers - lb).max(0.0),
        );
        lines.push(format!(
            "  {:<28} {:>10} {:>11.3} {:>12.3} {:>6.1}%",
            "rest of the phases",
            "",
            rest_f,
            rest_b,
            share(rest_f + rest_b)
        ));
        for (name, ms) in [("data", phases.data_ms / n), ("optimizer", phases.optimizer_ms / n)] {
            lines.push(format!("  {:<28} {:>10} {:>11.3} {:>12} {:>6.1}%", name, "", ms, "", share(ms)));
        }
        let (flops_f, flops_b) = e.step_flops();
        let (measured_f, measured_b) = (phases.forward_ms / n, phases.backward_ms / n);
        if measured_f > 0.0 && flops_f > 0.0 {
            lines.push(format!(
                "forward : backward = 1 : {:.2} measured ({measured_f:.3} ms : {measured_b:.3} ms a step), 1 : {:.2} \
                 in FLOPs (the first layer's input gradient is not computed); step {step_ms:.3} ms",
                measured_b / measured_f,
                flops_b / flops_f
            ));
        }
        lines
    }
}
