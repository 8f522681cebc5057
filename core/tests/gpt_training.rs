//! The transformer trained by the one CPU engine and trainer the MLP uses:
//! loss falls, exact resume through a checkpoint (with its vocabulary),
//! activation checkpointing's bits and memory, nanoGPT's decay groups,
//! sampling's determinism, and bad configs and texts refused by name.
//! Tiny sizes only: long trainings are benchmarks.

use serde_json::{json, Value};
use stepscope_core::checkpoint::{load_checkpoint, save_checkpoint};
use stepscope_core::data::{Dataset, TokenText, MAX_VOCABULARY};
use stepscope_core::engine::{sample, MemoryBytes, Sampling};
use stepscope_core::model::gpt::Gpt;
use stepscope_core::model::Layout;
use stepscope_core::{CpuEngine, Experiment, TrainState};

const TEXT: &str = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n\
The slings and arrows of outrageous fortune,\nOr to take arms against a sea of troubles\n";

fn vocabulary_size() -> usize {
    TokenText::read(TEXT.as_bytes(), 1, MAX_VOCABULARY).unwrap().vocabulary.len()
}

fn config(overrides: Value) -> Value {
    let mut e = json!({
        "seed": 5,
        "model": {"kind": "gpt", "vocab_size": vocabulary_size(), "context": 8, "embed": 12, "heads": 2, "blocks": 2},
        "loss": "cross_entropy",
        "optimizer": {"kind": "adamw", "lr": 0.01, "betas": [0.9, 0.99], "weight_decay": 0.1},
        "batch_size": 4,
        "clip_grad_norm": 1.0,
        "data": {"source": "text", "train_fraction": 0.8}
    });
    merge(&mut e, overrides);
    e
}

fn merge(base: &mut Value, overrides: Value) {
    match (base, overrides) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o,
    }
}

fn experiment(overrides: Value) -> Experiment {
    Experiment::from_json(&config(overrides).to_string()).unwrap()
}

fn data(e: &Experiment) -> Dataset {
    let text = TokenText::read(TEXT.as_bytes(), e.gpt().unwrap().context, MAX_VOCABULARY).unwrap();
    Dataset::load_text(e, &text).unwrap()
}

fn engine(e: &Experiment) -> CpuEngine {
    CpuEngine::new(e, data(e)).unwrap()
}

#[test]
fn a_small_gpt_learns_its_text() {
    let e = experiment(json!({"data": {"train_fraction": null}}));
    let mut engine = engine(&e);
    let train = engine.data().train.clone();
    let before = engine.evaluate(&train).unwrap().loss;
    // At initialisation the model is near uniform over the vocabulary.
    assert!((before - (vocabulary_size() as f32).ln()).abs() < 0.1, "{before}");
    for _ in 0..150 {
        engine.step().unwrap();
    }
    let after = engine.evaluate(&train).unwrap();
    assert!(after.loss < 0.5 * before, "train loss {before} -> {}", after.loss);
    assert!(after.accuracy.unwrap() > 0.4, "{after:?}");
}

#[test]
fn a_checkpoint_resumes_exactly_and_carries_the_vocabulary() {
    let e = experiment(json!({"grad_accumulation": 2, "z_loss": 1e-3,
        "schedule": {"kind": "warmup_cosine", "warmup_steps": 2, "total_steps": 20}}));
    let mut a = engine(&e);
    for _ in 0..4 {
        a.step().unwrap();
    }
    let bytes = save_checkpoint(&a.state()).unwrap();
    let restored = load_checkpoint(&bytes).unwrap();
    assert_eq!(restored, a.state());
    assert_eq!(restored.vocabulary.as_ref().unwrap().len(), vocabulary_size());
    let mut b = CpuEngine::from_state(restored, data(&e)).unwrap();
    for _ in 0..4 {
        let (ma, mb) = (a.step().unwrap(), b.step().unwrap());
        assert_eq!((ma.loss, ma.grad_norm, ma.z_loss), (mb.loss, mb.grad_norm, mb.z_loss));
        assert!(ma.z_loss.unwrap() > 0.0);
    }
    assert_eq!(a.params(), b.params());
    // Another text with as many characters is refused: its ids would mean
    // other characters.
    let other: String = TEXT.chars().map(|c| if c == 'q' { 'Q' } else { c }).collect();
    let text = TokenText::read(other.as_bytes(), 8, MAX_VOCABULARY).unwrap();
    let msg = CpuEngine::from_state(a.state(), Dataset::load_text(&e, &text).unwrap()).err().unwrap().to_string();
    assert!(msg.contains("vocabulary") && msg.contains("is not the text's"), "{msg}");
    // A file's vocabulary is checked against the model, digest or not.
    let mut hostile = a.state();
    hostile.vocabulary = Some(stepscope_core::data::Vocabulary::from_string("abc").unwrap());
    let bytes = stepscope_core::checkpoint::serialize_unchecked(&hostile).unwrap();
    let msg = load_checkpoint(&bytes).unwrap_err().to_string();
    assert!(msg.contains(&format!("the vocabulary holds 3 characters but model.vocab_size is {}", vocabulary_size())));
    // The page trains transformers within its own limits, named in the
    // refusal of a link past them.
    stepscope_core::limits::Limits::PAGE.check(&e, None).unwrap();
    let wide = experiment(json!({"model": {"embed": 1024, "heads": 8}}));
    let msg = stepscope_core::limits::Limits::PAGE.check(&wide, None).unwrap_err().to_string();
    assert!(msg.contains("model.embed is 1024, more than the 512 allowed on this page"), "{msg}");
    let long = experiment(json!({"model": {"context": 2048}}));
    let msg = stepscope_core::limits::Limits::PAGE.check(&long, None).unwrap_err().to_string();
    assert!(msg.contains("model.context is 2048"), "{msg}");
}

#[test]
fn checkpointing_keeps_the_bits_and_the_memory_is_the_buffers() {
    for qk in [false, true] {
        let e = experiment(json!({"model": {"qk_layernorm": qk, "tie_embeddings": !qk}, "z_loss": 1e-4}));
        let (mut plain, mut kept) = (engine(&e), engine(&e));
        kept.set_activation_checkpointing(true).unwrap();
        for _ in 0..3 {
            let (a, b) = (plain.step().unwrap(), kept.step().unwrap());
            assert_eq!((a.loss, a.grad_norm), (b.loss, b.grad_norm));
        }
        assert_eq!(plain.params(), kept.params());
        let (m, c) = (plain.memory(), kept.memory());
        assert_eq!(m, MemoryBytes::estimate(&e, false));
        assert_eq!(c, MemoryBytes::estimate(&e, true));
        // B·H·T² per block: 4·2·64 f32s, two blocks, one with checkpointing.
        assert_eq!((m.attention, c.attention), (2 * 4 * 4 * 2 * 64, 4 * 4 * 2 * 64));
        assert!(c.activations < m.activations);
        // The page's trade line: what checkpointing saves is what the
        // buffers lost.
        let trade = stepscope_core::engine::CheckpointingTrade::new(&Layout::new(&e), e.batch_size);
        assert_eq!(trade.bytes_saved, m.activations + m.attention - c.activations - c.attention);
        let (forward, backward) = e.step_flops();
        assert_eq!(trade.step_flops, (forward + backward) as u64);
        assert!(trade.flops_added() > 0.2 && trade.flops_added() < 1.0 / 3.0, "{}", trade.flops_added());
        assert_eq!(m.params, 4 * Layout::new(&e).parameter_count as u64);
        assert_eq!(m.optimizer, 2 * m.params);
    }
}

#[test]
fn only_tensors_of_two_or_more_dimensions_decay() {
    // lr 0 in Adam's update but not in the decay would need two rates; a
    // step with zero gradients shows the decay alone: AdamW's update of a
    // zero gradient is 0 (m = v = 0), so p ← p·(1 − lr·λ) where it decays.
    let e = experiment(json!({"optimizer": {"lr": 0.5, "weight_decay": 0.2}}));
    let mut state = TrainState::fresh(&e);
    let before = state.params.clone();
    let grads = vec![0.0; before.len()];
    let tensors = Layout::new(&e).tensors();
    stepscope_core::optim::optimizer_step(&mut state.params, &mut state.optimizer, &grads, &e.optimizer, 0.5, &tensors);
    for t in &tensors {
        let range = t.offset..t.offset + t.len;
        let factor = if t.shape.len() >= 2 { 1.0 - 0.5 * 0.2 } else { 1.0 };
        for (p, q) in state.params[range.clone()].iter().zip(&before[range]) {
            assert_eq!(*p, q * factor as f32, "{}", t.name);
        }
        assert_eq!(t.decays, t.shape.len() >= 2, "{}", t.name);
    }
}

#[test]
fn sampling_is_the_seeds() {
    let e = experiment(json!({}));
    let mut engine = engine(&e);
    for _ in 0..20 {
        engine.step().unwrap();
    }
    let model = Gpt::new(e.gpt().unwrap().shape());
    let vocabulary = engine.data().vocabulary.clone().unwrap();
    let prompt = vocabulary.encode("To be").unwrap();
    let how = |seed| Sampling { tokens: 30, temperature: 0.8, top_k: Some(5), seed };
    let a = sample(&model, engine.params(), &prompt, &how(1));
    assert_eq!(a, sample(&model, engine.params(), &prompt, &how(1)));
    assert_ne!(a, sample(&model, engine.params(), &prompt, &how(2)));
    assert_eq!(a.len(), 30);
    // Longer than the context: the model reads the last T tokens.
    assert!(vocabulary.decode(&a).is_ok());
    // top-k 1 is greedy: every seed writes the same text.
    let greedy = |seed| sample(&model, engine.params(), &prompt, &Sampling { top_k: Some(1), ..how(seed) });
    assert_eq!(greedy(1), greedy(2));
}

#[test]
fn bad_configs_and_texts_are_refused_by_name() {
    let cases = [
        (json!({"model": {"heads": 5}}), "model.embed (12) must be a multiple of model.heads (5)"),
        (json!({"model": {"heads": 0}}), "model.heads must be in 1..=12, got 0"),
        (json!({"model": {"context": 0}}), "model.context must be in 1..="),
        (json!({"model": {"vocab_size": 100000}}), "model.vocab_size must be in 1..=4096"),
        (json!({"model": {"blocks": 1000}}), "model.blocks must be in 1..=64"),
        (json!({"model": {"kind": "rnn"}}), "unknown variant `rnn` for model.kind"),
        (json!({"model": {"layers": []}}), "unknown field `layers`"),
        (json!({"loss": "mse"}), "a gpt model's loss must be \"cross_entropy\""),
        (json!({"data": {"source": "xor"}}), "a gpt model reads text"),
        (json!({"data": {"noise": 0.1}}), "data.noise does not apply"),
        (json!({"z_loss": -1}), "z_loss must be a finite number >= 0"),
    ];
    for (overrides, want) in cases {
        let msg = Experiment::from_json(&config(overrides.clone()).to_string()).unwrap_err().to_string();
        assert!(msg.contains(want), "{overrides}: `{msg}` lacks `{want}`");
    }
    let mlp = json!({"model": {"inputs": 2, "layers": [{"units": 2, "activation": "linear"}]},
        "loss": "cross_entropy", "optimizer": {"kind": "sgd"}, "batch_size": 2, "data": {"source": "text"}});
    let msg = Experiment::from_json(&mlp.to_string()).unwrap_err().to_string();
    assert!(msg.contains("is text: it needs \"model\": {\"kind\": \"gpt\""), "{msg}");
    // The data's vocabulary against the model's.
    let e = experiment(json!({"model": {"vocab_size": 7}}));
    let text = TokenText::read(TEXT.as_bytes(), 8, MAX_VOCABULARY).unwrap();
    let msg = Dataset::load_text(&e, &text).unwrap_err().to_string();
    assert!(msg.contains(&format!("model.vocab_size is 7 but the text has {} distinct characters", vocabulary_size())));
    // Tiny Shakespeare has 65.
    let e = experiment(json!({"data": {"source": "shakespeare"}}));
    let msg = Dataset::load(&e, None).unwrap_err().to_string();
    assert!(msg.contains("but the text has 65 distinct characters"), "{msg}");
    // An MLP's JSON is written as before: no `kind`.
    let mlp = Experiment::from_json(
        r#"{"model": {"inputs": 2, "layers": [{"units": 1, "activation": "linear"}]}, "loss": "mse",
            "optimizer": {"kind": "sgd"}, "batch_size": 2, "data": {"source": "reg_plane"}}"#,
    )
    .unwrap();
    assert!(!mlp.to_json().contains("kind\":\"mlp") && !mlp.to_json().contains("z_loss"), "{}", mlp.to_json());
    let e = experiment(json!({}));
    assert_eq!(Experiment::from_json(&e.to_json()).unwrap(), e);
    assert!(e.to_json().contains(r#""model":{"kind":"gpt","vocab_size""#), "{}", e.to_json());
}

/// A step's forward and backward split by op kind and block: every part
/// measured (≥ 0), the parts within their phase (the phase's own
/// bookkeeping is the rest), recomputation only with activation
/// checkpointing, one line per block.
#[test]
fn op_times_split_the_phases_they_sit_in() {
    for checkpointing in [false, true] {
        let e = experiment(json!({"model": {"blocks": 2}}));
        let mut engine = engine(&e);
        engine.set_activation_checkpointing(checkpointing).unwrap();
        assert!(engine.op_times().is_none(), "no step yet");
        let m = engine.step().unwrap();
        let (step, forward, backward) = engine.op_times().cloned().unwrap();
        assert_eq!(step, m.step);
        assert_eq!((forward.blocks.len(), backward.blocks.len()), (2, 2));
        for t in [&forward, &backward] {
            assert!(t.embedding >= 0.0 && t.head >= 0.0 && t.blocks.iter().flatten().all(|&x| x >= 0.0), "{t:?}");
        }
        let slack = 1e-3;
        assert!(forward.total() <= m.phases.forward_ms + slack, "{} > {}", forward.total(), m.phases.forward_ms);
        assert!(backward.total() <= m.phases.backward_ms + slack, "{} > {}", backward.total(), m.phases.backward_ms);
        use stepscope_core::model::gpt::OpKind;
        assert_eq!(forward.of_kind(OpKind::Recompute), 0.0);
        assert_eq!(backward.of_kind(OpKind::Recompute) > 0.0, checkpointing);
    }
}

/// Step by phase on a transformer stops between a block's ops: the forward
/// shows each op's output so far in forward order (the part's own last),
/// backward the residual stream's gradient and each tensor's gradient as
/// backward reaches it, the optimizer each tensor's update against its
/// size; the step so taken is the whole step's, to the bit, with and
/// without activation checkpointing, with two micro-batches.
#[test]
fn a_transformer_steps_by_phase_between_ops_with_each_ops_tensors() {
    for (checkpointing, k) in [(false, 1), (true, 2)] {
        let e = experiment(json!({"model": {"blocks": 2, "qk_layernorm": true}, "grad_accumulation": k}));
        let (mut whole, mut phased) = (engine(&e), engine(&e));
        for engine in [&mut whole, &mut phased] {
            engine.set_activation_checkpointing(checkpointing).unwrap();
        }
        let m = whole.step().unwrap();
        let stages = 2 * 4 + 2;
        let layout = Layout::new(&e);
        let tensors: Vec<String> = layout.tensors().into_iter().map(|t| t.name).collect();
        for micro in 0..k {
            let mut forward = Vec::new();
            for _ in 0..stages {
                forward.push(phased.step_phase().unwrap());
            }
            let names: Vec<String> = forward.iter().map(|r| r.part.as_ref().unwrap().name.clone()).collect();
            assert_eq!(names[..3], ["embedding", "block 1 · ln_1", "block 1 · attention"], "{names:?}");
            assert_eq!(names[8..], ["block 2 · MLP", "head (ln_f, logits, loss)"], "{names:?}");
            for (i, r) in forward.iter().enumerate() {
                let part = r.part.as_ref().unwrap();
                assert_eq!((part.index, part.count), (i, stages));
                assert_eq!(part.next, names.get(i + 1).cloned());
                assert_eq!(r.loss.is_some(), i + 1 == stages, "the loss comes with the head");
                assert_eq!(r.next(), if i + 1 < stages { r.phase } else { r.phase.next(k) });
                // The part's own outputs are the report's last rows.
                let labels: Vec<&str> = r.layers.iter().map(|l| l.label.as_deref().unwrap()).collect();
                let own = &labels[labels.len() - part.added..];
                let want: &[&str] = match (i, checkpointing) {
                    (2, _) => &[
                        "block 1 · q, k, v",
                        "block 1 · attention P",
                        "block 1 · attention output",
                        "block 1 · x + attention",
                    ],
                    (4, false) => &["block 1 · c_fc", "block 1 · GELU", "block 1 · x + MLP"],
                    (4, true) => &["block 1 · output (kept; the rest is recomputed)"],
                    (9, _) => &["ln_f", "logits"],
                    _ => &[],
                };
                assert!(want.is_empty() || own == want, "stop {i}: {own:?}");
            }
            let last = forward.last().unwrap();
            let rows = if checkpointing { 1 + 2 + 2 } else { 1 + 2 * 9 + 2 };
            assert_eq!(last.layers.len(), rows);
            assert!(last
                .layers
                .iter()
                .all(|l| l.tensors[0].norm > 0.0 && l.tensors[0].stats.histogram.iter().sum::<u32>() > 0));
            if micro == 0 {
                assert_eq!(last.loss.unwrap().to_bits(), forward_loss_bits(&e, checkpointing));
            }
            let mut reached = Vec::new();
            for i in 0..stages {
                let r = phased.step_phase().unwrap();
                let part = r.part.as_ref().unwrap();
                assert_eq!(part.index, i);
                let labels: Vec<String> = r.layers.iter().map(|l| l.label.clone().unwrap()).collect();
                assert!(labels[0].starts_with("∂objective/∂x at ") && r.layers[0].tensors[0].norm > 0.0, "{labels:?}");
                let own = &labels[labels.len() - part.added..];
                match part.name.as_str() {
                    "block 2 · MLP" => {
                        assert!(own.iter().all(|n| n.starts_with("transformer.h.1.mlp.")) && own.len() == 4)
                    }
                    "block 1 · attention" => {
                        assert!(own.iter().all(|n| n.starts_with("transformer.h.0.attn.")) && own.len() == 8, "{own:?}")
                    }
                    "embedding" => assert_eq!(own, ["transformer.wpe.weight"], "the tied embedding came with the head"),
                    _ => {}
                }
                reached = labels[1..].to_vec();
            }
            let mut sorted = reached.clone();
            sorted.sort();
            let mut all = tensors.clone();
            all.sort();
            assert_eq!(sorted, all, "backward reaches every tensor once");
        }
        let optimizer = phased.step_phase().unwrap();
        assert!(optimizer.part.is_none());
        assert!(optimizer.layers.iter().all(|l| l.update_ratio.is_some_and(|r| r.is_finite())));
        let done = optimizer.metrics.unwrap();
        assert_eq!((done.loss.to_bits(), done.grad_norm.to_bits()), (m.loss.to_bits(), m.grad_norm.to_bits()));
        let bits = |e: &CpuEngine| e.state().params.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&phased), bits(&whole), "checkpointing {checkpointing}");
    }
}

/// The first micro-batch's loss of a fresh engine's whole step.
fn forward_loss_bits(e: &Experiment, checkpointing: bool) -> u32 {
    let mut fresh_e = e.clone();
    fresh_e.grad_accumulation = 1;
    let mut one = engine(&fresh_e);
    one.set_activation_checkpointing(checkpointing).unwrap();
    one.step().unwrap().loss.to_bits()
}

/// A transformer too large for any engine's flat buffer is refused by its
/// parameter count before anything is sized from it.
#[test]
fn a_model_past_the_parameter_bound_is_refused() {
    let msg = Experiment::from_json(
        r#"{"model": {"kind": "gpt", "vocab_size": 65, "context": 64, "embed": 4096, "heads": 8, "blocks": 64},
            "loss": "cross_entropy", "optimizer": {"kind": "adamw", "lr": 0.001}, "batch_size": 1,
            "data": {"source": "shakespeare"}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("parameters, more than the 1073741824 an engine holds"), "{msg}");
}
