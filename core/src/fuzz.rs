//! A stable-toolchain fuzzer for everything that reads outside input:
//! checkpoint files, experiment JSON (what a config holds), the page's URL
//! state (what a shared link holds), CSV, text (the transformer's data),
//! runs from outside (metrics logs and traces, plain and gzipped,
//! `runs::open_run`) and the strict JSON check every JSON reader runs
//! first (`json::unique_keys`). No nightly compiler is at hand for cargo-fuzz, so this is a seeded
//! mutation harness: it starts from a corpus of valid inputs, mutates them
//! (bit flips, byte edits, interesting numbers, splices, truncations,
//! duplications), runs each through a target, and reports any panic with
//! the input that caused it. A target must answer every input with `Ok` or
//! an `Err` naming what is wrong: never a panic, an abort or a hang.
//!
//! `core/tests/fuzz.rs` replays the corpus and runs a short fuzz in the
//! test command; `cargo run --release -p stepscope-core --example fuzz`
//! runs long ones (scripts/fuzz.sh: time and memory limits, crashers kept).

use crate::checkpoint::load_checkpoint;
use crate::data::{parse_csv, Dataset};
use crate::engine::CpuEngine;
use crate::experiment::{DataSource, Experiment};
use crate::limits::Limits;
use crate::rng::Rng;

/// The targets, by name.
pub const TARGETS: [&str; 7] = ["checkpoint", "experiment", "link", "csv", "text", "run", "json"];

/// Runs `input` through target `name`. Errors are the expected answer to
/// bad input; only a panic (or a hang) is a finding.
pub fn run(name: &str, input: &[u8]) {
    match name {
        "checkpoint" => checkpoint(input),
        "experiment" => experiment(input),
        "link" => link(input),
        "csv" => csv(input),
        "text" => text(input),
        "run" => run_file(input),
        "json" => json(input),
        other => panic!("no fuzz target {other}"),
    }
}

/// Load a checkpoint; if it loads, check it against the native limits
/// with a small budget, build the CPU engine on its data and take a step,
/// save it, and load the saved bytes again. Most mutations would stop at
/// the digest, so each input also runs with its digest made right again:
/// that way mutated metadata and tensors reach every check behind it.
fn checkpoint(input: &[u8]) {
    checkpoint_run(input);
    if let Some(redigested) = with_digest_fixed(input) {
        checkpoint_run(&redigested);
    }
}

/// `input` re-serialized with the digest its tensors and metadata have.
fn with_digest_fixed(input: &[u8]) -> Option<Vec<u8>> {
    use safetensors::tensor::TensorView;
    let file = safetensors::SafeTensors::deserialize(input).ok()?;
    let (_, header) = safetensors::SafeTensors::read_metadata(input).ok()?;
    let mut meta = header.metadata().clone()?;
    let tensors = file.tensors();
    let covered: Vec<(&str, &str)> = match meta.get("format").map(String::as_str) {
        Some(crate::checkpoint::FORMAT_TAG) => crate::checkpoint::DIGESTED_METADATA
            .iter()
            .chain(&crate::checkpoint::DIGESTED_IF_PRESENT)
            .filter_map(|k| meta.get(*k).map(|v| (*k, v.as_str())))
            .collect(),
        _ => Vec::new(),
    };
    let digest = crate::checkpoint::digest(tensors.iter().map(|(n, v)| (n.as_str(), v.shape(), v.data())), &covered);
    meta.insert("digest".into(), digest);
    let views: Vec<(String, TensorView<'_>)> = tensors.into_iter().collect();
    safetensors::serialize(views, Some(meta)).ok()
}

fn checkpoint_run(input: &[u8]) {
    let Ok(state) = load_checkpoint(input) else { return };
    // What loads gave no key twice in its header.
    let len = u64::from_le_bytes(input[..8].try_into().expect("a loaded file has its length")) as usize;
    let header = std::str::from_utf8(&input[8..8 + len]).expect("a loaded header is text");
    assert!(crate::json::unique_keys(header).is_ok(), "a header with a repeated key loaded");
    let e = state.experiment.clone();
    if e.data.source == DataSource::Csv || Limits::native(64).check(&e, None).is_err() {
        return;
    }
    let Ok(data) = Dataset::load(&e, None) else { return };
    let Ok(mut engine) = CpuEngine::from_state(state, data) else { return };
    let _ = engine.step();
    // What saves, loads (a state that cannot load is refused when saved).
    if let Ok(saved) = crate::checkpoint::save_checkpoint(&engine.state()) {
        load_checkpoint(&saved).expect("a saved checkpoint loads");
    }
}

/// An experiment as a link or a config gives it: parse, check against the
/// page's limits (what a link goes through), write its PyTorch script, and
/// round-trip it through JSON.
fn experiment(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else { return };
    let Ok(e) = Experiment::from_json(text) else { return };
    // Nothing accepted gave a key twice, at any depth.
    assert!(crate::json::unique_keys(text).is_ok(), "an experiment with a repeated key was accepted");
    let _ = Limits::PAGE.check(&e, None);
    let _ = crate::export::pytorch_script(&e);
    let again = Experiment::from_json(&e.to_json()).expect("a valid experiment's JSON parses");
    assert_eq!(again, e, "JSON round trip");
}

/// A page URL as a shared link gives it, `<query>#<fragment>`: the query's
/// flags, and the fragment's experiment through the page's limits. An
/// experiment a link builds writes a link that builds it again.
fn link(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else { return };
    let (search, hash) = text.find('#').map_or((text, ""), |at| text.split_at(at));
    let _ = (crate::link::engine_pin(search), crate::link::fused_allowed(search));
    // The page writes hide= ids into a CSS selector: each must be a plain id.
    let hide = crate::link::hide_request(search);
    assert!(hide.ids.len() <= crate::link::MAX_HIDE_IDS, "hide= capped");
    assert!(hide.ids.iter().all(|id| crate::link::is_control_id(id)), "hide= ids are plain");
    let lock = crate::link::lock_request(search);
    // Rewriting the pin keeps the classroom's parameters.
    let rewritten = crate::link::query_with_engine(search, Some("cpu"));
    assert_eq!(crate::link::engine_pin(&rewritten), Some("cpu"), "pin rewritten");
    assert_eq!(crate::link::lock_request(&rewritten), lock, "lock= kept");
    assert_eq!(crate::link::hide_request(&rewritten), hide, "hide= kept");
    let _ = crate::link::decode_component(hash);
    if let Ok(Some(e)) = crate::link::parse_fragment(hash) {
        let again = crate::link::parse_fragment(&crate::link::fragment(&e)).expect("a link the page writes parses");
        assert_eq!(again, Some(e), "link round trip");
    }
}

/// A CSV upload against a regression, a binary and a multiclass experiment.
fn csv(input: &[u8]) {
    let Ok(text) = std::str::from_utf8(input) else { return };
    for (loss, outputs) in [("mse", 2), ("bce_with_logits", 1), ("cross_entropy", 3)] {
        let e = Experiment::from_json(&format!(
            r#"{{"model": {{"inputs": 2, "layers": [{{"units": {outputs}, "activation": "linear"}}]}},
                "loss": "{loss}", "optimizer": {{"kind": "sgd", "lr": 0.1}}, "batch_size": 4,
                "data": {{"source": "csv"}}}}"#
        ))
        .expect("a fixed experiment");
        if let Ok(table) = parse_csv(text, &e) {
            assert_eq!(table.inputs.len(), table.rows() * 2);
        }
    }
    let _ = crate::data::csv_header(text);
}

/// A text upload: read as characters for a few contexts; where it reads,
/// a tiny transformer of its vocabulary takes a step on its windows and
/// writes a checkpoint that loads with the vocabulary it saved.
fn text(input: &[u8]) {
    use crate::data::{TokenText, MAX_VOCABULARY};
    for context in [1, 3, 8] {
        let Ok(t) = TokenText::read(input, context, MAX_VOCABULARY) else { continue };
        assert_eq!(t.vocabulary.decode(&t.ids).expect("ids decode"), std::str::from_utf8(input).expect("UTF-8"));
        if t.vocabulary.len() > 64 || t.ids.len() > 4096 {
            continue; // big enough to be slow, not to find more
        }
        let e = Experiment::from_json(&format!(
            r#"{{"model": {{"kind": "gpt", "vocab_size": {}, "context": {context}, "embed": 4, "heads": 2, "blocks": 1}},
                "loss": "cross_entropy", "optimizer": {{"kind": "adamw"}}, "batch_size": 2,
                "data": {{"source": "text", "train_fraction": 0.5}}}}"#,
            t.vocabulary.len()
        ))
        .expect("a fixed experiment");
        let data = Dataset::load_text(&e, &t).expect("the text's own vocabulary fits");
        let Ok(mut engine) = CpuEngine::new(&e, data) else { continue };
        engine.step().expect("a step on a tiny model is finite");
        let saved = crate::checkpoint::save_checkpoint(&engine.state()).expect("saves");
        assert_eq!(load_checkpoint(&saved).expect("loads").vocabulary, Some(t.vocabulary));
    }
}

/// A run's file opened as the page and `stepscope open` open it, alone,
/// as one of two ranks, and gzipped (so that what is mutated reaches the
/// readers behind the inflating too); what opens gives finite shares, and
/// a metrics log that opens gave no key twice.
fn run_file(input: &[u8]) {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(input).expect("writes to memory");
    let gz = gz.finish().expect("writes to memory");
    for files in [vec![("run", input)], vec![("a", input), ("b", input)], vec![("run.gz", gz.as_slice())]] {
        if let Ok(run) = crate::runs::open_run(&files) {
            assert!(run.steps() > 0 && run.steps() <= files.len() * crate::runs::MAX_RUN_STEPS);
            if let (crate::runs::RunKind::Metrics, Ok(text)) = (run.kind, std::str::from_utf8(input)) {
                assert!(text.lines().all(|l| crate::json::unique_keys(l).is_ok() || l.trim().is_empty()), "repeats");
            }
            let share = run.data_share();
            assert!(share.is_finite() && (0.0..=1.0 + 1e-9).contains(&share), "data share {share}");
            if let Some(shares) = run.gpu_breakdown() {
                let sum: f64 = shares.iter().sum();
                assert!(shares.iter().all(|s| s.is_finite() && *s >= -1e-9), "GPU breakdown {shares:?}");
                assert!((sum - 1.0).abs() < 1e-6, "GPU breakdown {shares:?} adds up to {sum}");
                assert!(run.gpu_longest_gap_ms().is_some_and(|g| g.is_finite() && g >= 0.0));
            }
            for row in run.rank_rows() {
                assert!(row.step_ms.is_finite() && row.communication_share.is_finite(), "{row:?}");
            }
            let _ = run.mean_phases();
        }
    }
}

/// The strict JSON check against serde_json and against `json::UniqueMap`,
/// which builds the value: what it passes, serde_json parses and the map
/// builds; what it refuses as not JSON, serde_json refuses; where it
/// finds a repeated key (the first, in the order of the text, before any
/// later fault), the map finds one too.
fn json(input: &[u8]) {
    use crate::json::Refused;
    let Ok(text) = std::str::from_utf8(input) else { return };
    let checked = crate::json::unique_keys(text);
    let parsed = serde_json::from_str::<serde_json::Value>(text);
    match &checked {
        Ok(()) => {
            // Written again, it has no repeat either.
            let again = serde_json::to_string(parsed.as_ref().expect("passed, so it parses")).expect("serialises");
            assert_eq!(crate::json::unique_keys(&again), Ok(()));
        }
        Err(Refused::NotJson(_)) => assert!(parsed.is_err(), "refused as not JSON, but it parses"),
        Err(Refused::Repeated { .. }) => {}
    }
    if matches!(checked, Err(Refused::NotJson(_))) {
        return;
    }
    // One value (or one up to its first repeat): wrapped in an object, the
    // map agrees, unless the wrapping passes the nesting limit.
    match serde_json::from_str::<crate::json::UniqueMap>(&format!("{{\"x\": {text}}}")) {
        Ok(_) => assert!(checked.is_ok(), "{checked:?}, but the map builds"),
        Err(e) if e.to_string().contains("recursion limit") => {}
        Err(e) => assert_eq!(
            matches!(checked, Err(Refused::Repeated { .. })),
            e.to_string().contains("appears twice"),
            "{checked:?} against the map's {e}"
        ),
    }
}

/// Numbers that break parsers and counters.
const INTERESTING: [&str; 14] = [
    "0",
    "-1",
    "1e30",
    "-1e30",
    "1e400",
    "NaN",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "4294967296",
    "65536",
    "4096",
    "0.0000001",
    "\"\"",
];

/// A seeded mutator over a corpus.
pub struct Mutator {
    rng: Rng,
}

impl Mutator {
    pub fn new(seed: u64) -> Mutator {
        Mutator { rng: Rng::new(seed, 0xf022) }
    }

    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    /// One to four mutations of `base`, sometimes spliced with `other`.
    pub fn mutate(&mut self, base: &[u8], other: &[u8]) -> Vec<u8> {
        let mut out = base.to_vec();
        for _ in 0..1 + self.below(4) {
            let at = self.below(out.len() + 1);
            match self.below(9) {
                0 if !out.is_empty() => {
                    let i = self.below(out.len());
                    out[i] ^= 1 << self.below(8);
                }
                1 if !out.is_empty() => {
                    let i = self.below(out.len());
                    out[i] = self.rng.next_u64() as u8;
                }
                2 => out.insert(at, self.rng.next_u64() as u8),
                3 if !out.is_empty() => {
                    let end = (at + 1 + self.below(16)).min(out.len());
                    out.drain(at.min(end)..end);
                }
                4 => {
                    // Replace a run of digits (or insert) with an interesting number.
                    let word = INTERESTING[self.below(INTERESTING.len())].as_bytes();
                    let end =
                        out[at..].iter().position(|b| !b.is_ascii_digit() && *b != b'.').map_or(out.len(), |p| at + p);
                    out.splice(at..end, word.iter().copied());
                }
                5 if !other.is_empty() => {
                    let from = self.below(other.len());
                    let len = self.below(other.len() - from) + 1;
                    out.splice(at..at, other[from..from + len].iter().copied());
                }
                6 => out.truncate(at),
                7 if !out.is_empty() => {
                    let from = self.below(out.len());
                    let len = (self.below(64) + 1).min(out.len() - from);
                    let copy = out[from..from + len].to_vec();
                    out.splice(at..at, copy);
                }
                _ => {
                    // A little-endian length prefix (safetensors' first 8 bytes).
                    if out.len() >= 8 {
                        let v = [0u64, 8, 1 << 40, u64::MAX, (out.len() as u64).saturating_sub(9)][self.below(5)];
                        out[..8].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
        }
        out
    }
}

/// Fuzzes target `name` for `iterations` mutations of `corpus`, calling
/// `before` with each input before it runs (a watchdog's hook) and `found`
/// with each input that panicked (after which the run goes on). Returns
/// the number of findings.
pub fn fuzz(
    name: &str,
    corpus: &[Vec<u8>],
    iterations: u64,
    seed: u64,
    mut before: impl FnMut(&[u8]),
    mut found: impl FnMut(&[u8], String),
) -> u64 {
    assert!(!corpus.is_empty(), "an empty corpus for {name}");
    let mut mutator = Mutator::new(seed);
    let mut findings = 0;
    for _ in 0..iterations {
        let base = &corpus[mutator.below(corpus.len())];
        let other = &corpus[mutator.below(corpus.len())];
        let input = mutator.mutate(base, other);
        before(&input);
        if let Err(panic) = std::panic::catch_unwind(|| run(name, &input)) {
            findings += 1;
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            found(&input, message);
        }
    }
    findings
}
