//! Component tests of the page: `stepscope_app::App` mounted into a fresh
//! element of the test document and driven through the DOM by
//! `data-testid`, as a user would. The page trains in a loop driven by
//! requestAnimationFrame, so every check polls the DOM until a deadline
//! instead of sleeping a fixed time.
//!
//! Each test mounts its own App into its own container, after clearing the
//! URL fragment the page keeps its experiment in. An App cannot be stopped
//! (its training loop runs for the page's lifetime, and unmounting would
//! dispose the signals that loop still uses), so a test pauses its App and
//! detaches its container when done.
#![cfg(target_arch = "wasm32")]

mod page;

use page::{sleep, url_experiment, wait_for, Page};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::{console_log, wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

/// The core decodes links as the browser does: `link::encode_component`
/// and `decode_component` against `encodeURIComponent` and
/// `decodeURIComponent`, on awkward strings and on malformed escapes
/// (both refuse the same ones).
#[wasm_bindgen_test]
fn links_are_encoded_and_decoded_as_the_browser_does() {
    use stepscope_core::link;
    let strings = ["", "{\"seed\": 1, \"lr\": 2.5e-3}", "-_.!~*'() /?#&=+,;:@$", "é€😀\u{0}\t\r\n%", "[\"a\"]"];
    for s in strings {
        let ours = link::encode_component(s);
        assert_eq!(ours, String::from(js_sys::encode_uri_component(s)), "encoding `{s}`");
        assert_eq!(link::decode_component(&ours).unwrap(), s, "decoding `{ours}`");
    }
    let escapes =
        ["%", "%4", "%zz", "a%2", "%C3", "%C3%A9", "%e2%82%ac", "%ED%A0%80", "%F0%9F%98", "%2F%2f", "%C0%AF", "+%20"];
    for s in escapes {
        let browser = js_sys::decode_uri_component(s).ok().map(String::from);
        assert_eq!(link::decode_component(s).ok(), browser, "decoding `{s}`");
    }
}

/// A checkpoint whose digest is right but whose metadata is absurd, as a
/// hostile file would be written, is refused with an alert naming the field;
/// the run stays where it was and goes on. (Such a file froze the tab at its
/// first step when the counters were trusted.)
#[wasm_bindgen_test]
async fn an_absurd_checkpoint_is_refused_and_the_run_goes_on() {
    use stepscope_core::checkpoint::serialize_unchecked;
    let page = Page::mount_with_query("?engine=cpu").await;
    page.click("step-once");
    page.wait_for_step(|s| s == 1, "step-count 1").await;
    let e = stepscope_core::Experiment::from_json(&url_experiment()).expect("the page's experiment");
    type Edit = fn(&mut stepscope_core::TrainState);
    let cases: [(Edit, &str); 3] = [
        (|s| s.optimizer.step = u64::MAX, "step count 18446744073709551615 is beyond"),
        (|s| s.data_position.rows_consumed = 1_000_000_000_000_000_000, "restoring would replay the shuffle"),
        (|s| s.optimizer.exp_avg_sq[0] = -1.0, "exp_avg_sq holds a negative value (-1)"),
    ];
    for (edit, want) in cases {
        let mut state = stepscope_core::TrainState::fresh(&e);
        edit(&mut state);
        page.upload("restore-checkpoint", "hostile.safetensors", &serialize_unchecked(&state).expect("bytes"));
        let alert =
            wait_for("the refusal", || page.alert().filter(|a| a.contains(want)).ok_or(format!("{:?}", page.alert())))
                .await;
        console_log!("refused: {alert}");
        assert_eq!(page.step_count(), 1, "the run is where it was");
        page.click("dismiss-alert");
    }
    page.click("step-once");
    page.wait_for_step(|s| s == 2, "step-count 2 after the refusals").await;
    page.close().await;
}

/// The automatic checkpoint store puts a checkpoint and its CSV in one
/// IndexedDB transaction, all or nothing: when the second value cannot be
/// stored (here a function, which IndexedDB cannot clone), the first is not
/// committed either and the values from before stay.
#[wasm_bindgen_test]
async fn a_failed_store_put_commits_nothing() {
    use stepscope_app::model::store;
    let (a, b) = ("test-store-a", "test-store-b");
    let always = || true;
    let put = store::put_if(&[(a, JsValue::from_str("old a")), (b, JsValue::from_str("old b"))], always).await;
    assert_eq!(put, Ok(true), "a plain put");
    let not_storable = js_sys::Function::new_no_args("return 1");
    let err =
        store::put_if(&[(a, JsValue::from_str("new a")), (b, not_storable.into())], always).await.expect_err("refused");
    console_log!("refused put: {err}");
    let get = |key| async move { store::get(key).await.expect("get").and_then(|v| v.as_string()) };
    assert_eq!(get(a).await.as_deref(), Some("old a"), "a was not committed");
    assert_eq!(get(b).await.as_deref(), Some("old b"));
    // A put no longer wanted once the database is open (an autosave of a
    // run reset meanwhile) writes nothing.
    let put = store::put_if(&[(a, JsValue::from_str("stale a"))], || false).await;
    assert_eq!(put, Ok(false));
    assert_eq!(get(a).await.as_deref(), Some("old a"), "the unwanted put wrote nothing");
}

#[wasm_bindgen_test]
async fn the_page_names_its_backend_and_starts_at_step_zero() {
    let page = Page::mount_with_query("?engine=gpu").await;
    let backend = page.text("backend-name");
    // Chromium runs with WebGPU (SwiftShader): pinned, the page uses it.
    assert!(backend.starts_with("WebGPU"), "backend: `{backend}` ({})", page.text("backend-reason"));
    assert_eq!(page.text("backend-reason"), "", "no fallback reason on WebGPU");
    assert_eq!(page.step_count(), 0);
    assert!(page.alert().is_none(), "no alert: {:?}", page.alert());
    // The default experiment is in the URL once the page started.
    assert!(url_experiment().contains("spiral"), "{}", url_experiment());
    // The first view of the untrained network.
    page.wait_for_number("train-loss").await;
    page.wait_for_number("test-loss").await;
    page.close().await;
}

/// `?backend=cpu` (the older spelling of `?engine=cpu`) runs the CPU
/// engine (compiled to WebAssembly), says why, and trains.
#[wasm_bindgen_test]
async fn the_cpu_engine_runs_when_asked_for() {
    let page = Page::mount_with_query("?backend=cpu").await;
    assert_eq!(page.text("backend-name"), "CPU (WebAssembly)");
    let reason = page.text("backend-reason");
    assert!(reason.contains("CPU engine was pinned"), "reason: {reason}");
    page.click("step-once");
    page.wait_for_step(|s| s == 1, "step-count 1").await;
    page.wait_for_number("train-loss").await;
    page.close().await;
}

#[wasm_bindgen_test]
async fn one_step_advances_the_counter_by_one() {
    let page = Page::mount().await;
    assert_eq!(page.step_count(), 0);
    page.click("step-once");
    page.wait_for_step(|s| s == 1, "step-count 1").await;
    page.click("step-once");
    page.wait_for_step(|s| s == 2, "step-count 2").await;
    // One step at a time: nothing trains on.
    sleep(300).await;
    assert_eq!(page.step_count(), 2, "still 2 after a pause");
    page.click("reset");
    page.wait_for_step(|s| s == 0, "step-count 0 after reset").await;
    page.close().await;
}

#[wasm_bindgen_test]
async fn layers_are_added_and_removed() {
    let page = Page::mount().await;
    let hidden = |page: &Page| (0..8).take_while(|l| page.find(&format!("layer-{l}")).is_some()).count();
    let start = hidden(&page);
    assert_eq!(start, 2, "the default experiment has two hidden layers");
    let before = url_experiment();
    page.click("add-layer");
    wait_for("layer-2 to appear", || page.find("layer-2").map(|_| ()).ok_or(format!("{} layers", hidden(&page)))).await;
    assert_eq!(hidden(&page), 3);
    assert_eq!(page.value("units-2"), page.value("units-1"), "a new layer is like the last one");
    // A width is typed, not only clicked ±1; a bad one gets a message naming
    // the layer and changes nothing.
    page.type_into("units-2", "37");
    wait_for("the typed width", || {
        if url_experiment().contains(r#""units":37"#) {
            Ok(())
        } else {
            Err(url_experiment())
        }
    })
    .await;
    for bad in ["0", "abc", "2.5", "100000"] {
        page.type_into("units-2", bad);
        let alert = wait_for("a message", || {
            page.find("alert").map(|a| a.text_content().unwrap_or_default()).ok_or(String::new())
        })
        .await;
        assert!(alert.contains("hidden layer 3") || alert.contains("units on this page"), "{bad}: {alert}");
        assert_eq!(page.value("units-2"), "37", "{bad}: the field shows the width again");
        assert!(url_experiment().contains(r#""units":37"#), "{bad}: nothing changed");
        page.click("dismiss-alert");
    }
    wait_for("the URL to hold the new model", || {
        let now = url_experiment();
        if now != before {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
    page.click("remove-layer");
    wait_for("layer-2 to go", || page.find("layer-2").map_or(Ok(()), |_| Err("still there".to_string()))).await;
    assert_eq!(hidden(&page), 2);
    assert!(page.alert().is_none(), "no alert: {:?}", page.alert());
    page.close().await;
}

#[wasm_bindgen_test]
async fn an_invalid_number_is_refused_with_an_alert_and_changes_nothing() {
    let page = Page::mount().await;
    page.click("step-once");
    page.wait_for_step(|s| s == 1, "step-count 1").await;
    let experiment = url_experiment();

    page.type_into("learning-rate", "abc");
    let message = wait_for("an alert", || page.alert().ok_or_else(|| "no alert".to_string())).await;
    assert!(message.contains("Learning rate") && message.contains("abc"), "alert: {message}");
    // A refused edit resets nothing and changes nothing.
    sleep(200).await;
    assert_eq!(page.step_count(), 1, "the run goes on from where it was");
    assert_eq!(url_experiment(), experiment, "the experiment is unchanged");

    // A number the experiment refuses: the edit goes through validation.
    page.type_into("batch-size", "0");
    let message = wait_for("the batch-size alert", || {
        page.alert().filter(|m| m.contains("Batch size")).ok_or_else(|| format!("{:?}", page.alert()))
    })
    .await;
    assert!(message.contains('0'), "alert: {message}");
    sleep(200).await;
    assert_eq!(page.step_count(), 1, "the run goes on from where it was");
    assert_eq!(url_experiment(), experiment, "the experiment is unchanged");

    // A valid value is taken, live (the learning rate needs no reset).
    page.type_into("learning-rate", "0.01");
    wait_for("a good edit to clear the alert", || page.alert().map_or(Ok(()), Err)).await;
    assert!(url_experiment().contains("\"lr\":0.01"), "{}", url_experiment());
    sleep(200).await;
    assert_eq!(page.step_count(), 1, "a learning-rate change continues the run");
    page.close().await;
}

#[wasm_bindgen_test]
async fn training_runs_until_paused_and_shows_the_loss() {
    let page = Page::mount().await;
    let initial = page.wait_for_number("train-loss").await;
    page.click("train-toggle");
    wait_for("the pause button", || {
        let label = page.text("train-toggle");
        if label.contains("Pause") {
            Ok(())
        } else {
            Err(label)
        }
    })
    .await;
    let step = page.wait_for_step(|s| s >= 50, "50 steps").await;
    let loss = wait_for("the train loss to change", || {
        let text = page.text("train-loss");
        match text.parse::<f32>() {
            Ok(v) if v.is_finite() && v != initial => Ok(v),
            _ => Err(text),
        }
    })
    .await;
    let test_loss = page.wait_for_number("test-loss").await;
    console_log!("step {step}: train loss {initial} → {loss}, test loss {test_loss}");
    assert!(page.alert().is_none(), "no alert: {:?}", page.alert());
    page.click("train-toggle");
    wait_for("the train button", || {
        let label = page.text("train-toggle");
        if label.contains("Train") {
            Ok(())
        } else {
            Err(label)
        }
    })
    .await;
    // Paused: once a frame in flight has landed, the counter stays.
    sleep(300).await;
    let paused_at = page.step_count();
    sleep(300).await;
    assert_eq!(page.step_count(), paused_at, "no steps while paused");
    page.close().await;
}

/// A new optimizer shows its own fields (and starts its state afresh); a
/// new dataset restarts the run and repaints the decision boundary.
#[wasm_bindgen_test]
async fn a_new_optimizer_shows_its_fields_and_a_new_dataset_restarts_the_run() {
    let page = Page::mount().await;
    assert!(page.find("momentum").is_none(), "AdamW has no momentum field");
    page.choose("optimizer", "sgd");
    wait_for("the momentum field", || page.find("momentum").map(|_| ()).ok_or("absent".to_string())).await;
    assert!(page.find("beta1").is_none(), "SGD has no betas");
    assert!(url_experiment().contains("\"kind\":\"sgd\""), "{}", url_experiment());

    page.click("step-once");
    page.wait_for_step(|s| s == 1, "step-count 1").await;
    page.choose("dataset", "xor");
    page.wait_for_step(|s| s == 0, "step-count 0").await;
    assert!(url_experiment().contains("\"xor\""), "{}", url_experiment());
    assert!(url_experiment().contains("\"kind\":\"sgd\""), "the optimizer stays: {}", url_experiment());
    assert!(page.alert().is_none(), "no alert: {:?}", page.alert());
    // The decision boundary shows the new, untrained network: painted,
    // not blank.
    wait_for("a painted decision boundary", || {
        let canvas: web_sys::HtmlCanvasElement = page.get("decision-boundary").dyn_into().expect("a canvas");
        let ctx: web_sys::CanvasRenderingContext2d =
            canvas.get_context("2d").ok().flatten().ok_or("no 2d context")?.dyn_into().map_err(|_| "not 2d")?;
        let (w, h) = (canvas.width(), canvas.height());
        let pixels = ctx.get_image_data(0.0, 0.0, w as f64, h as f64).map_err(|_| "no image data")?.data();
        let opaque = pixels.chunks(4).filter(|p| p[3] == 255).count();
        let mut colours: Vec<&[u8]> = pixels.chunks(4).collect();
        colours.sort();
        colours.dedup();
        if w > 0 && opaque == (w * h) as usize && colours.len() > 1 {
            Ok(())
        } else {
            Err(format!("{opaque} of {w}×{h} pixels painted, {} colours", colours.len()))
        }
    })
    .await;
    page.close().await;
}

/// The training loop takes a long CPU step in parts across frames (here
/// forced: a frame ends after every part), so that Pause and edits never
/// wait for a whole step: the frames that end part-way give no step, the
/// step comes out with the bits of a whole one, and an automatic checkpoint
/// falling due part-way is taken at the step's end instead.
#[wasm_bindgen_test]
async fn a_long_cpu_step_spans_frames_with_the_same_bits() {
    use stepscope_app::model::runner::Runner;
    let e = stepscope_app::model::edit::default_experiment();
    let mut whole = Runner::new(&e, None, None).expect("the default experiment builds");
    let mut parts = Runner::new(&e, None, None).expect("the default experiment builds");
    parts.set_yield_after_ms(0.0);
    let expected = whole.train_frame(true, 15.0).await.0.expect("a step");
    assert_eq!(expected.len(), 1);
    // Forward, then backward: each frame ends part-way, with no step.
    for part in ["forward", "backward"] {
        let got = parts.train_frame(false, 1e9).await.0.expect("a part");
        assert!(got.is_empty() && parts.mid_step(), "{part}: the frame ends part-way");
        assert!(parts.begin_checkpoint().expect("no error").is_none(), "{part}: no checkpoint part-way");
    }
    // The update finishes the step; the frame goes on into the next one.
    let got = parts.train_frame(false, 1e9).await.0.expect("the update");
    assert_eq!(got.len(), 1);
    let (a, b) = (&expected[0], &got[0]);
    assert_eq!((a.step, a.loss.to_bits(), a.grad_norm.to_bits()), (b.step, b.loss.to_bits(), b.grad_norm.to_bits()));
    assert!(parts.mid_step(), "the next step began in the same frame");
    // A whole step for Step once: the one begun is finished.
    let once = parts.train_frame(true, 0.0).await.0.expect("a step");
    assert_eq!((once.len(), once[0].step, parts.mid_step()), (1, 1, false));
    assert!(parts.begin_checkpoint().expect("no error").is_some(), "at a step boundary it is taken");
}
