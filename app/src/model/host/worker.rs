//! The training worker's entry point (`run`, called by the
//! `stepscope-worker` binary that trunk builds next to the page): it
//! answers the page's requests in order, through the `Server`, and serves
//! a rank's part of a step when it is a rank worker.

use js_sys::Uint8Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::spawn_local;
use web_sys::{DedicatedWorkerGlobalScope, MessageEvent};

use super::client::{bytes_message, deliver, next_task, take_message, Next, SharedInbox};
use super::protocol::{decode, encode, Answer, Reply, Request, Status};
use super::server::Server;

/// The worker's entry point: answers requests in order until the page
/// goes away. A panic is posted to the page as a string (the page shows
/// it) before the worker stops.
pub fn run() {
    let scope: DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    let panic_scope = scope.clone();
    std::panic::set_hook(Box::new(move |info| {
        console_error_panic_hook::hook(info);
        let _ = panic_scope.post_message(&JsValue::from_str(&info.to_string()));
    }));
    let inbox = SharedInbox::default();
    let receiving = inbox.clone();
    let onmessage = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
        deliver(&receiving, event.data());
    });
    scope.set_onmessage(Some(onmessage.as_ref().unchecked_ref()));
    onmessage.forget();
    let replies = scope.clone();
    spawn_local(async move {
        let mut server = Server::default();
        loop {
            // Between requests the server may train on while the page
            // draws (`runner::ahead`), a step at a time, looking for the
            // next request after each.
            let message = loop {
                if let Some(message) = take_message(&inbox) {
                    break message;
                }
                if !server.train_ahead().await {
                    break Next(inbox.clone()).await;
                }
                next_task().await;
            };
            if let Some(part) = super::ranks::rank_part(&message) {
                // A rank worker (`ranks`): its shards until told to stop.
                let scope = replies.clone();
                super::ranks::serve_rank(&part, move |m| {
                    let _ = scope.post_message(m);
                });
                scope_close(&replies);
                return;
            }
            if let Some(part) = super::loaders::loader_part(&message) {
                // A loader worker (`loaders`): makes batches until closed.
                let scope = replies.clone();
                super::loaders::serve_loader(part, inbox.clone(), move |m, transfer| {
                    let _ = scope.post_message_with_transfer(m, transfer);
                })
                .await;
                return;
            }
            let reply = match decode::<Request>(&Uint8Array::new(&message).to_vec()) {
                Ok(request) => server.serve(request).await,
                Err(message) => Reply { answer: Answer::Failed(message), status: Status::default() },
            };
            let (array, transfer) = bytes_message(&encode(&reply));
            if let Err(err) = replies.post_message_with_transfer(&array, &transfer) {
                web_sys::console::error_2(&"the worker could not post its reply".into(), &err);
            }
        }
    });
    // Messages sent before the wasm module ran are lost: the page waits
    // for this one before its first request.
    let _ = scope.post_message(&JsValue::from_str("ready"));
}

fn scope_close(scope: &DedicatedWorkerGlobalScope) {
    scope.close();
}
