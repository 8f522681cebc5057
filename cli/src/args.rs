//! The command line, parsed with clap: `--help` on every subcommand,
//! `--version`, `--flag value` and `--flag=value`. Parse errors become the
//! CLI's one-line message with exit status 2 (`parse`).

use clap::{Args, Parser, Subcommand, ValueEnum};

use stepscope_core::trainer::Backend;

use crate::Failure;

/// Default number of steps when neither `--steps` nor a schedule's
/// `total_steps` says.
pub const DEFAULT_STEPS: u64 = 100;
/// Default memory budget of a run, in MiB: twice the page's, and below
/// the largest model the experiment's fields allow (about 3.8 GB with Adam),
/// so that one is refused unless asked for.
pub const DEFAULT_MEMORY_BUDGET_MIB: u64 = 2048;

#[derive(Debug, Parser)]
#[command(
    name = "stepscope",
    version,
    about = "Runs Stepscope experiments natively: trains, checks and exports what the page does."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Train an experiment (or resume a checkpoint) on the CPU or the GPU.
    Train(TrainArgs),
    /// Print a checkpoint's experiment, step and tensors (verifying it).
    Inspect {
        /// A Stepscope checkpoint or a plain safetensors weights file.
        file: String,
    },
    /// The page's "verify restore" for a file: restore into a fresh engine,
    /// compare bit for bit, and take the next steps from both.
    Verify {
        checkpoint: String,
        /// The training rows, for an experiment with "source": "csv".
        #[arg(long)]
        data: Option<String>,
        /// Next steps to compare.
        #[arg(long, default_value_t = 3, value_parser = positive::<usize>)]
        steps: usize,
    },
    /// Write a PyTorch script that continues the checkpoint's run
    /// (docs/export.md).
    ExportPytorch {
        checkpoint: String,
        /// The script (default: standard output).
        #[arg(long)]
        out: Option<String>,
        /// Also write the run's training rows as CSV (what the script reads).
        #[arg(long)]
        data_out: Option<String>,
        /// The CSV a "source": "csv" run trained on, for --data-out: its
        /// training rows are split from it as the run split them.
        #[arg(long, requires = "data_out")]
        data: Option<String>,
    },
    /// The network's outputs for the x… columns of a CSV, as CSV.
    Predict {
        checkpoint: String,
        #[arg(long)]
        inputs: String,
        /// Where to write them (default: standard output).
        #[arg(long)]
        out: Option<String>,
    },
    /// Text from a gpt checkpoint: the model continues the prompt a token
    /// at a time. The same seed gives the same text every time.
    Sample {
        checkpoint: String,
        /// The text to continue (default: a newline, as nanoGPT's sample.py).
        #[arg(long, default_value = "\n")]
        prompt: String,
        /// New tokens (characters) to write.
        #[arg(long, default_value_t = 500, value_parser = positive::<usize>)]
        tokens: usize,
        /// Logits are divided by it: below 1 sharper, above 1 flatter.
        #[arg(long, default_value_t = 0.8)]
        temperature: f32,
        /// Draw only from the K most likely tokens.
        #[arg(long)]
        top_k: Option<usize>,
        #[arg(long, default_value_t = 1337)]
        seed: u64,
        /// cpu: the CPU engine's forward; gpu: the GPU engine's (the same
        /// text where its logits agree within the tolerance, and said so).
        #[arg(long, default_value = "cpu", value_parser = backend())]
        backend: Backend,
    },
    /// A run from outside, read-only, as its step anatomy: metrics logs
    /// (one per rank), Stepscope traces or PyTorch profiler traces.
    Open {
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// GPU benchmark: matmul against the FMA probe, steps/s, checkpointing, the step's anatomy, conv nets.
    Bench {
        /// Also write the report here (Markdown).
        #[arg(long)]
        out: Option<String>,
        #[arg(long)]
        only: Option<Section>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Section {
    Matmul,
    Steps,
    Checkpointing,
    Anatomy,
    /// The transformer on the CPU engine (no GPU needed).
    Gpt,
    /// The transformer on the GPU engine beside the CPU engine.
    GptGpu,
    /// Ranks (threads) on the CPU engine (no GPU needed).
    Ranks,
    /// Conv nets on the GPU engine beside the CPU engine.
    Conv,
}

#[derive(Debug, Default, Args)]
pub struct TrainArgs {
    /// The experiment (docs/experiment.md).
    #[arg(long, required_unless_present = "init")]
    pub config: Option<String>,
    /// A checkpoint to resume, or a plain weights file to start --config from.
    #[arg(long)]
    pub init: Option<String>,
    /// The CSV for an experiment with "source": "csv".
    #[arg(long)]
    pub data: Option<String>,
    /// Steps to run now (default: what the schedule has left, else 100).
    #[arg(long, value_parser = positive::<u64>)]
    pub steps: Option<u64>,
    /// cpu: the CPU reference engine; gpu: the GPU engine (wgpu: Vulkan,
    /// Metal or DX12).
    #[arg(long, default_value = "cpu", value_parser = backend())]
    pub backend: Backend,
    /// The final checkpoint.
    #[arg(long)]
    pub out: Option<String>,
    /// One JSON line of metrics per step, written as the run goes.
    #[arg(long)]
    pub metrics: Option<String>,
    /// Also write a TensorBoard event file into DIR as the run goes
    /// (scalars every step, histograms every --histogram-every steps).
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<String>,
    /// Steps between histograms of each tensor's weights and gradients
    /// in the --tensorboard file (and at the last step).
    #[arg(long, value_parser = positive::<u64>, requires = "tensorboard", default_value_t = 100)]
    pub histogram_every: u64,
    /// Also write a trace of the steps (Trace Event JSON as PyTorch's
    /// profiler writes it, `.json` or `.json.gz`), for Perfetto and HTA.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<String>,
    /// Steps between evaluations on the held-out rows (and at the last
    /// step). Default: a tenth of the steps for an MLP; for a gpt model
    /// every 250 steps, as nanoGPT's Shakespeare configuration.
    #[arg(long, value_parser = positive::<u64>)]
    pub eval_every: Option<u64>,
    /// Also write --out every N steps.
    #[arg(long, value_parser = positive::<u64>, requires = "out")]
    pub checkpoint_every: Option<u64>,
    /// MiB the run may hold at its peak.
    #[arg(long = "memory-budget", value_name = "MIB", default_value_t = DEFAULT_MEMORY_BUDGET_MIB, value_parser = positive::<u64>)]
    pub memory_budget_mib: u64,
    /// Threads (ranks) for an experiment with "shards" above 1, on the CPU
    /// engine: each takes its share of a step's shards. Speed only: the
    /// run's bits are the same on any number. Default: the machine's
    /// available parallelism (at most the shards are used).
    #[arg(long, value_parser = positive::<usize>)]
    pub threads: Option<usize>,
}

fn backend() -> impl clap::builder::TypedValueParser<Value = Backend> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["cpu", "gpu"]).map(|name| {
        if name == "gpu" {
            Backend::Gpu
        } else {
            Backend::Cpu
        }
    })
}

fn positive<T: std::str::FromStr + PartialOrd + Default>(value: &str) -> Result<T, String> {
    match value.parse::<T>() {
        Ok(n) if n > T::default() => Ok(n),
        _ => Err("needs a whole number > 0".into()),
    }
}

/// The command line, or what to print and the exit status: help and the
/// version go to standard output with status 0; the usage asked for by
/// no subcommand goes to standard error with status 2; an error is one line (the
/// parts of clap's message before its usage and hints) with status 2.
pub fn parse(argv: Vec<String>) -> Result<Cli, Failure> {
    Cli::try_parse_from(std::iter::once("stepscope".to_string()).chain(argv)).map_err(|err| {
        use clap::error::ErrorKind;
        match err.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                crate::say!("{}", err.render().to_string().trim_end());
                Failure { message: String::new(), status: 0 }
            }
            // No subcommand: the usage is the error, on standard error.
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                eprintln!("{}", err.render().to_string().trim_end());
                Failure { message: String::new(), status: 2 }
            }
            _ => {
                let text = err.render().to_string();
                let message: Vec<&str> = text
                    .split("\n\n")
                    .next()
                    .unwrap_or_default()
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect();
                let message = message.join(" ");
                Failure::usage(format!("{} (try `stepscope --help`)", message.trim_start_matches("error: ")))
            }
        }
    })
}
