//! Where an MLP's or conv net's steps went, layer by layer: the CPU
//! engine's clock around each layer's forward and backward (`LayerTimes`),
//! summed over steps beside those same steps' phases so that the rows add
//! up to the steps they describe, with each layer's FLOPs (the first
//! layer's backward makes no input gradient) and its memory: what forward
//! keeps for backward, and a conv layer's patch-matrix workspace. One table
//! for the CLI's end-of-run report and the page's anatomy.

use std::collections::VecDeque;

use super::{LayerTimes, PhaseTimes, StepMetrics};
use crate::experiment::Experiment;
use crate::model::{LayerOp, Layout};

/// Steps summed: all of a run's (the CLI), or the last `window` (the page).
#[derive(Clone, Debug, Default)]
pub struct LayerAnatomy {
    window: Option<usize>,
    steps: VecDeque<(PhaseTimes, LayerTimes)>,
    /// The first timed step is left out (memory touched for the first
    /// time), unless it is the only one.
    first: Option<(PhaseTimes, LayerTimes)>,
    /// Sums over `steps` where there is no window.
    total: Option<(u64, PhaseTimes, LayerTimes)>,
}

/// One layer's row.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerRow {
    pub name: String,
    pub output: String,
    /// Mean ms per step.
    pub forward_ms: f64,
    pub backward_ms: f64,
    /// MFLOP of the step's rows (None for a pool: compares and adds).
    pub forward_mflop: Option<f64>,
    pub backward_mflop: Option<f64>,
    /// Bytes forward keeps for backward for one micro-batch (its outputs
    /// and pre-activations; outputs only with activation checkpointing).
    pub activation_bytes: u64,
    /// A conv layer's patch matrix and backward's scratch for one image
    /// (the engine holds the largest layer's, shared).
    pub workspace_bytes: u64,
}

/// The table: a row per layer, then the loss, the rest of the forward and
/// backward phases, the data and the optimizer, each a mean ms per step.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTable {
    pub steps: u64,
    pub rows: Vec<LayerRow>,
    pub loss_ms: (f64, f64),
    pub rest_ms: (f64, f64),
    pub data_ms: f64,
    pub optimizer_ms: f64,
    pub step_ms: f64,
    /// Backward ÷ forward, measured and in FLOPs.
    pub measured_ratio: Option<f64>,
    pub flops_ratio: Option<f64>,
}

impl LayerAnatomy {
    /// Keeps the last `steps` timed steps (the page's live table).
    pub fn window(steps: usize) -> LayerAnatomy {
        LayerAnatomy { window: Some(steps.max(1)), ..LayerAnatomy::default() }
    }

    /// Adds a step: its metrics and, where they are this step's, its
    /// layers' times.
    pub fn add(&mut self, metrics: &StepMetrics, layers: Option<&(u64, LayerTimes)>) {
        let Some((_, times)) = layers.filter(|(step, _)| *step == metrics.step) else { return };
        if self.first.is_none() {
            self.first = Some((metrics.phases, times.clone()));
            return;
        }
        match self.window {
            Some(n) => {
                self.steps.push_back((metrics.phases, times.clone()));
                while self.steps.len() > n {
                    self.steps.pop_front();
                }
            }
            None => {
                let (n, p, l) = self.total.get_or_insert_with(Default::default);
                *n += 1;
                add_phases(p, &metrics.phases);
                l.add(times);
            }
        }
    }

    /// The table of `e` (its layers must be those timed), or None where no
    /// step was timed by layer.
    pub fn table(&self, e: &Experiment, checkpointing: bool) -> Option<LayerTable> {
        let (steps, phases, layers) = match (&self.first, &self.total, self.steps.is_empty()) {
            (None, ..) => return None,
            (Some(_), Some((n, p, l)), _) => (*n, *p, l.clone()),
            (Some(_), None, false) => {
                let (mut p, mut l) = (PhaseTimes::default(), LayerTimes::default());
                for (sp, sl) in &self.steps {
                    add_phases(&mut p, sp);
                    l.add(sl);
                }
                (self.steps.len() as u64, p, l)
            }
            (Some((p, l)), None, true) => (1, *p, l.clone()),
        };
        if layers.forward.len() != e.model.layers.len() || e.gpt().is_some() {
            return None;
        }
        let n = steps as f64;
        let rows_per_step = (e.batch_size * e.grad_accumulation) as f64;
        let micro_rows = (e.batch_size / e.shards.max(1)) as u64;
        let layout = Layout::new(e);
        let outputs = e.output_words();
        let mut rows = Vec::new();
        let (mut forward_layers, mut backward_layers) = (0.0, 0.0);
        for (l, (spec, shape)) in e.model.layers.iter().zip(&layout.layers).enumerate() {
            let (f, b) = (layers.forward[l] / n, layers.backward[l] / n);
            forward_layers += f;
            backward_layers += b;
            let macs = shape.macs();
            let flops = 2.0 * rows_per_step * macs as f64 / 1e6;
            // The first layer's backward has no input gradient to make.
            let back = if l == 0 { flops } else { 2.0 * flops };
            let kept = if checkpointing { 1 } else { 2 };
            let workspace = match shape.op {
                LayerOp::Conv(c) => 4 * c.scratch_floats() as u64,
                _ => 0,
            };
            rows.push(LayerRow {
                name: format!("{l} {}", spec.words()),
                output: outputs[l].clone(),
                forward_ms: f,
                backward_ms: b,
                forward_mflop: (macs > 0).then_some(flops),
                backward_mflop: (macs > 0).then_some(back),
                activation_bytes: kept * 4 * micro_rows * shape.units as u64,
                workspace_bytes: workspace,
            });
        }
        let loss_ms = (layers.loss_forward / n, layers.loss_backward / n);
        let rest_ms = (
            (phases.forward_ms / n - forward_layers - loss_ms.0).max(0.0),
            (phases.backward_ms / n - backward_layers - loss_ms.1).max(0.0),
        );
        let step_ms = (phases.data_ms + phases.forward_ms + phases.backward_ms + phases.optimizer_ms) / n;
        let (flops_f, flops_b) = e.step_flops();
        let (measured_f, measured_b) = (phases.forward_ms / n, phases.backward_ms / n);
        Some(LayerTable {
            steps,
            rows,
            loss_ms,
            rest_ms,
            data_ms: phases.data_ms / n,
            optimizer_ms: phases.optimizer_ms / n,
            step_ms,
            measured_ratio: (measured_f > 0.0).then(|| measured_b / measured_f),
            flops_ratio: (flops_f > 0.0).then(|| flops_b / flops_f),
        })
    }
}

fn add_phases(p: &mut PhaseTimes, q: &PhaseTimes) {
    p.data_ms += q.data_ms;
    p.forward_ms += q.forward_ms;
    p.backward_ms += q.backward_ms;
    p.optimizer_ms += q.optimizer_ms;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv_net() -> Experiment {
        Experiment::from_json(
            r#"{"seed": 1, "model": {"input_shape": [1, 8, 8], "layers": [
                {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
                {"kind": "max_pool2d", "kernel": 2},
                {"units": 10, "activation": "linear"}]},
                "loss": "cross_entropy", "optimizer": {"kind": "sgd", "lr": 0.1}, "batch_size": 8,
                "data": {"source": "digits"}}"#,
        )
        .unwrap()
    }

    fn step(n: u64, ms: f64) -> (StepMetrics, (u64, LayerTimes)) {
        let metrics = StepMetrics {
            step: n,
            loss: 0.0,
            grad_norm: 0.0,
            z_loss: None,
            lr: 0.1,
            clipped: false,
            phases: PhaseTimes {
                data_ms: ms,
                forward_ms: 3.0 * ms,
                backward_ms: 5.0 * ms,
                optimizer_ms: ms,
                ..Default::default()
            },
            timing: crate::engine::Timing::Cpu,
            gpu_ms: None,
            ranks: Vec::new(),
        };
        let times = LayerTimes {
            forward: vec![ms, ms, ms],
            backward: vec![2.0 * ms, ms, ms],
            loss_forward: 0.0,
            loss_backward: 0.0,
        };
        (metrics, (n, times))
    }

    #[test]
    fn rows_add_up_to_the_phases_and_name_each_layers_cost() {
        let e = conv_net();
        let mut all = LayerAnatomy::default();
        let mut last = LayerAnatomy::window(2);
        for (n, ms) in [(0, 100.0), (1, 1.0), (2, 2.0), (3, 3.0)] {
            let (m, t) = step(n, ms);
            all.add(&m, Some(&t));
            last.add(&m, Some(&t));
        }
        // The first step is left out; the window keeps steps 2 and 3.
        let t = all.table(&e, false).unwrap();
        assert_eq!(t.steps, 3);
        assert!((t.rows[0].forward_ms - 2.0).abs() < 1e-12);
        let w = last.table(&e, false).unwrap();
        assert_eq!(w.steps, 2);
        assert!((w.rows[0].backward_ms - 5.0).abs() < 1e-12);
        let layers: f64 = w.rows.iter().map(|r| r.forward_ms + r.backward_ms).sum();
        let parts = layers + w.loss_ms.0 + w.loss_ms.1 + w.rest_ms.0 + w.rest_ms.1 + w.data_ms + w.optimizer_ms;
        assert!((parts - w.step_ms).abs() < 1e-9, "{parts} vs {}", w.step_ms);
        // FLOPs: the conv's forward 2·8·(4·9·64) MACs; its backward the same
        // (no input gradient for the first layer); the pool has none.
        let conv = &w.rows[0];
        assert!((conv.forward_mflop.unwrap() - 2.0 * 8.0 * (4 * 9 * 64) as f64 / 1e6).abs() < 1e-12);
        assert_eq!(conv.backward_mflop, conv.forward_mflop);
        assert_eq!(w.rows[1].forward_mflop, None);
        assert_eq!(w.rows[2].backward_mflop.unwrap(), 2.0 * w.rows[2].forward_mflop.unwrap());
        // Memory: outputs and pre-activations of 8 rows of 4·8·8, halved by
        // checkpointing; the conv's patch matrix workspace.
        assert_eq!(conv.activation_bytes, 2 * 4 * 8 * 256);
        assert_eq!(all.table(&e, true).unwrap().rows[0].activation_bytes, 4 * 8 * 256);
        assert_eq!(conv.workspace_bytes, 4 * (2 * 9 * 64 + 4 * (64 + 9)));
        assert_eq!(w.rows[1].workspace_bytes, 0);
        assert!((w.measured_ratio.unwrap() - 5.0 / 3.0).abs() < 1e-12);
    }
}
