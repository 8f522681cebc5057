//! The browser benchmark's Stepscope side. With `?bench` in the URL the
//! page mounts nothing and the benchmark script (`tests/e2e/bench/`) calls
//! these exports (trunk's `window.wasmBindings`), interleaved with
//! TensorFlow.js in the same browser: the workloads of
//! `stepscope_core::workloads`, on the CPU engine compiled to WebAssembly
//! and on the GPU engine at K = 1, at the largest K, and fused; a
//! transformer on both engines; conv nets on both engines beside TF.js
//! training the same nets; and the adapter's FMA peak and forward-matmul
//! throughput at the workloads' shapes.

use std::cell::RefCell;
use std::sync::Arc;

use js_sys::{Array, Float32Array, Object, Reflect};
use stepscope_core::gpu::matmul::{LayerMatmuls, MatmulVariant};
use stepscope_core::gpu::{probe, FusedWidth, GpuContext};
use stepscope_core::workloads::{conv_workload, workload};
use stepscope_core::Trainer;
use wasm_bindgen::prelude::*;
use web_time::Instant;

thread_local! {
    static GPU: RefCell<Option<Arc<GpuContext>>> = const { RefCell::new(None) };
}

/// Whether the URL asks for the benchmark instead of the page.
pub fn bench_mode() -> bool {
    web_sys::window().and_then(|w| w.location().search().ok()).is_some_and(|s| s.contains("bench"))
}

fn js_err(e: impl std::fmt::Display) -> JsValue {
    JsValue::from_str(&e.to_string())
}

fn set(object: &Object, key: &str, value: impl Into<JsValue>) {
    let _ = Reflect::set(object, &key.into(), &value.into());
}

// The engine takes an Arc; on the web the context is single-threaded.
#[allow(clippy::arc_with_non_send_sync)]
async fn context() -> Result<Arc<GpuContext>, JsValue> {
    if let Some(ctx) = GPU.with(|g| g.borrow().clone()) {
        return Ok(ctx);
    }
    let ctx = Arc::new(GpuContext::new().await.map_err(js_err)?);
    GPU.with(|g| *g.borrow_mut() = Some(ctx.clone()));
    Ok(ctx)
}

/// A fresh run of `e` on `engine`: the CPU engine for "cpu", else the GPU
/// engine (the adapter named in `out`).
async fn trainer_on(
    engine: &str,
    e: &stepscope_core::Experiment,
    data: stepscope_core::data::Dataset,
    out: &Object,
) -> Result<Trainer, JsValue> {
    let gpu = if engine == "cpu" {
        None
    } else {
        let ctx = context().await?;
        set(out, "adapter", ctx.describe());
        Some(ctx)
    };
    Trainer::fresh(e, data, gpu).map_err(js_err)
}

/// The workload's shape and training rows, so that TensorFlow.js trains
/// on the very same data: {widths, batch, activation, loss, rows, inputs,
/// targets}.
#[wasm_bindgen]
pub fn stepscope_bench_workload(name: &str) -> Result<JsValue, JsValue> {
    let w = workload(name).ok_or_else(|| js_err(format!("no workload {name}")))?;
    let (e, data) = w.build();
    let out = Object::new();
    let widths: Array = w.widths.iter().map(|&u| JsValue::from(u as u32)).collect();
    set(&out, "widths", widths);
    set(&out, "batch", w.batch as u32);
    set(&out, "activation", w.activation);
    let loss = serde_json::to_value(e.loss).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    set(&out, "loss", loss);
    set(&out, "rows", data.train.rows() as u32);
    set(&out, "inputs", Float32Array::from(data.train.inputs.as_slice()));
    set(&out, "targets", Float32Array::from(data.train.targets.as_slice()));
    Ok(out.into())
}

/// Trains workload `name` on `engine` ("cpu", "gpu-k1", "gpu-kmax",
/// "gpu-fused" (the fused kernel with 64 invocations), "gpu-fused-narrow"
/// (with 4), or "gpu-tiled": K = max on the tiled matmuls alone, the
/// kernels before per-layer variants) for about `seconds` after a warm-up
/// step, and returns {steps_per_second, steps, k, dispatches_per_step,
/// matmuls, adapter}, or null where the fused step does not apply. The
/// other GPU sides run the matmul variants measured faster on this
/// adapter (`gpu::matmul`), as the page does.
#[wasm_bindgen]
pub async fn stepscope_bench(name: String, engine: String, seconds: f64) -> Result<JsValue, JsValue> {
    let w = workload(&name).ok_or_else(|| js_err(format!("no workload {name}")))?;
    let (e, data) = w.build();
    let out = Object::new();
    let mut trainer = trainer_on(&engine, &e, data, &out).await?;
    if let Some(g) = trainer.gpu_engine() {
        g.phase_timing = false;
        g.use_fused = engine.starts_with("gpu-fused");
        let width = if engine == "gpu-fused-narrow" { FusedWidth::Narrow } else { FusedWidth::Wide };
        if g.use_fused && (!g.runs_fused() || !g.set_fused_width(width)) {
            return Ok(JsValue::NULL);
        }
        if engine == "gpu-tiled" {
            // Explicitly: a new engine starts on the variants measured
            // earlier for its shape.
            g.set_matmuls(vec![LayerMatmuls::all(MatmulVariant::Tiled); g.matmuls().len()]).map_err(js_err)?;
        } else {
            g.choose_matmuls().await.map_err(js_err)?;
        }
        set(&out, "dispatches_per_step", g.dispatches_per_step() as u32);
        set(&out, "matmuls", matmul_summary(g.matmuls()));
    }
    let (steps, k, elapsed_s) = timed(&mut trainer, &engine, seconds).await?;
    set(&out, "steps_per_second", steps as f64 / elapsed_s);
    set(&out, "steps", steps as u32);
    set(&out, "k", k as u32);
    Ok(out.into())
}

/// Trains for about `seconds` after a warm-up step: (steps, steps per
/// submit, seconds). GPU: the largest K, but a submit of at most about 2 s
/// (one step of W3 takes seconds on a software adapter); "gpu-k1" and the
/// CPU a step per submit.
async fn timed(trainer: &mut Trainer, engine: &str, seconds: f64) -> Result<(usize, usize, f64), JsValue> {
    trainer.run(1, 1).await.map_err(js_err)?;
    let k = if engine == "gpu-k1" || engine == "cpu" {
        1
    } else {
        let started = Instant::now();
        trainer.run(1, 1).await.map_err(js_err)?;
        let one_ms = started.elapsed().as_secs_f64() * 1e3;
        ((2000.0 / one_ms) as usize).clamp(1, trainer.max_steps_per_submit())
    };
    let started = Instant::now();
    let mut steps = 0;
    while steps == 0 || started.elapsed().as_secs_f64() < seconds {
        trainer.run(k, k).await.map_err(js_err)?;
        steps += k;
    }
    Ok((steps, k, started.elapsed().as_secs_f64()))
}

/// A transformer on Tiny Shakespeare: `gpt`, the page's default (3 blocks
/// × 4 heads × 96, T 64, B 16), or `gpt-small` (2 × 2 × 32, T 32, B 8: the
/// smoke run's, a software adapter's steps being seconds at the default).
fn gpt_experiment(name: &str) -> Result<stepscope_core::Experiment, JsValue> {
    let mut e = crate::model::edit::default_gpt_experiment();
    match name {
        "gpt" => {}
        "gpt-small" => {
            let g = e.model.gpt.as_mut().expect("the default transformer");
            (g.blocks, g.heads, g.embed, g.context) = (2, 2, 32, 32);
            e.batch_size = 8;
        }
        other => return Err(js_err(format!("no transformer workload {other}"))),
    }
    Ok(e)
}

/// Trains transformer workload `name` (`gpt_experiment`) on `engine`
/// ("cpu", "gpu-k1" or "gpu-kmax"; the GPU's matmul and attention variants
/// chosen by timing on the adapter, as the page does) for about `seconds`
/// after a warm-up step: {tokens_per_second, steps, k,
/// dispatches_per_step, attention, adapter}.
#[wasm_bindgen]
pub async fn stepscope_bench_gpt(name: String, engine: String, seconds: f64) -> Result<JsValue, JsValue> {
    let e = gpt_experiment(&name)?;
    crate::model::host::fetch_shakespeare().await.map_err(|why| JsValue::from_str(&why))?;
    let data = stepscope_core::data::Dataset::load(&e, None).map_err(js_err)?;
    let out = Object::new();
    let mut trainer = trainer_on(&engine, &e, data, &out).await?;
    if let Some(g) = trainer.gpu_engine() {
        g.phase_timing = false;
        g.choose_matmuls().await.map_err(js_err)?;
        g.choose_attention().await.map_err(js_err)?;
        set(&out, "dispatches_per_step", g.dispatches_per_step() as u32);
        set(&out, "attention", g.attention().map_or("", |a| a.name()));
    }
    let (steps, k, elapsed_s) = timed(&mut trainer, &engine, seconds).await?;
    let tokens = e.batch_size * e.gpt().map_or(1, |g| g.context);
    set(&out, "tokens_per_second", (steps * tokens) as f64 / elapsed_s);
    set(&out, "steps", steps as u32);
    set(&out, "k", k as u32);
    Ok(out.into())
}

/// The matmul variants of each layer, e.g. "B-B BTB": per layer its
/// forward, input gradient ("-" for the first layer, which has none) and
/// weight gradient, T tiled and B blocked.
fn matmul_summary(matmuls: &[LayerMatmuls]) -> String {
    let letter = |v: MatmulVariant| if v == MatmulVariant::Blocked { "B" } else { "T" };
    matmuls
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let input = if i == 0 { "-" } else { letter(l.backward_input) };
            format!("{}{input}{}", letter(l.forward), letter(l.backward_weight))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The adapter's FMA peak (`shaders/fma_peak.wgsl`) and both forward
/// kernels' GFLOP/s at each layer shape of workload `name`, each measured
/// for about `seconds` (`stepscope_core::gpu::probe`, as `stepscope bench`):
/// {adapter, fma_gflops, layers: [{batch, inputs, units, gflops_tiled,
/// gflops_blocked}]}.
#[wasm_bindgen]
pub async fn stepscope_bench_probe(name: String, seconds: f64) -> Result<JsValue, JsValue> {
    let w = workload(&name).ok_or_else(|| js_err(format!("no workload {name}")))?;
    let ctx = context().await?;
    let out = Object::new();
    set(&out, "adapter", ctx.describe());
    let fma = probe::fma_peak_gflops(&ctx, 1024, seconds).await.map_err(js_err)?;
    set(&out, "fma_gflops", fma);
    let layers = Array::new();
    for pair in w.widths.windows(2) {
        let layer = Object::new();
        for v in MatmulVariant::ALL {
            let gflops = probe::matmul_gflops(&ctx, v, w.batch, pair[0], pair[1], seconds).await.map_err(js_err)?;
            set(&layer, &format!("gflops_{}", v.name()), gflops);
        }
        set(&layer, "batch", w.batch as u32);
        set(&layer, "inputs", pair[0] as u32);
        set(&layer, "units", pair[1] as u32);
        layers.push(&layer);
    }
    set(&out, "layers", layers);
    Ok(out.into())
}

/// Conv workload `key` ("mnist", "cifar") at `batch`, so that TensorFlow.js
/// trains the very same net on the same images: {input_shape, layers (the
/// format's JSON), batch, rows, inputs, targets}.
#[wasm_bindgen]
pub fn stepscope_bench_conv_workload(key: &str, batch: u32) -> Result<JsValue, JsValue> {
    let w = conv_workload(key).ok_or_else(|| js_err(format!("no conv workload {key}")))?;
    let (_, data) = w.build(batch as usize);
    let out = Object::new();
    let shape: Array = w.input_shape.iter().map(|&d| JsValue::from(d as u32)).collect();
    set(&out, "input_shape", shape);
    set(&out, "layers", js_sys::JSON::parse(w.layers)?);
    set(&out, "name", w.name);
    set(&out, "batch", batch);
    set(&out, "rows", data.train.rows() as u32);
    set(&out, "inputs", Float32Array::from(data.train.inputs.as_slice()));
    set(&out, "targets", Float32Array::from(data.train.targets.as_slice()));
    Ok(out.into())
}

/// Trains conv workload `key` at `batch` on `engine` ("cpu", "gpu-k1" or
/// "gpu-kmax") for about `seconds` after a warm-up step: {images_per_second,
/// steps, k, dispatches_per_step, adapter}.
#[wasm_bindgen]
pub async fn stepscope_bench_conv(key: String, batch: u32, engine: String, seconds: f64) -> Result<JsValue, JsValue> {
    let w = conv_workload(&key).ok_or_else(|| js_err(format!("no conv workload {key}")))?;
    let (e, data) = w.build(batch as usize);
    let out = Object::new();
    let mut trainer = trainer_on(&engine, &e, data, &out).await?;
    if let Some(g) = trainer.gpu_engine() {
        g.phase_timing = false;
        set(&out, "dispatches_per_step", g.dispatches_per_step() as u32);
    }
    let (steps, k, elapsed_s) = timed(&mut trainer, &engine, seconds).await?;
    set(&out, "images_per_second", (steps * batch as usize) as f64 / elapsed_s);
    set(&out, "steps", steps as u32);
    set(&out, "k", k as u32);
    Ok(out.into())
}
