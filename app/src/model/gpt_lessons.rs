//! The transformer's lessons (issue 28, "Lessons on the live run"): each
//! an edit of the real run, and a readout from the run's own numbers (the
//! window statistics the views record, the engine's buffers).

use stepscope_core::engine::MemoryBytes;
use stepscope_core::experiment::Schedule;
use stepscope_core::model::Layout;
use stepscope_core::Experiment;

/// A transformer's window statistics at one step (`WindowInspection`):
/// per block and head the attention entropy and largest logit, per block
/// the residual stream's norm, and the logits' logsumexp.
#[derive(Clone, Debug, PartialEq)]
pub struct GptPoint {
    pub step: u64,
    pub entropy: Vec<Vec<f32>>,
    pub max_logit: Vec<Vec<f32>>,
    pub residual_norm: Vec<f32>,
    pub lse: f32,
    /// ‖ΔW‖/‖W‖ per weight matrix (name, ratio).
    pub update_ratios: Vec<(String, f32)>,
}

use crate::model::edit::set_lr;
use crate::model::words::{bytes, count, significant};

/// "Learning rate too high": AdamW's rate for the default transformer
/// (6e-3 after warmup) times five, from the first step.
pub const HIGH_LR: f64 = 0.03;

/// The high-rate scenario: `HIGH_LR` at once (a constant schedule, no
/// warmup) and no clipping, the rest of the run as it is.
pub fn too_high(e: &mut Experiment) -> Result<(), String> {
    if e.gpt().is_none() {
        return Err("The model is not a transformer.".into());
    }
    set_lr(e, HIGH_LR)?;
    e.schedule = Schedule::Constant;
    e.clip_grad_norm = None;
    Ok(())
}

/// The largest attention logit over every block and head, and the lowest
/// head entropy, at one step.
fn extremes(p: &GptPoint) -> (f32, f32) {
    let max = p.max_logit.iter().flatten().copied().fold(f32::NEG_INFINITY, f32::max);
    let min = p.entropy.iter().flatten().copied().fold(f32::INFINITY, f32::min);
    (max, min)
}

/// How attention moved from the first recorded step to the last: the
/// largest attention logit and the lowest head entropy.
pub fn attention_readout(history: &[GptPoint]) -> Option<String> {
    let (first, last) = (history.first()?, history.last()?);
    if first.step == last.step {
        return None;
    }
    let ((max0, min0), (max1, min1)) = (extremes(first), extremes(last));
    let s = |x: f32| significant(f64::from(x), 3);
    Some(format!(
        "From step {} to {}: the largest attention logit {} → {}; the lowest head entropy {} → {} nats.",
        count(first.step + 1),
        count(last.step + 1),
        s(max0),
        s(max1),
        s(min0),
        s(min1)
    ))
}

/// "Context length": the same run at twice the context.
pub fn double_context(e: &mut Experiment) -> Result<(), String> {
    let gpt = e.model.gpt.as_mut().ok_or("The model is not a transformer.")?;
    gpt.context *= 2;
    Ok(())
}

/// Whether the engine's reported buffers are those of `e` with activation
/// checkpointing `on` (`MemoryBytes::estimate`): the first reports after an
/// edit may still carry the buffers of the settings before it (a step
/// trained ahead of the edit), and a readout must not pair them.
pub fn buffers_are_current(e: &Experiment, on: bool, m: &MemoryBytes) -> bool {
    let expected = MemoryBytes::estimate(e, on);
    (m.activations, m.attention) == (expected.activations, expected.attention)
}

/// The buffers at one context, as the engine reported them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub context: usize,
    pub memory: MemoryBytes,
}

/// What doubling the context did to the buffers, measured: None until the
/// run at the doubled context has reported its buffers.
pub fn context_readout(before: &Measured, now: &Measured) -> Option<String> {
    let (a, b) = (&before.memory, &now.memory);
    if now.context != 2 * before.context || a.attention == 0 || b.attention == 0 || a.activations == 0 {
        return None;
    }
    let ratio = |x: u64, y: u64| format!("×{:.2}", y as f64 / x as f64);
    Some(format!(
        "Context {} → {}: attention probabilities {} → {} ({}, B·H·T² a block); the other activations {} → {} ({}, B·T·C); parameters {} (the position embedding).",
        before.context,
        now.context,
        bytes(a.attention),
        bytes(b.attention),
        ratio(a.attention, b.attention),
        bytes(a.activations),
        bytes(b.activations),
        ratio(a.activations, b.activations),
        ratio(a.params, b.params),
    ))
}

/// "Tied embeddings": what tying saves, for this model.
pub fn tied_readout(e: &Experiment) -> Option<String> {
    let g = e.gpt()?;
    let saved = (g.vocab_size * g.embed) as u64;
    let total = Layout::new(e).parameter_count as u64;
    Some(if g.tie_embeddings {
        format!(
            "Tied: the head is the token embedding, so its V·C = {}·{} = {} parameters are held once — {:.1} % of the model's {}. Untie to pay for them, or race tied against untied from the same seed and see whether the loss notices.",
            g.vocab_size,
            g.embed,
            count(saved),
            100.0 * saved as f64 / (total + saved) as f64,
            count(total + saved)
        )
    } else {
        format!(
            "Untied: the head has its own V·C = {}·{} = {} parameters, {:.1} % of the model's {}.",
            g.vocab_size,
            g.embed,
            count(saved),
            100.0 * saved as f64 / total as f64,
            count(total)
        )
    })
}

/// "Adam's memory": the optimizer's state beside the parameters, from the
/// engine's buffers.
pub fn optimizer_readout(e: &Experiment, m: &MemoryBytes) -> Option<String> {
    if m.params == 0 {
        return None;
    }
    let copies = m.optimizer as f64 / m.params as f64;
    let model = m.params + m.grads + m.optimizer;
    Some(format!(
        "{} keeps {} cop{} of the parameters: {} of state beside {} of parameters and {} of gradients — {} before a single activation ({} of activations and attention for this batch).",
        e.optimizer.name(),
        if copies.fract() == 0.0 { format!("{copies}") } else { significant(copies, 2) },
        if (copies - 1.0).abs() < 1e-9 { "y" } else { "ies" },
        bytes(m.optimizer),
        bytes(m.params),
        bytes(m.grads),
        bytes(model),
        bytes(m.activations + m.attention),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::{default_gpt_experiment, edited};
    use stepscope_core::TrainState;

    #[test]
    fn buffers_count_only_under_the_settings_they_were_measured_for() {
        let e = default_gpt_experiment();
        let (off, on) = (MemoryBytes::estimate(&e, false), MemoryBytes::estimate(&e, true));
        assert!(buffers_are_current(&e, false, &off) && buffers_are_current(&e, true, &on));
        assert!(!buffers_are_current(&e, false, &on), "checkpointing's buffers are not the plain run's");
        let doubled = edited(&e, double_context).unwrap();
        assert!(!buffers_are_current(&doubled, false, &off), "context 64's buffers are not context 128's");
    }

    fn point(step: u64, max_logit: f32, entropy: f32) -> GptPoint {
        GptPoint {
            step,
            entropy: vec![vec![2.0, entropy]],
            max_logit: vec![vec![max_logit, 1.0]],
            residual_norm: vec![1.0],
            lse: 4.0,
            update_ratios: Vec::new(),
        }
    }

    #[test]
    fn the_high_rate_scenario_edits_the_rate_schedule_and_clipping_only() {
        let e = default_gpt_experiment();
        let high = edited(&e, too_high).unwrap();
        assert_eq!(high.optimizer.lr(), HIGH_LR);
        assert_eq!((high.schedule.clone(), high.clip_grad_norm), (Schedule::Constant, None));
        assert_eq!((high.model.clone(), high.seed, high.batch_size), (e.model.clone(), e.seed, e.batch_size));
        let mlp = crate::model::edit::default_experiment();
        assert!(edited(&mlp, too_high).is_err());
    }

    #[test]
    fn the_attention_readout_compares_the_first_and_last_steps() {
        assert_eq!(attention_readout(&[]), None);
        assert_eq!(attention_readout(&[point(0, 3.0, 1.5)]), None);
        let text = attention_readout(&[point(0, 3.0, 1.5), point(9, 24.5, 0.25)]).unwrap();
        assert_eq!(
            text,
            "From step 1 to 10: the largest attention logit 3.00 → 24.5; the lowest head entropy 1.50 → 0.250 nats."
        );
    }

    #[test]
    fn doubling_the_context_reads_the_buffers_of_both_runs() {
        let e = default_gpt_experiment();
        let doubled = edited(&e, double_context).unwrap();
        assert_eq!(doubled.gpt().unwrap().context, 128);
        // The engine's own buffers at both contexts.
        let measure = |e: &Experiment| {
            let state = TrainState::fresh(e);
            let mut engine = stepscope_core::CpuEngine::from_state(state, data(e)).unwrap();
            engine.step().unwrap();
            Measured { context: e.gpt().unwrap().context, memory: engine.memory() }
        };
        let (small, e2) = (shrunk(&e), shrunk(&doubled));
        let (a, b) = (measure(&small), measure(&e2));
        assert_eq!(b.memory.attention, 4 * a.memory.attention);
        assert_eq!(b.memory.activations, 2 * a.memory.activations);
        let text = context_readout(&a, &b).unwrap();
        assert!(
            text.starts_with("Context 8 → 16: attention probabilities") && text.contains("(×4.00, B·H·T²"),
            "{text}"
        );
        assert!(text.contains("(×2.00, B·T·C)"), "{text}");
        assert_eq!(context_readout(&a, &a), None, "not yet doubled");
    }

    /// The default's shape at a test's size (context 8 and 16).
    fn shrunk(e: &Experiment) -> Experiment {
        let mut small = e.clone();
        let g = small.model.gpt.as_mut().unwrap();
        g.context /= 8;
        (g.blocks, g.embed) = (1, 16);
        small.batch_size = 2;
        small.fit_shards();
        small
    }

    fn data(e: &Experiment) -> stepscope_core::data::Dataset {
        stepscope_core::data::Dataset::load(e, None).unwrap()
    }

    #[test]
    fn the_tied_readout_counts_the_heads_parameters() {
        let e = default_gpt_experiment();
        let tied = tied_readout(&e).unwrap();
        let untied = edited(&e, |e| crate::model::edit::set_gpt_switch(e, "tie_embeddings", false)).unwrap();
        let total = Layout::new(&untied).parameter_count as u64;
        assert_eq!(total, Layout::new(&e).parameter_count as u64 + 65 * 96);
        assert!(tied.contains(&format!("V·C = 65·96 = {}", count(65 * 96))) && tied.contains(&count(total)), "{tied}");
        assert!(tied_readout(&untied).unwrap().starts_with("Untied: the head has its own"));
        assert_eq!(tied_readout(&crate::model::edit::default_experiment()), None);
    }

    #[test]
    fn the_optimizer_readout_counts_copies_from_the_buffers() {
        let e = default_gpt_experiment();
        let m = MemoryBytes {
            params: 400,
            grads: 400,
            optimizer: 800,
            activations: 1000,
            backward_scratch: 0,
            attention: 24,
        };
        let text = optimizer_readout(&e, &m).unwrap();
        assert!(text.starts_with("adamw keeps 2 copies of the parameters: 800 B of state"), "{text}");
        let sgd = MemoryBytes { optimizer: 400, ..m };
        assert!(optimizer_readout(&e, &sgd).unwrap().contains("keeps 1 copy of"));
        assert_eq!(optimizer_readout(&e, &MemoryBytes::default()), None);
    }
}
