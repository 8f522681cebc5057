//! The training worker (`model::host`): the engine runs here, off the
//! page's main thread. trunk builds it next to the page
//! (`data-type="worker"` in index.html).

fn main() {
    stepscope_app::model::host::worker::run();
}
