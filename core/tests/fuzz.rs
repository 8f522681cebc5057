//! The fuzz harness in the test command (`stepscope_core::fuzz`): every
//! corpus input and every kept crasher (core/tests/fuzz/) replays without a
//! panic, and a short seeded fuzz of each target finds nothing. Long runs:
//! scripts/fuzz.sh.

use std::path::{Path, PathBuf};

use stepscope_core::fuzz::{fuzz, run, TARGETS};

fn dir(parts: &[&str]) -> PathBuf {
    parts.iter().fold(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz"), |p, part| p.join(part))
}

fn files(path: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(path).map_or_else(|_| Vec::new(), |d| d.map(|e| e.unwrap().path()).collect());
    paths.sort();
    paths.iter().filter(|p| p.is_file() && !p.ends_with(".gitkeep")).map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn corpus_and_crashers_replay_without_a_panic() {
    for target in TARGETS {
        let corpus = files(&dir(&["corpus", target]));
        assert!(!corpus.is_empty(), "{target}: empty corpus");
        for input in corpus.iter().chain(&files(&dir(&["crashes", target]))) {
            run(target, input);
        }
    }
}

#[test]
fn a_short_fuzz_finds_nothing() {
    for target in TARGETS {
        let corpus = files(&dir(&["corpus", target]));
        let findings = fuzz(
            target,
            &corpus,
            3000,
            1,
            |_| {},
            |input, message| {
                eprintln!("{target}: panic `{message}` on {:?}", String::from_utf8_lossy(input));
            },
        );
        assert_eq!(findings, 0, "{target}: inputs that panicked (above)");
    }
}
