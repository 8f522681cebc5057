//! The training worker (`model::host`): the engine runs here, off the
//! page's main thread. trunk builds it next to the page
//! (`data-type="worker"` in index.html).

fn main() {
    // The worker trains on Tiny Shakespeare: its module carries the text
    // (the page's does not, `stepscope_core::data::shakespeare`).
    stepscope_core::data::use_built_in_shakespeare();
    stepscope_app::model::host::worker::run();
}
