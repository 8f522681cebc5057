//! Which engine trains. The page trains on the CPU engine at once; the
//! GPU device (its pipelines compiled) is created in a task of its own
//! meanwhile. Once it exists, and again whenever the model or the batch
//! changes, both engines are measured briefly on the actual experiment and
//! the run continues on the faster one, unless the user pinned one.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use js_sys::{Function, Promise, Reflect};
use leptos::prelude::*;
use leptos::task::spawn_local;
use stepscope_core::gpu::GpuContext;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use super::AppState;
use crate::model::runner::{shape_key, BackendInfo, Pin, Runner};

type GpuResult = Result<(Arc<GpuContext>, String), String>;

/// The engine choice between frames: the GPU device as it arrives, and
/// what was decided for which shape and pin.
#[derive(Default)]
pub struct Chooser {
    slot: Rc<RefCell<Option<GpuResult>>>,
    started: bool,
    adapter: String,
    gpu_failed: Option<String>,
    /// (shape, pin) the current choice was made for.
    decided: Option<(String, Pin)>,
}

const CPU: &str = "CPU (WebAssembly)";

impl Chooser {
    /// Starts creating the GPU device unless `pin` is the CPU (then it
    /// starts when the pin changes).
    fn start_gpu(&mut self, pin: Pin) {
        if self.started || pin == Pin::Cpu {
            return;
        }
        self.started = true;
        let slot = self.slot.clone();
        spawn_local(async move {
            let result = if !super::training::webgpu_available() {
                Err("this browser has no WebGPU (navigator.gpu is missing)".to_string())
            } else {
                match GpuContext::new().await {
                    Ok(ctx) => {
                        let label = browser_adapter_label().await.unwrap_or_else(|| ctx.describe());
                        Ok((Arc::new(ctx), label))
                    }
                    Err(e) => Err(format!("WebGPU is present but unusable: {e}")),
                }
            };
            *slot.borrow_mut() = Some(result);
        });
    }
}

impl AppState {
    /// Once a frame: takes the GPU device when it arrives, and when the
    /// shape or the pin changed, picks the engine (measuring both on
    /// auto) and moves the run to it.
    pub(super) async fn choose_engine(&self, runner: &mut Runner, chooser: &mut Chooser) {
        let pin = self.engine_pin.get_untracked();
        chooser.start_gpu(pin);
        let arrived = chooser.slot.borrow_mut().take();
        match arrived {
            Some(Ok((ctx, label))) => {
                runner.set_context(ctx);
                chooser.adapter = label;
                chooser.decided = None;
            }
            Some(Err(reason)) => {
                chooser.gpu_failed = Some(reason);
                chooser.decided = None;
            }
            None => {}
        }
        let key = (shape_key(runner.experiment()), pin);
        if chooser.decided.as_ref() == Some(&key) {
            return;
        }
        let waiting = !runner.has_gpu_context() && chooser.gpu_failed.is_none();
        let mut info = BackendInfo { pin, adapter: chooser.adapter.clone(), ..BackendInfo::default() };
        let to_gpu = match pin {
            Pin::Cpu => {
                info.fallback_reason = Some("the CPU engine was pinned (?engine=cpu)".into());
                false
            }
            _ if waiting => {
                info.name = if pin == Pin::Gpu { "starting WebGPU…".into() } else { CPU.into() };
                self.backend.set(info);
                return;
            }
            _ if !runner.has_gpu_context() => {
                info.fallback_reason = chooser.gpu_failed.clone();
                false
            }
            Pin::Gpu => true,
            Pin::Auto => match runner.race().await {
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
        match runner.switch_engine(to_gpu).await {
            Ok(Some(notice)) => self.notice.set(Some(notice)),
            Ok(None) => {}
            Err(message) => self.alert.set(Some(format!("The run could not move to the other engine: {message}"))),
        }
        info.gpu = runner.on_gpu();
        info.name = if info.gpu { "WebGPU".into() } else { CPU.into() };
        info.fused = runner.runs_fused();
        info.settled = true;
        self.backend.set(info);
        chooser.decided = Some(key);
    }

    /// The user pinned an engine (or auto): kept in the URL.
    pub fn pin_engine(&self, pin: Pin) {
        crate::model::url::write_pin(pin);
        self.engine_pin.set(pin);
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
