//! Long fuzz runs (scripts/fuzz.sh): `fuzz TARGET ITERATIONS [SEED]`.
//! Keeps each input that panicked, or that ran longer than 5 s, in
//! core/tests/fuzz/crashes/TARGET/ (replayed by the test command) and
//! prints executions, findings and the rate.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stepscope_core::fuzz::{fuzz, TARGETS};

const TIMEOUT: Duration = Duration::from_secs(5);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(target), Some(iterations)) = (args.first().cloned(), args.get(1).and_then(|n| n.parse::<u64>().ok()))
    else {
        eprintln!("usage: fuzz TARGET ITERATIONS [SEED]   (targets: {})", TARGETS.join(", "));
        std::process::exit(2);
    };
    let seed = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz");
    let mut corpus = Vec::new();
    for entry in std::fs::read_dir(root.join("corpus").join(&target)).expect("corpus directory") {
        corpus.push(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let crashes = root.join("crashes").join(&target);
    std::fs::create_dir_all(&crashes).unwrap();
    let keep = {
        let (crashes, target) = (crashes.clone(), target.clone());
        move |input: &[u8], why: &str| {
            let name = format!("{why}-{:016x}", fnv(input));
            std::fs::write(crashes.join(&name), input).unwrap();
            eprintln!("{target}: {why}: kept as {}", crashes.join(name).display());
        }
    };
    // The watchdog: an execution past TIMEOUT is a hang; its input is kept
    // and the run stops.
    let current: Arc<Mutex<Vec<u8>>> = Arc::default();
    let started_at = Arc::new(AtomicU64::new(0));
    let clock = Instant::now();
    {
        let (current, started_at, keep) = (current.clone(), started_at.clone(), keep.clone());
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_millis(200));
            let started = started_at.load(Ordering::SeqCst);
            if started > 0 && clock.elapsed().as_millis() as u64 > started + TIMEOUT.as_millis() as u64 {
                keep(&current.lock().unwrap(), "timeout");
                std::process::exit(1);
            }
        });
    }
    std::panic::set_hook(Box::new(|_| {})); // findings are reported below, with their input
    let t = Instant::now();
    let before = |input: &[u8]| {
        let mut held = current.lock().unwrap();
        held.clear();
        held.extend_from_slice(input);
        started_at.store(clock.elapsed().as_millis() as u64 + 1, Ordering::SeqCst);
    };
    let findings = fuzz(&target, &corpus, iterations, seed, before, |input, message| {
        keep(input, "panic");
        eprintln!("  {message}");
    });
    let done = iterations;
    started_at.store(0, Ordering::SeqCst);
    let secs = t.elapsed().as_secs_f64();
    println!("{target}: {done} executions in {secs:.1} s ({:.0}/s), {findings} findings", done as f64 / secs);
    std::process::exit(i32::from(findings > 0));
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}
