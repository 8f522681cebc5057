//! The harness of the page's component tests (app.rs): mount an App into
//! its own container and drive it through the DOM by `data-testid`,
//! polling until a deadline instead of sleeping a fixed time.

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::console_log;
use web_sys::{Element, Event, EventInit, HtmlElement, HtmlInputElement, HtmlSelectElement};

/// Longest wait for one change. Creating the WebGPU device and compiling
/// the kernels on SwiftShader takes a few seconds; a frame takes far less.
pub const DEADLINE_MS: f64 = 30_000.0;

pub fn window() -> web_sys::Window {
    web_sys::window().expect("a window")
}

pub fn now_ms() -> f64 {
    window().performance().expect("performance").now()
}

/// Resolves after `ms` milliseconds (a poll interval, never a wait for a
/// result).
pub async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        window().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms).expect("setTimeout");
    });
    JsFuture::from(promise).await.expect("a timer resolves");
}

/// Polls `check` until it returns Ok, or fails after DEADLINE_MS with the
/// last Err (what the page showed instead).
pub async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let started = now_ms();
    loop {
        match check() {
            Ok(value) => return value,
            Err(last) if now_ms() - started > DEADLINE_MS => {
                panic!("timed out after {DEADLINE_MS} ms waiting for {what}; last seen: {last}")
            }
            Err(_) => sleep(20).await,
        }
    }
}

/// One mounted App, in its own container.
pub struct Page {
    root: HtmlElement,
}

impl Page {
    /// Clears the URL fragment, mounts a fresh App into a new container and
    /// waits until its training loop has chosen a backend (only then does
    /// it read commands and write the URL).
    pub async fn mount() -> Page {
        Page::mount_with_query("").await
    }

    /// As `mount`, with `query` (e.g. "?backend=cpu") in the URL while the
    /// App starts; the URL is changed in place, without navigating.
    pub async fn mount_with_query(query: &str) -> Page {
        // Each page opens as on a first visit: a run an earlier test left
        // autosaved in this browser's IndexedDB would be restored instead.
        stepscope_app::model::checkpoints::clear_autosave().await.expect("forget the autosaved run");
        let location = window().location();
        let path = location.pathname().expect("a path");
        let history = window().history().expect("a history");
        history.replace_state_with_url(&JsValue::NULL, "", Some(&format!("{path}{query}"))).expect("set the URL");
        assert_eq!(location.hash().unwrap_or_default(), "", "the fragment starts empty");
        let document = window().document().expect("a document");
        let root: HtmlElement = document.create_element("div").expect("a div").dyn_into().expect("an HtmlElement");
        document.body().expect("a body").append_child(&root).expect("append the container");
        // The handle unmounts when dropped, disposing signals the App's loop
        // still reads: keep the App alive for the page's lifetime instead.
        std::mem::forget(leptos::mount::mount_to(root.clone(), stepscope_app::App));
        let page = Page { root };
        // Settled: the engine is chosen (on auto, after both were measured).
        let backend = wait_for("the engine to be chosen", || {
            let el = page.get("backend-name");
            let name = el.text_content().unwrap_or_default();
            if el.get_attribute("data-settled").as_deref() == Some("true") {
                Ok(name)
            } else {
                Err(name)
            }
        })
        .await;
        console_log!("backend: {backend}");
        if !query.is_empty() {
            // The App read it when it started; later Apps must not see it.
            // The fragment (the experiment the App wrote) stays.
            let hash = location.hash().unwrap_or_default();
            history
                .replace_state_with_url(&JsValue::NULL, "", Some(&format!("{path}{hash}")))
                .expect("restore the URL");
        }
        page
    }

    /// The element with `data-testid="{id}"` in this page, if any.
    pub fn find(&self, id: &str) -> Option<Element> {
        self.root.query_selector(&format!("[data-testid=\"{id}\"]")).expect("a valid selector")
    }

    pub fn get(&self, id: &str) -> Element {
        self.find(id).unwrap_or_else(|| panic!("no element with data-testid {id}"))
    }

    pub fn text(&self, id: &str) -> String {
        self.get(id).text_content().unwrap_or_default().trim().to_string()
    }

    /// What a text input holds.
    pub fn value(&self, id: &str) -> String {
        self.get(id).dyn_into::<HtmlInputElement>().expect("an input").value()
    }

    pub fn click(&self, id: &str) {
        self.get(id).dyn_into::<HtmlElement>().expect("an HtmlElement").click();
    }

    pub fn step_count(&self) -> u64 {
        let text = self.text("step-count");
        text.parse().unwrap_or_else(|_| panic!("step-count is not a number: `{text}`"))
    }

    pub async fn wait_for_step(&self, want: impl Fn(u64) -> bool, what: &str) -> u64 {
        wait_for(what, || {
            let step = self.step_count();
            if want(step) {
                Ok(step)
            } else {
                Err(format!("step-count {step}"))
            }
        })
        .await
    }

    /// A number shown in `id` (train-loss, test-loss), once there is one.
    pub async fn wait_for_number(&self, id: &str) -> f32 {
        wait_for(&format!("{id} to show a number"), || {
            let text = self.text(id);
            text.parse::<f32>().ok().filter(|v| v.is_finite()).ok_or(text)
        })
        .await
    }

    /// Types `value` into a text input and commits it (a `change` event).
    pub fn type_into(&self, id: &str, value: &str) {
        let input: HtmlInputElement = self.get(id).dyn_into().expect("an input");
        input.set_value(value);
        dispatch_change(&input);
    }

    /// Picks `value` in a select (a `change` event).
    pub fn choose(&self, id: &str, value: &str) {
        let select: HtmlSelectElement = self.get(id).dyn_into().expect("a select");
        select.set_value(value);
        assert_eq!(select.value(), value, "{id} offers `{value}`");
        dispatch_change(&select);
    }

    /// Gives a file input `bytes` as the file `name` (a `change` event), as
    /// a user picking a file would.
    pub fn upload(&self, id: &str, name: &str, bytes: &[u8]) {
        let input: HtmlInputElement = self.get(id).dyn_into().expect("a file input");
        let parts = js_sys::Array::of1(&js_sys::Uint8Array::from(bytes));
        let file = web_sys::File::new_with_u8_array_sequence(&parts, name).expect("a File");
        let transfer = web_sys::DataTransfer::new().expect("a DataTransfer");
        transfer.items().add_with_file(&file).expect("add the file");
        input.set_files(transfer.files().as_ref());
        dispatch_change(&input);
    }

    /// The message shown with role="alert", if any.
    pub fn alert(&self) -> Option<String> {
        let el = self.root.query_selector("[role=\"alert\"]").expect("a valid selector")?;
        Some(el.text_content().unwrap_or_default())
    }

    /// Pauses training if it runs, and detaches the container. The App
    /// itself lives on, idle (see the module comment).
    pub async fn close(self) {
        if self.get("train-toggle").text_content().unwrap_or_default().contains("Pause") {
            self.click("train-toggle");
        }
        self.root.remove();
    }
}

pub fn dispatch_change(target: &web_sys::EventTarget) {
    // Bubbling, as a browser's own: Leptos may delegate listeners.
    let init = EventInit::new();
    init.set_bubbles(true);
    let event = Event::new_with_event_init_dict("change", &init).expect("an event");
    target.dispatch_event(&event).expect("dispatch");
}

pub fn fragment() -> String {
    window().location().hash().unwrap_or_default()
}

/// The experiment the URL holds (the page writes it on every edit).
pub fn url_experiment() -> String {
    let hash = fragment();
    let encoded = hash.strip_prefix("#e=").unwrap_or_else(|| panic!("the URL holds no experiment: `{hash}`"));
    String::from(js_sys::decode_uri_component(encoded).expect("URI encoding"))
}
