//! Model logic of the page, outside components: the default experiment and
//! its edits, the training loop that owns the engine, the views computed
//! from parameters, the URL, CSV uploads.

pub mod bytes;
pub mod chart_lines;
pub mod chart_plot;
pub mod chart_scale;
pub mod checkpoints;
pub mod classroom;
pub mod clock;
pub mod edit;
pub mod gpt_lessons;
pub mod host;
pub mod metrics_csv;
pub mod op_table;
pub mod opened;
pub mod race;
pub mod runner;
pub mod runs;
pub mod runs_store;
pub mod scaling;
pub mod spikes;
pub mod store;
pub mod tar;
pub mod timeline;
pub mod url;
pub mod views;
pub mod words;
