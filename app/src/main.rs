//! Mounts the page (not in benchmark mode, `?bench`). A Rust panic, should one happen anyway, is shown on the
//! page (the `#panic` element, role="alert"), not only in the console.

fn main() {
    std::panic::set_hook(Box::new(|info| {
        console_error_panic_hook::hook(info);
        stepscope_app::show_panic(&info.to_string());
    }));
    // `?bench`: the browser benchmark drives the exports of `bench`.
    if !stepscope_app::bench::bench_mode() {
        // The engine trains in the worker built next to the page.
        stepscope_app::model::host::use_worker();
        leptos::mount::mount_to_body(stepscope_app::App);
    }
}
