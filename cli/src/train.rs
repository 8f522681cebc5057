//! `stepscope train`: everything is read and checked, and the output paths
//! tried, before training starts; checkpoints are renamed into place only
//! when complete; the metrics log grows as the run goes. Ctrl-C stops at
//! the next step boundary, writes the checkpoint and exits with 130.

use std::sync::atomic::Ordering;

use web_time::Instant;

use stepscope_core::checkpoint::save_checkpoint;
use stepscope_core::gpu::GpuContext;
use stepscope_core::limits::Limits;
use stepscope_core::trainer::{block_on, Backend};
use stepscope_core::{Error, StepMetrics, Trainer};

use crate::args::TrainArgs;
use crate::files::{self, LogFile};
use crate::report::class_lines;
use crate::signal::{stopped, STOP};
use crate::tensorboard::TensorBoard;
use crate::{say, Failure};

mod anatomy;
mod inputs;
mod loaders;
mod progress;
mod ranks;
mod trace;

pub(crate) use inputs::load_data;
use inputs::{initial_state, steps_to_run};
pub(crate) use progress::Heartbeat;
use progress::{evaluate, test_rows, train_rows, Rows, PROGRESS_EVERY};

/// Steps between a transformer run's validation losses (nanoGPT's
/// `eval_interval` for Shakespeare): a pass over the held-out windows
/// costs about as much as a few dozen steps.
const GPT_EVAL_EVERY: u64 = 250;

/// One JSON line of a step's metrics; a transformer run's add
/// `tokens_per_second` (the step's tokens over its wall time) and, at the
/// evaluation cadence, `val_loss`.
fn metrics_line(m: &StepMetrics, tokens_per_second: Option<f64>, val_loss: Option<f32>) -> String {
    let mut value = serde_json::to_value(m).expect("metrics always serialise");
    if let Some(fields) = value.as_object_mut() {
        if let Some(t) = tokens_per_second {
            fields.insert("tokens_per_second".into(), t.into());
        }
        if let Some(v) = val_loss.filter(|_| tokens_per_second.is_some()) {
            fields.insert("val_loss".into(), v.into());
        }
    }
    value.to_string()
}

/// Every output checked before anything is read or written: none names an
/// input or another output (`--out` over `--init` resumes in place, and
/// the TensorBoard folder is compared as itself), and each can be written.
/// A refused run creates and changes nothing.
fn check_outputs(args: &TrainArgs) -> Result<(), Failure> {
    let outputs: Vec<(&str, &str)> = [
        ("--out", &args.out),
        ("--metrics", &args.metrics),
        ("--trace", &args.trace),
        ("--tensorboard", &args.tensorboard),
    ]
    .into_iter()
    .filter_map(|(f, p)| Some((f, p.as_deref()?)))
    .collect();
    let inputs: Vec<(&str, &str)> = [("--config", &args.config), ("--data", &args.data), ("--init", &args.init)]
        .into_iter()
        .filter_map(|(f, p)| Some((f, p.as_deref()?)))
        .collect();
    // A run on ranks writes a trace per rank beside `--trace`'s.
    let rank_traces: Vec<String> = match &args.trace {
        Some(path) => (1..stepscope_core::experiment::MAX_SHARDS as u32).map(|r| trace::rank_path(path, r)).collect(),
        None => Vec::new(),
    };
    let mut all = outputs.clone();
    all.extend(rank_traces.iter().map(|p| ("--trace (a rank's)", p.as_str())));
    files::distinct(&all, &inputs, &[("--out", "--init")])?;
    for (flag, path) in &outputs {
        match *flag {
            "--tensorboard" => files::check_directory(path, flag)?,
            _ => files::check_writable(path, flag)?,
        }
    }
    Ok(())
}

pub fn run(args: &TrainArgs) -> Result<(), Failure> {
    // Installed first, so that reading a large file stops on Ctrl-C too. A
    // second handler cannot be installed (tests run several trainings in one
    // process); the first one serves them all.
    let _ = ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst));
    STOP.store(false, Ordering::SeqCst);
    check_outputs(args)?;
    let state = initial_state(args)?;
    let data = load_data(args, &state.experiment)?;
    state.check(&data)?;
    // Again with the data's own rows (a CSV's, or a checkpoint's
    // experiment) and the file's bytes held while they were read.
    Limits::native(args.memory_budget_mib).check_data(&state.experiment, &data)?;
    let steps = steps_to_run(args, &state);
    let gpu = match args.backend {
        Backend::Cpu => None,
        Backend::Gpu => Some(std::sync::Arc::new(GpuContext::new_blocking()?)),
    };
    let backend_name = match &gpu {
        Some(ctx) => format!(
            "gpu: {}{}",
            ctx.describe(),
            if ctx.timestamps { "" } else { " (no timestamp queries: coarse phase timing)" }
        ),
        None => "cpu".to_string(),
    };
    let on_cpu = gpu.is_none();
    let device = gpu.as_ref().map(|ctx| ctx.describe());
    let mut engine = Trainer::new(state, data, gpu)?;
    let threads = args.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    engine.set_threads(threads);
    let mut metrics_file = args.metrics.as_deref().map(LogFile::create).transpose()?;
    let mut tracer = args.trace.as_deref().map(|path| trace::TraceRecorder::new(path, Instant::now()));
    let mut tensorboard =
        args.tensorboard.as_deref().map(|dir| TensorBoard::create(dir, args.histogram_every)).transpose()?;

    let e = engine.experiment().clone();
    let first_step = engine.step_count();
    let model = match e.gpt() {
        Some(g) => format!(
            "gpt ({} blocks × {} heads × embed {}, context {}, vocabulary {})",
            g.blocks, g.heads, g.embed, g.context, g.vocab_size
        ),
        None => e.architecture_words(),
    };
    // Tokens a step trains on (the transformer's throughput unit).
    let step_tokens = e.gpt().map(|g| (e.batch_size * e.grad_accumulation * g.context) as f64);
    let test_name = if e.gpt().is_some() { "val" } else { "test" };
    say!(
        "training {} on {} ({} train / {} {test_name} rows), {} parameters, {} steps from step {}, backend {}",
        model,
        e.data.source.name(),
        engine.data().train.rows(),
        engine.data().test.rows(),
        engine.layout().parameter_count,
        steps,
        first_step,
        backend_name
    );
    // Loader threads make the batches beside the loop (`data.num_workers`).
    let mut loaders = match (e.data.num_workers(), on_cpu, engine.data_position()) {
        (0, ..) => None,
        (n, true, Some(position)) => {
            say!(
                "{n} loader thread{} (prefetch factor {}), augmentation: {}",
                if n == 1 { "" } else { "s" },
                e.data.prefetch_factor(),
                e.data.augment.as_ref().map_or("none".into(), |a| a.describe())
            );
            Some(loaders::ThreadLoaders::start(&e, engine.data().train.clone(), &position))
        }
        (n, ..) => {
            say!("data.num_workers {n} is not used: the GPU engine gathers its rows on the device");
            None
        }
    };
    if e.shards > 1 && on_cpu {
        say!(
            "{} shards of {} rows each per micro-batch, on {} rank{} (threads; the same bits on any number)",
            e.shards,
            e.batch_size / e.shards,
            engine.ranks_used(),
            if engine.ranks_used() == 1 { "" } else { "s" }
        );
    }
    if let Some(tb) = &tensorboard {
        say!("TensorBoard events: {}", tb.path);
    }
    let report_every = (steps / 10).max(1);
    let eval_every = args.eval_every.unwrap_or(if e.gpt().is_some() { GPT_EVAL_EVERY } else { report_every });
    let started = Instant::now();
    let mut beat = Heartbeat::new();
    let rate = |done: u64| {
        let secs = started.elapsed().as_secs_f64();
        match step_tokens {
            _ if secs <= 0.0 => String::new(),
            Some(tokens) => format!("{:.0} tokens/s", done as f64 * tokens / secs),
            None => format!("{:.3} steps/s", done as f64 / secs),
        }
    };
    let mut last: Option<StepMetrics> = None;
    let mut rank_summary = ranks::RankSummary::default();
    let mut layer_anatomy = anatomy::LayerAnatomy::default();
    let mut interrupted = false;
    'steps: for i in 0..steps {
        if stopped() {
            interrupted = true;
            break;
        }
        // The CPU takes a step in parts (a micro-batch's forward or
        // backward, or a layer's), so that Ctrl-C and the progress line
        // are looked at inside a long step; the GPU's steps are whole.
        let step_wall = Instant::now();
        let loader_wait_ms = match loaders.as_mut() {
            Some(l) => l.before_step(&mut engine, e.grad_accumulation),
            None => 0.0,
        };
        let step = if on_cpu {
            let (mut parts, step_started) = (0u64, Instant::now());
            loop {
                let (part_start, before) = (Instant::now(), engine.phases_so_far());
                match engine.step_part() {
                    Ok(Some(m)) => {
                        if let Some(t) = tracer.as_mut() {
                            t.part(part_start, Instant::now(), &before, &m.phases);
                        }
                        break Ok(vec![m]);
                    }
                    Ok(None) => {
                        parts += 1;
                        if let Some(t) = tracer.as_mut() {
                            t.part(part_start, Instant::now(), &before, &engine.phases_so_far());
                        }
                    }
                    Err(err) => break Err(err),
                }
                if stopped() {
                    engine.abandon_partial_step();
                    interrupted = true;
                    break 'steps;
                }
                // A line from inside the step only for a step that runs
                // long; a short one's line comes when it ends.
                if beat.is_due() && step_started.elapsed() >= PROGRESS_EVERY / 2 {
                    beat.reset();
                    say!(
                        "step {} of {} under way: {parts} parts done, {:.1} s in this run, {}",
                        engine.step_count() + 1,
                        first_step + steps,
                        started.elapsed().as_secs_f64(),
                        rate(i)
                    );
                }
            }
        } else {
            let step = engine.submit(1).and_then(|()| block_on(engine.collect()));
            if let (Some(t), Ok(Some(m))) = (tracer.as_mut(), step.as_ref().map(|m| m.last())) {
                t.gpu_step(step_wall, Instant::now(), m, engine.gpu_passes());
            }
            step
        };
        let step_secs = step_wall.elapsed().as_secs_f64();
        let mut metrics = match step.map(|mut m| m.pop()) {
            Ok(Some(m)) => m,
            Ok(None) => return Err(Error::Gpu("a step produced no metrics".into()).into()),
            Err(err) => {
                // The metrics up to the failure are real data: keep them.
                if let Some(file) = metrics_file.take() {
                    file.finish()?;
                }
                if let Some(tb) = tensorboard.take() {
                    tb.finish()?;
                }
                if let Some(t) = tracer.take() {
                    t.finish(device)?;
                }
                return Err(err.into());
            }
        };
        metrics.phases.data_ms += loader_wait_ms;
        if let (Some(every), Some(out)) = (args.checkpoint_every, &args.out) {
            if (metrics.step + 1) % every == 0 {
                let t = Instant::now();
                files::write_atomic(out, &save_checkpoint(&block_on(engine.read_state())?)?)?;
                metrics.phases.checkpoint_ms = t.elapsed().as_secs_f64() * 1e3;
                if let Some(tr) = tracer.as_mut() {
                    tr.span("checkpoint", t, Instant::now());
                }
            }
        }
        // Logging: progress report and the metrics record. Its own time is
        // measured up to the buffered write of the record.
        let t = Instant::now();
        let mut val_loss = None;
        let evaluating = (metrics.step + 1) % eval_every == 0 || i + 1 == steps;
        if (i + 1) % report_every == 0 || evaluating {
            let held_out = if evaluating { Some(test_rows) } else { None };
            let test = match held_out.map(|t| evaluate(&mut engine, t, test_name, &mut beat)).transpose()?.flatten() {
                Some(ev) => {
                    if let Some(tb) = tensorboard.as_mut() {
                        tb.evaluation(metrics.step, test_name, ev.loss, ev.accuracy)?;
                    }
                    val_loss = Some(ev.loss);
                    let accuracy =
                        ev.accuracy.map(|a| format!("  {test_name}_accuracy {:.1}%", a * 100.0)).unwrap_or_default();
                    format!("  {test_name}_loss {:.5}{accuracy}", ev.loss)
                }
                None if stopped() => {
                    interrupted = true;
                    String::new()
                }
                None => String::new(),
            };
            let z = metrics.z_loss.filter(|_| e.z_loss > 0.0).map(|z| format!("  z_loss {z:.4}")).unwrap_or_default();
            say!(
                "step {:>6}  loss {:.5}{z}  grad_norm {:.4}  lr {:.3e}  {}{test}",
                metrics.step,
                metrics.loss,
                metrics.grad_norm,
                metrics.lr,
                rate(i + 1)
            );
            beat.reset();
        } else if beat.due() {
            say!(
                "step {:>6} of {}  loss {:.5}  grad_norm {:.4}  lr {:.3e}  {}",
                metrics.step,
                first_step + steps,
                metrics.loss,
                metrics.grad_norm,
                metrics.lr,
                rate(i + 1)
            );
        }
        if let Some(tb) = tensorboard.as_mut() {
            if tb.histograms_due(metrics.step, first_step + steps - 1) {
                let layout = engine.layout().clone();
                block_on(
                    engine.with_tensors(|[params, grads, _]| tb.histograms(metrics.step, &layout, params, grads)),
                )??;
            }
        }
        if metrics_file.is_some() || tensorboard.is_some() {
            metrics.phases.logging_ms = t.elapsed().as_secs_f64() * 1e3;
        }
        let tokens_per_second = step_tokens.filter(|_| step_secs > 0.0).map(|t| t / step_secs);
        if let Some(file) = metrics_file.as_mut() {
            let line = metrics_line(&metrics, tokens_per_second, val_loss);
            file.write_line(&line)?;
        }
        if let Some(tb) = tensorboard.as_mut() {
            let secs = started.elapsed().as_secs_f64();
            tb.step(&metrics, if secs > 0.0 { (i + 1) as f64 / secs } else { 0.0 }, tokens_per_second)?;
        }
        if let Some(tr) = tracer.as_mut() {
            let end = Instant::now();
            tr.span("logging", t, end);
            tr.end_step(&metrics, end);
        }
        rank_summary.add(&metrics);
        layer_anatomy.add(&metrics, engine.layer_times().as_ref());
        last = Some(metrics);
        if interrupted {
            break;
        }
    }
    if let Some(out) = &args.out {
        files::write_atomic(out, &save_checkpoint(&block_on(engine.read_state())?)?)?;
        say!("checkpoint written to {out} (step {})", engine.step_count());
    }
    if let Some(file) = metrics_file {
        file.finish()?;
    }
    if let Some(tb) = tensorboard.take() {
        tb.finish()?;
    }
    if let Some(t) = tracer.take() {
        t.finish(device)?;
    }
    if interrupted {
        let saved = match &args.out {
            Some(out) => format!("the checkpoint of step {} was written to {out}", engine.step_count()),
            None => "no checkpoint written (no --out)".to_string(),
        };
        return Err(Failure { message: format!("interrupted at step {}; {saved}", engine.step_count()), status: 130 });
    }
    if let Some(m) = &last {
        say!(
            "{} steps in {:.2} s ({}); last loss {:.5}",
            engine.step_count() - first_step,
            started.elapsed().as_secs_f64(),
            rate(engine.step_count() - first_step),
            m.loss
        );
    }
    if let Some(line) = rank_summary.line() {
        say!("{line}");
    }
    for line in anatomy::lines(layer_anatomy.table(&e, engine.activation_checkpointing())) {
        say!("{line}");
    }
    if e.gpt().is_some() {
        // The last step's line has the validation loss; a pass over every
        // training window would cost more than many steps.
        return Ok(());
    }
    for (name, rows) in [("train", train_rows as Rows), ("test", test_rows)] {
        match evaluate(&mut engine, rows, name, &mut beat)? {
            Some(ev) => {
                let accuracy = ev.accuracy.map(|a| format!("  accuracy {:.1}%", a * 100.0)).unwrap_or_default();
                say!("{name}: loss {:.5}{accuracy}", ev.loss);
            }
            None if stopped() => {
                return Err(Failure {
                    message: format!("interrupted while evaluating the {name} rows; the run's outputs were written"),
                    status: 130,
                })
            }
            None => {}
        }
    }
    // Per class on the test rows, or on the training rows where there are none.
    let params = block_on(engine.read_state())?.params;
    let data = engine.data();
    let (name, table) = if data.test.rows() > 0 { ("test", &data.test) } else { ("train", &data.train) };
    for line in class_lines(&e, engine.layout(), &params, name, table) {
        say!("{line}");
    }
    Ok(())
}
