//! The page's end of a worker's channel (`Client`), and the message
//! plumbing both ends share: an inbox that futures await, and bytes sent
//! as transferred `ArrayBuffer`s. One request is in flight at a time (the
//! page's loop awaits each), so a reply is simply the next message.
//! Messages are MessagePack bytes, transferred, not copied.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use web_sys::{MessageEvent, Worker};

use super::protocol::{decode, encode, Answer, Reply, Request, Status};

/// Messages received and not yet taken, and who waits for the next.
#[derive(Default)]
pub(super) struct Inbox {
    messages: VecDeque<JsValue>,
    waker: Option<Waker>,
}

pub(super) type SharedInbox = Rc<RefCell<Inbox>>;

pub(super) fn deliver(inbox: &SharedInbox, message: JsValue) {
    let mut inbox = inbox.borrow_mut();
    inbox.messages.push_back(message);
    if let Some(waker) = inbox.waker.take() {
        waker.wake();
    }
}

/// The next message of `inbox`, if one is here.
pub(super) fn take_message(inbox: &SharedInbox) -> Option<JsValue> {
    inbox.borrow_mut().messages.pop_front()
}

/// Resolves after the event loop's pending tasks (messages among them)
/// ran: a message to itself through a `MessageChannel`, which, unlike a
/// zero timeout, is never held back to 4 ms.
pub(super) async fn next_task() {
    let Ok(channel) = web_sys::MessageChannel::new() else { return };
    let port = channel.port1();
    let promise = js_sys::Promise::new(&mut |resolve, _| port.set_onmessage(Some(&resolve)));
    if channel.port2().post_message(&JsValue::NULL).is_ok() {
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
    }
    port.set_onmessage(None);
}

/// Resolves with the next message of `inbox`.
pub(super) struct Next(pub(super) SharedInbox);

impl Future for Next {
    type Output = JsValue;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<JsValue> {
        let mut inbox = self.0.borrow_mut();
        match inbox.messages.pop_front() {
            Some(message) => Poll::Ready(message),
            None => {
                inbox.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// `bytes` as a Uint8Array whose buffer can be transferred.
pub(super) fn bytes_message(bytes: &[u8]) -> (Uint8Array, Array) {
    let array = Uint8Array::from(bytes);
    let transfer = Array::of1(&array.buffer());
    (array, transfer)
}

/// The page's end: the worker and the replies as they come.
pub struct Client {
    worker: Worker,
    inbox: SharedInbox,
    _onmessage: Closure<dyn FnMut(MessageEvent)>,
    _onerror: Closure<dyn FnMut(web_sys::Event)>,
}

impl Client {
    /// Starts the worker from the files trunk writes next to the page
    /// (`stepscope-worker.js` and its wasm) and waits until it is ready.
    /// Fails when they cannot be loaded.
    pub async fn spawn() -> Result<Client, String> {
        let origin = web_sys::window().ok_or("no window")?.location().href().map_err(|_| "no location")?;
        let base = web_sys::Url::new_with_base(".", &origin).map_err(|_| "no base URL")?.href();
        Client::spawn_at(&base).await
    }

    /// The page's base URL, as the training worker was told it (rank
    /// workers load the same files from there).
    pub fn base() -> Option<String> {
        js_sys::Reflect::get(&js_sys::global(), &"STEPSCOPE_BASE".into()).ok().and_then(|v| v.as_string())
    }

    /// `spawn` with the worker's files under `base` (from a worker, where
    /// there is no window to ask).
    pub async fn spawn_at(base: &str) -> Result<Client, String> {
        // trunk builds the worker for `no-modules`: it defines the global
        // `wasm_bindgen`, which loads the wasm and runs `main`.
        let script = format!("self.STEPSCOPE_BASE = '{base}'; importScripts('{base}stepscope-worker.js'); wasm_bindgen({{ module_or_path: '{base}stepscope-worker_bg.wasm' }});");
        let options = web_sys::BlobPropertyBag::new();
        options.set_type("text/javascript");
        let blob = web_sys::Blob::new_with_str_sequence_and_options(&Array::of1(&script.into()), &options)
            .map_err(|_| "the worker's loader could not be made")?;
        let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|_| "no object URL for the worker")?;
        let worker = Worker::new(&url).map_err(|e| format!("the training worker could not start: {e:?}"))?;
        let inbox = SharedInbox::default();
        let receiving = inbox.clone();
        let onmessage = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
            deliver(&receiving, event.data());
        });
        let failing = inbox.clone();
        let onerror = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
            let message = event
                .dyn_ref::<web_sys::ErrorEvent>()
                .map_or_else(|| "the training worker failed to load".to_string(), |e| e.message());
            deliver(&failing, JsValue::from_str(&format!("error: {message}")));
        });
        worker.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
        worker.set_onerror(Some(onerror.as_ref().unchecked_ref()));
        let client = Client { worker, inbox, _onmessage: onmessage, _onerror: onerror };
        match Next(client.inbox.clone()).await.as_string().as_deref() {
            Some("ready") => Ok(client),
            Some(other) => {
                client.worker.terminate();
                Err(other.trim_start_matches("error: ").to_string())
            }
            None => Err("the training worker sent no greeting".into()),
        }
    }

    /// Posts `message` (a plain object, not a request) and awaits the
    /// worker's answer: Ok for "ranked" (a rank worker) or "loading" (a
    /// loader worker), else what it said.
    pub async fn answer(&self, message: &JsValue) -> Result<(), String> {
        self.worker.post_message(message).map_err(|e| format!("{e:?}"))?;
        match Next(self.inbox.clone()).await.as_string().as_deref() {
            Some("ranked" | "loading") => Ok(()),
            Some(other) => Err(other.trim_start_matches("error: ").to_string()),
            None => Err("an answer that was not text".into()),
        }
    }

    /// Posts a plain message, its `transfer` list moved, not copied.
    pub(super) fn post(&self, message: &JsValue, transfer: &Array) -> Result<(), String> {
        self.worker.post_message_with_transfer(message, transfer).map_err(|e| format!("{e:?}"))
    }

    /// The next message received, if one is here.
    pub(super) fn try_next(&self) -> Option<JsValue> {
        self.inbox.borrow_mut().messages.pop_front()
    }

    /// The next message, when it comes.
    pub(super) fn next(&self) -> Next {
        Next(self.inbox.clone())
    }

    /// Sends `request` and awaits its reply; also returns the ms the page
    /// spent decoding it (main-thread work, unlike the wait).
    pub async fn call(&self, request: &Request) -> (Reply, f64) {
        let (array, transfer) = bytes_message(&encode(request));
        if let Err(err) = self.worker.post_message_with_transfer(&array, &transfer) {
            return (failed(format!("the request could not be sent to the training worker: {err:?}")), 0.0);
        }
        let message = Next(self.inbox.clone()).await;
        if let Some(text) = message.as_string() {
            // A panic or a load error of the worker, as text.
            return (failed(format!("the training worker stopped: {}", text.trim_start_matches("error: "))), 0.0);
        }
        let started = web_time::Instant::now();
        let reply = decode::<Reply>(&Uint8Array::new(&message).to_vec()).unwrap_or_else(failed);
        (reply, started.elapsed().as_secs_f64() * 1e3)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.worker.terminate();
    }
}

fn failed(message: String) -> Reply {
    Reply { answer: Answer::Failed(message), status: Status::default() }
}
