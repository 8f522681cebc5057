//! `stepscope`: runs Stepscope experiments natively.
//!
//! Every failure is one line on stderr, `stepscope: error: …`, with exit
//! status 2 for bad arguments or files, 1 for a run that failed while
//! training (a NaN/Inf) and 130 for a run stopped by Ctrl-C. No partial
//! output file is left behind.

mod args;
mod bench;
mod export;
mod files;
mod inspect;
mod open;
mod report;
mod sample;
mod signal;
mod tensorboard;
mod train;

use std::process::ExitCode;

use args::Command;
use stepscope_core::engine::Sampling;

/// Prints a line to stdout; a closed pipe (`stepscope inspect F | head`)
/// is not an error worth a panic.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// A failure and its exit status.
pub struct Failure {
    pub message: String,
    pub status: u8,
}

impl Failure {
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), status: 2 }
    }
}

impl From<stepscope_core::Error> for Failure {
    fn from(err: stepscope_core::Error) -> Failure {
        let status = if matches!(err, stepscope_core::Error::NonFinite(_)) { 1 } else { 2 };
        Failure { message: err.to_string(), status }
    }
}

fn main() -> ExitCode {
    // Arguments that are not UTF-8 are refused by name, not with a panic.
    let argv: Vec<String> = match std::env::args_os().skip(1).map(|a| a.into_string()).collect() {
        Ok(argv) => argv,
        Err(bad) => {
            eprintln!("stepscope: error: argument {bad:?} is not valid UTF-8");
            return ExitCode::from(2);
        }
    };
    let result = args::parse(argv).and_then(|cli| match cli.command {
        Command::Train(a) => train::run(&a),
        Command::Bench { out, only } => bench::run(out, only),
        Command::ExportPytorch { checkpoint, out, data_out, data } => {
            export::export_pytorch(&checkpoint, out, data_out, data)
        }
        Command::Predict { checkpoint, inputs, out } => export::predict(&checkpoint, &inputs, out),
        Command::Inspect { file } => inspect::run(&file),
        Command::Open { files } => open::run(&files),
        Command::Sample { checkpoint, prompt, tokens, temperature, top_k, seed, backend } => {
            sample::run(&checkpoint, &prompt, Sampling { tokens, temperature, top_k, seed }, backend)
        }
        Command::Verify { checkpoint, data, steps } => inspect::verify(&checkpoint, data, steps),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Help and the version were printed already.
        Err(failure) if failure.message.is_empty() => ExitCode::from(failure.status),
        Err(failure) => {
            eprintln!("stepscope: error: {}", failure.message.replace('\n', " "));
            ExitCode::from(failure.status)
        }
    }
}
