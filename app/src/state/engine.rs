//! Which engine trains. The page trains on the CPU engine at once; the
//! GPU device (its pipelines compiled) is created in a task of its own
//! once the first step is in (or after `GPU_START_DELAY`), so that its
//! shader compiles (seconds of CPU on a software adapter) do not compete
//! with the page's first second. Once it exists, and again whenever the model or the batch
//! changes, both engines are measured briefly on the actual experiment and
//! the run continues on the faster one, unless the user pinned one.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Function, Promise, Reflect};
use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::AppState;
use crate::model::host::Host;
use crate::model::runner::{shape_key, BackendInfo, Pin};

/// The engine choice between frames: the GPU device as it arrives, and
/// what was decided for which shape and pin.
#[derive(Default)]
pub struct Chooser {
    started: bool,
    /// When the chooser first ran (the page's first frame).
    first_frame: Option<web_time::Instant>,
    /// The adapter as the browser names it, once known.
    label: Rc<RefCell<Option<String>>>,
    adapter: String,
    gpu_arrived: bool,
    gpu_failed: Option<String>,
    /// (shape, pin) the current choice was made for.
    decided: Option<(String, Pin)>,
}

const CPU: &str = "CPU (WebAssembly)";

/// On auto, the GPU device is created once the run has taken its first
/// step, or this long after the first frame if nobody trains. Measured
/// on the 2-core machine, creating it at once put the first trained step
/// about 150–250 ms later (pipeline compiles in the GPU process), with
/// outliers of a second.
const GPU_START_DELAY: std::time::Duration = std::time::Duration::from_millis(1500);

impl AppState {
    /// Once a frame: starts creating the GPU device on the engine's side
    /// (unless the CPU is pinned), takes it when it arrives, and when the
    /// shape or the pin changed, picks the engine (measuring both on auto)
    /// and moves the run to it.
    pub(super) async fn choose_engine(&self, host: &mut Host, chooser: &mut Chooser) {
        let pin = self.run.engine_pin.get_untracked();
        let first_frame = *chooser.first_frame.get_or_insert_with(web_time::Instant::now);
        let gpu_due = pin == Pin::Gpu || host.step_count() > 0 || first_frame.elapsed() >= GPU_START_DELAY;
        if !chooser.started && pin != Pin::Cpu && gpu_due {
            chooser.started = true;
            if let Err(message) = host.start_gpu().await {
                chooser.gpu_failed = Some(message.to_string());
            }
            let label = chooser.label.clone();
            spawn_local(async move {
                *label.borrow_mut() = browser_adapter_label().await;
            });
        }
        let label = chooser.label.borrow().clone();
        if let Some(label) = label.filter(|l| chooser.gpu_arrived && *l != chooser.adapter) {
            // The browser's name for the adapter came after the device.
            chooser.adapter = label;
            chooser.decided = None;
        }
        if chooser.started && !chooser.gpu_arrived && chooser.gpu_failed.is_none() {
            // Nothing else may be asking while the run is paused.
            if host.status().gpu.is_none() {
                let _ = host.poll().await;
            }
            match host.status().gpu.clone() {
                Some(Ok(described)) => {
                    chooser.gpu_arrived = true;
                    chooser.adapter = chooser.label.borrow().clone().unwrap_or(described);
                    chooser.decided = None;
                }
                Some(Err(reason)) => {
                    chooser.gpu_failed = Some(reason);
                    chooser.decided = None;
                }
                None => {}
            }
        }
        let Some(experiment) = host.experiment() else { return };
        let key = (shape_key(experiment), pin);
        if chooser.decided.as_ref() == Some(&key) {
            return;
        }
        let waiting = !host.has_gpu_context() && chooser.gpu_failed.is_none();
        let mut info = BackendInfo { pin, adapter: chooser.adapter.clone(), ..BackendInfo::default() };
        // A transformer whose settings the WebGPU kernels do not cover yet
        // (q/k LayerNorm, a context past 1024), or augmented images, stay
        // on the CPU engine, saying why (`gpu::unsupported`).
        let gpt_refusal = stepscope_core::gpu::unsupported(experiment);
        let to_gpu = match pin {
            Pin::Cpu => {
                info.fallback_reason = Some("the CPU engine was pinned (?engine=cpu)".into());
                false
            }
            _ if gpt_refusal.is_some() => {
                info.fallback_reason = gpt_refusal;
                false
            }
            _ if waiting => {
                info.name = if pin == Pin::Gpu { "starting WebGPU…".into() } else { CPU.into() };
                self.run.backend.set(info);
                return;
            }
            _ if !host.has_gpu_context() => {
                info.fallback_reason = chooser.gpu_failed.clone();
                false
            }
            Pin::Gpu => true,
            Pin::Auto => match host.race(self.run.ranks_asked.get_untracked()).await {
                Ok(race) => {
                    let gpu = race.gpu_wins();
                    info.race = Some(race);
                    gpu
                }
                Err(err) => {
                    info.fallback_reason = Some(format!("measuring the GPU engine failed: {err}"));
                    false
                }
            },
        };
        match host.switch_engine(to_gpu).await {
            Ok(Some(notice)) => self.run.notice.set(Some(notice)),
            Ok(None) => {}
            Err(message) => self.run.alert.set(Some(format!("The run could not move to the other engine: {message}"))),
        }
        info.gpu = host.on_gpu();
        info.name = if info.gpu { "WebGPU".into() } else { CPU.into() };
        info.fused = host.runs_fused();
        info.settled = true;
        self.run.backend.set(info);
        chooser.decided = Some(key);
    }

    /// The user pinned an engine (or auto): kept in the URL.
    pub fn pin_engine(&self, pin: Pin) {
        crate::model::url::write_pin(pin);
        self.run.engine_pin.set(pin);
    }
}

/// The adapter as the browser names it (`GPUAdapter.info`): wgpu fills
/// only the description, which is empty unless developer features are on.
async fn browser_adapter_label() -> Option<String> {
    let navigator = web_sys::window()?.navigator();
    let gpu = Reflect::get(&navigator, &"gpu".into()).ok()?;
    let request: Function = Reflect::get(&gpu, &"requestAdapter".into()).ok()?.dyn_into().ok()?;
    let promise: Promise = request.call0(&gpu).ok()?.dyn_into().ok()?;
    let adapter = JsFuture::from(promise).await.ok()?;
    let info = Reflect::get(&adapter, &"info".into()).ok()?;
    let field = |name: &str| Reflect::get(&info, &name.into()).ok()?.as_string().filter(|s| !s.is_empty());
    let fallback = Reflect::get(&info, &"isFallbackAdapter".into()).ok().and_then(|v| v.as_bool()).unwrap_or(false);
    let mut parts: Vec<String> =
        [field("description"), field("architecture"), field("vendor")].into_iter().flatten().collect();
    parts.dedup();
    if fallback {
        parts.push("software".into());
    }
    (!parts.is_empty()).then(|| parts.join(", "))
}
