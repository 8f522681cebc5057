//! Lessons from the bench: each a switch or scenario on the live run, with
//! what to look for and a readout from the engine's own numbers.

use leptos::prelude::*;
use stepscope_core::experiment::{OptimizerSpec, Schedule};

use crate::model::edit::{augment_name, augmentation_lesson, set_augmentation, set_num_workers, set_prefetch_factor};
use crate::model::runner::Command;
use crate::model::timeline::{means, part};
use crate::model::words::{bytes, count, significant};
use crate::state::{first_warnings, AppState};

/// The high-learning-rate scenario: plain SGD with momentum, far too
/// fast for this network; optionally with clipping or warmup.
fn high_lr(state: AppState, clip: Option<f64>, warmup: bool) {
    state.edit(|e| {
        e.optimizer = OptimizerSpec::Sgd { lr: 3.0, momentum: 0.9, dampening: 0.0, nesterov: false, weight_decay: 0.0 };
        e.clip_grad_norm = clip;
        e.schedule = if warmup {
            Schedule::WarmupCosine { warmup_steps: 100, total_steps: 1000, min_lr: 0.0 }
        } else {
            Schedule::Constant
        };
        Ok(())
    });
    state.reset();
}

#[component]
pub fn Lessons() -> impl IntoView {
    let state = expect_context::<AppState>();
    let on_zero_grad = move |ev| {
        let on = !event_target_checked(&ev);
        state.lessons.zero_grad.set(on);
        state.command(Command::ZeroGrad(on));
    };

    // A slow data loader: augmentation, loader workers, prefetch.
    let augment_value = move || state.run.experiment.with(|e| augment_name(e).to_string());
    let workers_value = move || state.run.experiment.with(|e| e.data.num_workers().to_string());
    let prefetch_value = move || state.run.experiment.with(|e| e.data.prefetch_factor().to_string());
    let on_augment = move |ev| {
        let name = event_target_value(&ev);
        state.edit(|e| set_augmentation(e, &name));
    };
    let on_workers = move |ev| {
        let text = event_target_value(&ev);
        state.edit(|e| set_num_workers(e, &text));
    };
    let on_prefetch = move |ev| {
        let text = event_target_value(&ev);
        state.edit(|e| set_prefetch_factor(e, &text));
    };
    let start_lesson = move |_| {
        state.run.csv_name.set(None);
        state.edit(augmentation_lesson);
    };
    // The last 60 steps' wall time and phases (means), read by both readouts.
    let recent = Memo::new(move |_| {
        state.charts.timeline.with(|t| {
            let start = t.len().saturating_sub(60);
            means(&t[start..])
        })
    });
    let busy = move || {
        let (wall, parts) = recent.get();
        if wall <= 0.0 {
            return "–".to_string();
        }
        // Forward, backward, optimizer, and a GPU step timed whole.
        let compute: f64 = parts[part::FORWARD..=part::UNSPLIT].iter().sum();
        format!(
            "data {:.2} ms of {:.2} ms per step ({:.0} %); {:.0} % of the step computing",
            parts[part::DATA],
            wall,
            100.0 * parts[part::DATA] / wall,
            100.0 * compute / wall
        )
    };
    // The arithmetic of hiding it: the cores the loaders need beside the
    // training's, from the measured making time and the rest of the step
    // (what a loader has to make the next batches in).
    let cores_words = move || {
        let (wall, parts) = recent.get();
        let rest = wall - parts[part::DATA];
        let l = state.run.loaders.get();
        let micro = state.run.experiment.with(|e| e.grad_accumulation.max(1)) as f64;
        let making = if l.in_use > 0 && l.make_ms > 0.0 { l.make_ms * micro } else { parts[part::DATA] };
        if wall <= 0.0 || rest <= 0.0 || making <= 0.0 {
            return String::new();
        }
        let need = making / rest;
        let training = state.run.ranks.get().in_use.max(1);
        let cores = crate::state::reported_cores();
        let spare = cores.saturating_sub(training + 1);
        let verdict = if (spare as f64) >= need {
            format!("enough: {} or more workers can hide it", need.ceil().max(1.0))
        } else {
            "too few: loader workers and the training compete for them, and part of the data time stays".to_string()
        };
        format!(
            "Making a step's batches takes {making:.2} ms of a core; the rest of the step takes {rest:.2} ms. To hide it, \
             loaders need about {need:.1} cores of their own beside {training} training worker{} and the page's thread; \
             this browser reports {cores} cores, {spare} to spare: {verdict}.",
            if training == 1 { "" } else { "s" }
        )
    };
    let loader_words = move || {
        let l = state.run.loaders.get();
        let asked = state.run.experiment.with(|e| e.data.num_workers());
        let mut words = match (l.in_use, asked) {
            (0, 0) => "The training loop makes each batch itself (num_workers 0).".to_string(),
            (0, n) => format!("{n} loader worker{} asked, none in use.", if n == 1 { "" } else { "s" }),
            (n, _) if l.make_ms > 0.0 => format!(
                "{n} loader worker{} in use; each makes a batch in {:.2} ms.",
                if n == 1 { "" } else { "s" },
                l.make_ms
            ),
            (n, _) => format!("{n} loader worker{} starting.", if n == 1 { "" } else { "s" }),
        };
        if let Some(why) = l.reason {
            words += &format!(" {why}.");
        }
        words
    };

    // Logging frequency.
    let on_log_every = move |ev| {
        let n = event_target_value(&ev).parse::<usize>().ok().filter(|&n| n > 0);
        state.command(Command::LogEvery(n));
    };
    let logging = move || {
        let t = state.charts.timeline.get();
        let start = t.len().saturating_sub(60);
        let (wall, parts) = means(&t[start..]);
        if wall <= 0.0 {
            return "–".to_string();
        }
        let logging = parts[part::LOGGING];
        format!("logging {logging:.3} ms per step, {:.0} % of the step", 100.0 * logging / wall)
    };

    // Learning rate too high.
    let lr_readout = move || match first_warnings(&state.charts.step_history.get()) {
        None => "Run a scenario: the readout compares the gradient norm and the loss with their first steps.".into(),
        Some((norm, loss)) => {
            let at = |s: Option<u64>| s.map_or("not yet".to_string(), |s| format!("at step {}", count(s)));
            format!("gradient norm above 3× its start {}; loss above 2× its start {}", at(norm), at(loss))
        }
    };

    // Gradient accumulation.
    let k = RwSignal::new(4usize);
    let on_k = move |ev| match event_target_value(&ev).trim().parse::<usize>() {
        Ok(n) if (2..=64).contains(&n) => k.set(n),
        _ => state
            .run
            .alert
            .set(Some(format!("Micro-batches: `{}` is not a whole number in 2…64.", event_target_value(&ev)))),
    };
    let accumulation = move || {
        state.lessons.accumulation.get().map(|r| {
            // Bytes exact, then in words (the e2e reads the exact figure).
            let with_words = |b: u64| format!("{b} B ({})", bytes(b));
            format!(
                "From step {}: one batch of {} vs {} micro-batches of {}: loss {:.6} vs {:.6}; largest parameter difference {} (largest parameter {:.2}) — {}; stored activations {} vs {}.",
                count(r.step),
                count((r.k * r.micro_batch) as u64),
                r.k,
                r.micro_batch,
                r.loss.0,
                r.loss.1,
                significant(f64::from(r.max_diff), 3),
                r.max_param,
                if r.passed() { "the same update up to float32 summation order" } else { "DIFFERENT updates" },
                with_words(r.activation_bytes.0),
                with_words(r.activation_bytes.1),
            )
        })
    };

    let is_gpt = move || state.run.experiment.with(|e| e.gpt().is_some());
    view! {
        <Show when=is_gpt>
            <super::gpt_lessons::GptLessons/>
        </Show>
        <div class="lessons">
            <section>
                <h4>"A slow data loader"</h4>
                <div class="row">
                    <label class="field"><span>"Augmentation"</span>
                        <select data-testid="augmentation" prop:value=augment_value on:change=on_augment>
                            <option value="none">"none"</option>
                            <option value="shift">"random shifts"</option>
                            <option value="elastic">"shifts + elastic distortion (heavy)"</option>
                            <option value="custom" disabled=true>"as the link says"</option>
                        </select></label>
                    <label class="field"><span>"Loader workers"</span>
                        <input type="number" min="0" max="16" data-testid="num-workers" prop:value=workers_value on:change=on_workers/></label>
                    <label class="field"><span>"Prefetch factor"</span>
                        <input type="number" min="1" max="16" data-testid="prefetch-factor" prop:value=prefetch_value on:change=on_prefetch/></label>
                    <button data-testid="lesson-augmentation" on:click=start_lesson
                        title="A small MLP on MNIST (784 → 64 → 10, batch 20) with heavy augmentation made by the training loop itself">"Heavy augmentation, no workers"</button>
                </div>
                <p data-testid="gpu-busy-share">{busy}</p>
                <p data-testid="loader-status">{loader_words}</p>
                <p data-testid="loader-cores">{cores_words}</p>
                <p class="note">"The lesson's model is small (784 → 64 → 10 on MNIST, 20 images a step): it computes a step in less time than its images take to distort. Each training image is shifted and elastically distorted as it is served (the same changes on every machine: they come from the seed and the row's place in the run). Made by the training loop itself, that work is the step's data time and the engine waits for it. Loader workers make the next batches beside the step, each prefetch-factor batches ahead, and hide it while there are cores to spare; with few cores they compete with the training for them."</p>
            </section>
            <section>
                <h4>"Forgetting to zero the gradients"</h4>
                <label class="field check">
                    <input type="checkbox" data-testid="lesson-no-zero-grad" aria-label="Forget to zero the gradients"
                        prop:checked=move || !state.lessons.zero_grad.get() on:change=on_zero_grad/>
                    <span>"Forget to zero the gradients"</span>
                </label>
                <p class="note">"Without zeroing, each step's gradient is added to all earlier ones: the gradient norm grows step after step and the updates keep pushing in old directions. Compare the gradient norm with the switch on and off (reset in between)."</p>
            </section>
            <section style:display=move || if is_gpt() { "none" } else { "" }>
                <h4>"A learning rate too high"</h4>
                <div class="row">
                    <button data-testid="lesson-high-lr" on:click=move |_| high_lr(state, None, false)>"SGD, lr 3"</button>
                    <button data-testid="lesson-high-lr-clip" on:click=move |_| high_lr(state, Some(0.25), false)>"… with clipping at 0.25"</button>
                    <button data-testid="lesson-high-lr-warmup" on:click=move |_| high_lr(state, None, true)>"… with 100 warmup steps"</button>
                </div>
                <p data-testid="lesson-lr-readout">{lr_readout}</p>
                <p class="note">"Each button resets the run with these settings; press Train. The gradient norm (chart above) climbs several-fold a few steps before the loss jumps. Clipping caps each update (red marks on the chart) but does not make the rate right; warmup keeps the first steps small and postpones the trouble until the rate grows into the unstable range."</p>
            </section>
            <section>
                <h4>"Gradient accumulation"</h4>
                <div class="row">
                    <label class="field"><span>"Micro-batches k"</span>
                        <input type="number" min="2" max="64" data-testid="accumulation-k" prop:value=move || k.get().to_string() on:change=on_k/></label>
                    <button data-testid="accumulation-check" on:click=move |_| state.command(Command::CheckAccumulation(k.get_untracked()))>"Compare one step"</button>
                </div>
                <p data-testid="accumulation-result">{accumulation}</p>
                <p class="note">"k micro-batches of b rows, gradients summed (each loss scaled by 1/k), give the update of one batch of k·b rows, while storing the activations of only b rows at a time."</p>
            </section>
            <section>
                <h4>"Logging every step"</h4>
                <label class="field"><span>"Read back and redraw every"</span>
                    <select data-testid="log-every" on:change=on_log_every>
                        <option value="0">"frame (adaptive)"</option>
                        <option value="1">"1 step"</option>
                        <option value="10">"10 steps"</option>
                        <option value="50">"50 steps"</option>
                    </select></label>
                <p data-testid="logging-share">{logging}</p>
                <p class="note">"Each log reads statistics back from the GPU and redraws: logged every step, that cost lands on every step (and the GPU cannot run steps ahead); every N steps it is shared by N."</p>
            </section>
            <p class="note">"Synchronous against background checkpoints: see Checkpoints below."</p>
        </div>
    }
}
