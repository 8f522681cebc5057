//! A transformer's views (issue 28), computed from the engine's real
//! parameters between training frames like the MLP's: the train and
//! validation loss over fixed windows, one validation window seen through
//! the model (every block's attention probabilities, the entropy and the
//! largest logit of each head, the residual stream's norm, the logits'
//! logsumexp: `inspect_window`), and a sample written from the person's
//! prompt a token at a time (`Sampler`), each character with the
//! probability the model gave it and the alternatives it weighed.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use stepscope_core::data::{Table, Vocabulary};
use stepscope_core::engine::{SampledToken, Sampler, Sampling};
use stepscope_core::model::gpt::{inspect_window, Gpt, GptActivations, WindowInspection};
use stepscope_core::{Error, Experiment};

/// Windows the loss views are evaluated over: spread evenly over the
/// validation windows (and over the training windows), the same ones at
/// every step, so that the curve moves with the model and not with the
/// choice of windows. The loss of the whole held-out text is the CLI's
/// (`stepscope train` evaluates every window).
pub const VAL_WINDOWS: usize = 64;
pub const TRAIN_WINDOWS: usize = 32;

/// Characters a sample writes, and the alternatives shown per character.
pub const SAMPLE_CHARS: usize = 160;
pub const SHOWN_ALTERNATIVES: usize = 5;

/// What the person asks of the views: the sample's prompt and temperature,
/// and which validation window the attention views read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GptViewSpec {
    pub prompt: String,
    pub temperature: f32,
    pub window: usize,
}

impl Default for GptViewSpec {
    fn default() -> Self {
        // nanoGPT's sample.py writes at 0.8 by default.
        GptViewSpec { prompt: "\n".into(), temperature: 0.8, window: 0 }
    }
}

/// Checks a spec against the run's text: a temperature in (0, 10], a
/// window that exists, a prompt of the text's characters.
pub fn check_spec(spec: &GptViewSpec, vocabulary: &Vocabulary, windows: usize) -> Result<Vec<u32>, Error> {
    if !(spec.temperature > 0.0 && spec.temperature <= 10.0) {
        return Err(Error::Experiment(format!(
            "the sample's temperature must be above 0 and at most 10, got {}",
            spec.temperature
        )));
    }
    if spec.window >= windows.max(1) {
        return Err(Error::Experiment(format!(
            "the attention window is {}, but the validation text has windows 0 to {}",
            spec.window,
            windows.saturating_sub(1)
        )));
    }
    if let Some(ch) = spec.prompt.chars().find(|&ch| vocabulary.token(ch).is_none()) {
        return Err(Error::Experiment(format!(
            "the prompt has {ch:?}, which is not one of the text's {} characters",
            vocabulary.len()
        )));
    }
    vocabulary.encode(&spec.prompt)
}

/// One written character, with the probability it was drawn with and the
/// most likely characters of its distribution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampledChar {
    pub ch: char,
    pub probability: f32,
    pub top: Vec<(char, f32)>,
}

/// A sample from the weights of one step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub step: u64,
    pub prompt: String,
    pub temperature: f32,
    pub chars: Vec<SampledChar>,
}

/// Attention maps sent to the page, at most: heads per block, and cells in
/// all (a long context's maps are cropped to their first positions, so
/// that what crosses from the worker stays small whatever the model).
pub const SHOWN_HEADS: usize = 16;
pub const SHOWN_CELLS: usize = 1 << 18;

/// The attention views of one validation window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttentionView {
    /// Which window, of how many.
    pub window: usize,
    pub windows: usize,
    /// The window's characters (the queries and keys, in order).
    pub text: Vec<char>,
    /// Per block, the first `shown_heads` heads' probabilities over the
    /// first `shown_t` queries and keys, (heads, shown_t, shown_t).
    pub maps: Vec<Vec<f32>>,
    pub shown_heads: usize,
    pub shown_t: usize,
    /// Entropy, largest logit, residual norm and logsumexp of every head
    /// and block (its `attention` moved into `maps`).
    pub seen: WindowInspection,
}

/// The largest t' ≤ t whose maps of `heads` heads over `blocks` blocks fit
/// `SHOWN_CELLS`.
pub fn shown_positions(t: usize, heads: usize, blocks: usize) -> usize {
    let per = (SHOWN_CELLS / (heads * blocks).max(1)) as f64;
    (per.sqrt() as usize).clamp(1, t.max(1))
}

/// What the data panel shows of the run's text.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TextPreview {
    /// The first characters of the training text.
    pub first: String,
    /// The vocabulary, in token order.
    pub vocabulary: String,
    pub train_windows: usize,
    pub val_windows: usize,
    pub context: usize,
}

/// Characters of the text the preview shows.
pub const PREVIEW_CHARS: usize = 240;

impl TextPreview {
    pub fn of(data: &stepscope_core::data::Dataset, context: usize) -> Option<TextPreview> {
        let vocabulary = data.vocabulary.as_ref()?;
        let table = &data.train;
        // Window w's inputs are the text's characters wT .. wT + T (the
        // training windows in file order, so the first are its start).
        let ids: Vec<u32> = table.inputs.iter().take(PREVIEW_CHARS).map(|&x| x as u32).collect();
        Some(TextPreview {
            first: vocabulary.decode(&ids).ok()?,
            vocabulary: vocabulary.as_string(),
            train_windows: data.train.rows(),
            val_windows: data.test.rows(),
            context,
        })
    }
}

/// ‖ΔW‖/‖W‖ of each weight matrix (tensors of two or more dimensions:
/// the embeddings and the blocks' four linear layers) from the engine's
/// [parameters, gradients, last updates]: how far the last step moved each
/// (about 1e-3 is the rule of thumb for a healthy learning rate). Empty
/// for the MLP.
pub fn update_ratios(layout: &stepscope_core::model::Layout, t: [&[f32]; 3]) -> Vec<(String, f32)> {
    if layout.gpt.is_none() {
        return Vec::new();
    }
    let norm = |x: &[f32]| x.iter().map(|&v| (v as f64) * (v as f64)).sum::<f64>().sqrt();
    layout
        .tensors()
        .into_iter()
        .filter(|info| info.shape.len() >= 2)
        .map(|info| {
            let range = info.offset..info.offset + info.len;
            let (w, dw) = (norm(&t[0][range.clone()]), norm(&t[2][range]));
            (info.name, (dw / w.max(f64::MIN_POSITIVE)) as f32)
        })
        .collect()
}

/// Everything a transformer's views add to the snapshot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GptViews {
    /// ‖ΔW‖/‖W‖ per weight matrix at the snapshot's step (`update_ratios`).
    pub update_ratios: Vec<(String, f32)>,
    pub preview: Option<TextPreview>,
    pub attention: Option<AttentionView>,
    /// The newest sample (written every few seconds, so it may be from an
    /// earlier step than the snapshot).
    pub sample: Option<Arc<Sample>>,
}

/// Rows `count` evenly spread over `rows` (all of them when fewer).
pub fn spread_rows(rows: usize, count: usize) -> Vec<usize> {
    if rows <= count {
        return (0..rows).collect();
    }
    (0..count).map(|i| i * rows / count).collect()
}

/// The windows a transformer's losses are evaluated over, (train, test):
/// `TRAIN_WINDOWS` and `VAL_WINDOWS` spread evenly over each set (the view
/// job's and the race's, so that their curves agree).
pub fn eval_windows(data: &stepscope_core::data::Dataset) -> (Table, Table) {
    (
        data.train.select(&spread_rows(data.train.rows(), TRAIN_WINDOWS)),
        data.test.select(&spread_rows(data.test.rows(), VAL_WINDOWS)),
    )
}

/// A sample being written, a token per chunk of the view job.
pub struct SampleJob {
    sampler: Sampler,
    sample: Sample,
}

impl SampleJob {
    pub fn new(e: &Experiment, step: u64, spec: &GptViewSpec, prompt: &[u32]) -> SampleJob {
        let how = Sampling { tokens: SAMPLE_CHARS, temperature: spec.temperature, top_k: None, seed: e.seed };
        SampleJob {
            sampler: Sampler::new(prompt, &how),
            sample: Sample { step, prompt: spec.prompt.clone(), temperature: spec.temperature, chars: Vec::new() },
        }
    }

    /// Writes one character; the sample once all are written.
    pub fn advance(&mut self, model: &Gpt, params: &[f32], vocabulary: &Vocabulary) -> Option<Sample> {
        if !self.sampler.done() {
            let SampledToken { token, probability, top } = self.sampler.next_token(model, params, SHOWN_ALTERNATIVES);
            let ch = |t: u32| vocabulary.chars().get(t as usize).copied().unwrap_or('\u{fffd}');
            self.sample.chars.push(SampledChar {
                ch: ch(token),
                probability,
                top: top.into_iter().map(|(t, p)| (ch(t), p)).collect(),
            });
        }
        self.sampler.done().then(|| std::mem::take(&mut self.sample))
    }
}

/// The attention views of validation window `window` of `table` (the
/// held-out windows, or the training ones when nothing is held out).
pub fn attention_view(
    model: &Gpt,
    params: &[f32],
    table: &Table,
    vocabulary: &Vocabulary,
    window: usize,
) -> Option<AttentionView> {
    let windows = table.rows();
    if windows == 0 {
        return None;
    }
    let w = window.min(windows - 1);
    let t = table.input_width;
    let ids: Vec<u32> = table.inputs[w * t..(w + 1) * t].iter().map(|&x| x as u32).collect();
    let targets: Vec<u32> = table.targets[w * t..(w + 1) * t].iter().map(|&x| x as u32).collect();
    let mut acts = GptActivations::new(false);
    let mut seen = inspect_window(model, &mut acts, params, &ids, &targets);
    let text = ids.iter().map(|&i| vocabulary.chars().get(i as usize).copied().unwrap_or('\u{fffd}')).collect();
    let shown_heads = seen.heads.min(SHOWN_HEADS);
    let shown_t = shown_positions(t, shown_heads, seen.attention.len());
    let maps = std::mem::take(&mut seen.attention)
        .into_iter()
        .map(|p| {
            let mut map = Vec::with_capacity(shown_heads * shown_t * shown_t);
            for head in p.chunks_exact(t * t).take(shown_heads) {
                for row in head.chunks_exact(t).take(shown_t) {
                    map.extend_from_slice(&row[..shown_t]);
                }
            }
            map
        })
        .collect();
    Some(AttentionView { window: w, windows, text, maps, shown_heads, shown_t, seen })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::default_gpt_experiment;
    use stepscope_core::data::Dataset;
    use stepscope_core::model::gpt::init_parameters;
    use stepscope_core::rng::{stream, Rng};

    /// A sample written a character at a time is `stepscope sample`'s
    /// text for the same seed, each character with its probability among
    /// the alternatives shown; a bad prompt, temperature or window is
    /// refused by name.
    #[test]
    fn the_page_samples_what_the_cli_samples() {
        let mut e = default_gpt_experiment();
        let g = e.model.gpt.as_mut().unwrap();
        (g.blocks, g.embed) = (1, 32);
        let data = Dataset::load(&e, None).unwrap();
        let vocabulary = data.vocabulary.clone().unwrap();
        let shape = e.gpt().unwrap().shape();
        let model = Gpt::new(shape);
        let params = init_parameters(&shape, &mut Rng::new(e.seed, stream::INIT));
        let spec = GptViewSpec { prompt: "ROMEO:".into(), temperature: 0.8, window: 3 };
        let prompt = check_spec(&spec, &vocabulary, data.test.rows()).unwrap();
        let mut job = SampleJob::new(&e, 0, &spec, &prompt);
        let sample = loop {
            if let Some(s) = job.advance(&model, &params, &vocabulary) {
                break s;
            }
        };
        let how = Sampling { tokens: SAMPLE_CHARS, temperature: 0.8, top_k: None, seed: e.seed };
        let cli = stepscope_core::engine::sample(&model, &params, &prompt, &how);
        let text: String = sample.chars.iter().map(|c| c.ch).collect();
        assert_eq!(text, vocabulary.decode(&cli).unwrap());
        for c in &sample.chars {
            assert_eq!(c.top.len(), SHOWN_ALTERNATIVES);
            assert!(c.top.windows(2).all(|w| w[0].1 >= w[1].1));
            assert!(c.probability > 0.0 && c.probability <= c.top[0].1);
            if let Some((_, p)) = c.top.iter().find(|(ch, _)| *ch == c.ch) {
                assert_eq!(*p, c.probability);
            }
        }
        let bad = |spec: GptViewSpec| check_spec(&spec, &vocabulary, data.test.rows()).unwrap_err().to_string();
        assert!(bad(GptViewSpec { prompt: "héllo".into(), ..spec.clone() }).contains("the prompt has 'é'"));
        assert!(bad(GptViewSpec { temperature: 0.0, ..spec.clone() }).contains("temperature"));
        assert!(bad(GptViewSpec { window: 100_000, ..spec.clone() }).contains("windows 0 to"));
        let view = attention_view(&model, &params, &data.test, &vocabulary, 3).unwrap();
        assert_eq!((view.window, view.text.len(), view.maps.len(), view.shown_t, view.shown_heads), (3, 64, 1, 64, 4));
        assert_eq!(view.maps[0].len(), 4 * 64 * 64);
        assert!(view.seen.attention.is_empty(), "sent once, as maps");
        assert_eq!(shown_positions(512, 16, 12), 36);
        assert_eq!(shown_positions(64, 4, 3), 64);
        let first: String = view.text.iter().collect();
        let row = &data.test.inputs[3 * 64..4 * 64];
        assert_eq!(first, vocabulary.decode(&row.iter().map(|&x| x as u32).collect::<Vec<_>>()).unwrap());
    }

    #[test]
    fn rows_are_spread_evenly() {
        assert_eq!(spread_rows(3, 8), vec![0, 1, 2]);
        assert_eq!(spread_rows(10, 4), vec![0, 2, 5, 7]);
    }
}
