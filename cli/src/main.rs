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
mod train;

use std::process::ExitCode;

const USAGE: &str = "usage:
  stepscope train --config FILE [--init FILE] [--data FILE] [--steps N] [--backend cpu|gpu]
                  [--out FILE] [--metrics FILE] [--checkpoint-every N] [--memory-budget MIB]
  stepscope inspect FILE
  stepscope verify CHECKPOINT [--data FILE] [--steps N]
  stepscope export-pytorch CHECKPOINT [--out FILE] [--data-out FILE]
  stepscope predict CHECKPOINT --inputs FILE [--out FILE]
  stepscope bench [--out FILE] [--only matmul|steps|checkpointing]";

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
    let result = match argv.first().map(String::as_str) {
        Some("train") => args::TrainArgs::parse(&argv[1..]).and_then(|a| train::run(&a)),
        Some("bench") => bench::run(&argv[1..]),
        Some("export-pytorch") => export::export_pytorch(&argv[1..]),
        Some("predict") => export::predict(&argv[1..]),
        Some("verify") => inspect::verify(&argv[1..]),
        Some("inspect") => match &argv[1..] {
            [file] => inspect::run(file),
            _ => Err(Failure::usage("inspect takes exactly one FILE")),
        },
        Some("-h" | "--help" | "help") => {
            say!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(Failure::usage(format!("unknown command `{other}` (try `stepscope --help`)"))),
        None => Err(Failure::usage("no command given (try `stepscope --help`)")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("stepscope: error: {}", failure.message.replace('\n', " "));
            ExitCode::from(failure.status)
        }
    }
}
