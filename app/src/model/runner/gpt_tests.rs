//! The runner with a transformer: it trains in the page's loop and its
//! views (`views::gpt`) come from its weights; what it cannot take is
//! refused by name.

use super::{Command, FramePlan, FrameReport, Runner};
use crate::model::edit::default_gpt_experiment;
use crate::model::views::gpt::*;
use stepscope_core::trainer::block_on;

fn frame(runner: &mut Runner, commands: Vec<Command>) -> FrameReport {
    let plan = FramePlan { commands, running: true, budget_ms: 5.0, views_budget_ms: 1e9, ..FramePlan::default() };
    block_on(runner.frame(plan))
}

/// Frames until a step has landed: a frame may end part-way through a
/// step (a 5 ms budget, a loaded machine, a profiled step).
fn until_a_step(runner: &mut Runner) {
    for _ in 0..2000 {
        frame(runner, vec![]);
        if runner.step_count() > 0 {
            return;
        }
    }
}

/// A small transformer trains in the page's loop on the CPU engine and
/// its views come from its weights: the losses over the fixed windows,
/// the attention of the window asked for, a sample from the prompt
/// asked for, the text's preview. A prompt the text cannot write is
/// refused by name and the run goes on.
#[test]
fn a_transformer_trains_in_the_loop_with_its_views() {
    let mut e = default_gpt_experiment();
    let g = e.model.gpt.as_mut().unwrap();
    (g.blocks, g.embed, g.context) = (1, 16, 16);
    e.batch_size = 2;
    e.fit_shards();
    let mut runner = Runner::new(&e, None, None).unwrap();
    let spec = GptViewSpec { prompt: "KING".into(), temperature: 0.5, window: 7 };
    let mut seen = None;
    for i in 0..2000 {
        let commands = if i == 0 { vec![Command::GptViews(spec.clone())] } else { vec![] };
        let report = frame(&mut runner, commands);
        if i == 0 {
            assert!(matches!(report.outcomes[0], Ok(None)), "{:?}", report.outcomes);
        }
        // A frame may end part-way through a step (5 ms budget, a loaded
        // machine, a profiled step), so the views can come before a step.
        if let Some(Ok(snap)) = report.views {
            if snap.gpt.as_ref().is_some_and(|g| g.sample.is_some()) && runner.step_count() > 0 {
                seen = Some(snap);
                break;
            }
        }
    }
    let snap = seen.expect("views with a sample");
    assert!(runner.step_count() > 0);
    let views = snap.gpt.as_ref().unwrap();
    let sample = views.sample.as_ref().unwrap();
    assert_eq!((sample.prompt.as_str(), sample.temperature, sample.chars.len()), ("KING", 0.5, SAMPLE_CHARS));
    let attention = views.attention.as_ref().unwrap();
    assert_eq!((attention.window, attention.shown_t, attention.maps.len()), (7, 16, 1));
    assert_eq!(attention.maps[0].len(), 4 * 16 * 16);
    // Every weight matrix's last update against its size: the two
    // embeddings and the block's four linear layers.
    let names: Vec<&str> = views.update_ratios.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    assert!(names.contains(&"transformer.h.0.attn.c_attn.weight"));
    assert!(
        views.update_ratios.iter().all(|(_, r)| r.is_finite() && *r > 0.0 && *r < 1.0),
        "{:?}",
        views.update_ratios
    );
    let preview = views.preview.as_ref().unwrap();
    assert!(preview.first.starts_with("First Citizen:"), "{}", preview.first);
    assert_eq!(preview.vocabulary.chars().count(), 65);
    let (test, train) = (snap.test.unwrap(), snap.train.unwrap());
    assert!(test.loss.is_finite() && train.loss.is_finite());
    assert_eq!(test.accuracy.is_some(), train.accuracy.is_some());
    // Step by phase stops between a block's ops, each with its outputs.
    let paused =
        || FramePlan { commands: vec![Command::StepPhase], running: false, budget_ms: 5.0, ..FramePlan::default() };
    let mut stops = Vec::new();
    while stops.len() < 40 {
        let report = block_on(runner.frame(paused()));
        let Some(Ok(Some(crate::model::runner::Outcome::Phase(phase)))) = report.outcomes.first() else {
            panic!("{:?}", report.outcomes)
        };
        stops.push(phase.label());
        if phase.label() == "forward (micro-batch 1) · block 1 · attention" {
            assert!(phase.layers.iter().any(|l| l.label.as_deref() == Some("block 1 · attention P")));
            break;
        }
    }
    assert!(stops.len() < 40, "{stops:?}");
    // Refused by name; the run goes on.
    let steps = runner.step_count();
    let report = frame(&mut runner, vec![Command::GptViews(GptViewSpec { prompt: "Ωmega".into(), ..spec })]);
    let error = report.outcomes[0].as_ref().unwrap_err().to_string();
    assert!(error.contains("the prompt has 'Ω'"), "{error}");
    assert!(runner.step_count() > steps);
}

/// A text uploaded for the transformer: refused by name when it is not
/// UTF-8 (the offset named) or shorter than a window, the run going on;
/// a good one restarts the run on it with its vocabulary, and resets
/// and restored checkpoints keep training on it.
#[test]
fn an_uploaded_text_trains_or_is_refused_by_name() {
    let mut e = default_gpt_experiment();
    let g = e.model.gpt.as_mut().unwrap();
    (g.blocks, g.embed, g.context) = (1, 16, 8);
    e.batch_size = 2;
    e.fit_shards();
    let mut runner = Runner::new(&e, None, None).unwrap();
    until_a_step(&mut runner);
    let steps = runner.step_count();
    assert!(steps > 0);
    let refused = |runner: &mut Runner, name: &str, bytes: &[u8]| {
        let report = frame(runner, vec![Command::ReadText(name.into(), bytes.to_vec(), e.clone())]);
        report.outcomes[0].as_ref().unwrap_err().to_string()
    };
    let error = refused(&mut runner, "bad.txt", b"abc\xffdef");
    assert!(error.contains("`bad.txt` was not loaded") && error.contains("offset 3"), "{error}");
    let error = refused(&mut runner, "short.txt", b"tiny");
    assert!(error.contains("`short.txt` was not loaded"), "{error}");
    assert_eq!(runner.experiment(), &e, "the run is as it was");
    assert!(runner.step_count() >= steps);
    // Sent in parts, as the page sends it.
    let text = "the cat sat on the mat and the dog sat on the log. ".repeat(40);
    let (a, b) = text.as_bytes().split_at(300);
    frame(&mut runner, vec![Command::CsvBytes("mine.txt".into(), text.len() as u64, a.to_vec())]);
    let report = frame(&mut runner, vec![Command::ReadText("mine.txt".into(), b.to_vec(), e.clone())]);
    let Some(Ok(Some(crate::model::runner::Outcome::CsvLoaded(name, loaded)))) = report.outcomes.into_iter().next()
    else {
        panic!("not loaded")
    };
    assert_eq!(name, "mine.txt");
    assert_eq!(loaded.data.source, stepscope_core::experiment::DataSource::Text);
    let vocabulary: std::collections::BTreeSet<char> = text.chars().collect();
    assert_eq!(loaded.gpt().unwrap().vocab_size, vocabulary.len());
    assert_eq!(runner.step_count(), 0);
    until_a_step(&mut runner);
    assert!(runner.step_count() > 0, "it trains on the text");
    frame(&mut runner, vec![Command::Reset((*loaded).clone())]);
    until_a_step(&mut runner);
    assert!(runner.step_count() > 0, "a reset trains on the text again");
    let saved = frame(&mut runner, vec![Command::SaveCheckpoint]);
    let Some(Ok(Some(crate::model::runner::Outcome::Checkpoint(bytes, _)))) = saved.outcomes.into_iter().next() else {
        panic!("no checkpoint")
    };
    let restored = frame(&mut runner, vec![Command::RestoreCheckpoint(std::sync::Arc::new(bytes))]);
    assert!(
        matches!(restored.outcomes[0], Ok(Some(crate::model::runner::Outcome::Restored(..)))),
        "{:?}",
        restored.outcomes
    );
}
