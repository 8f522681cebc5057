//! What `stepscope train` says of a classification run at its end: how
//! each class fares on the test rows (the training rows where a run has no
//! test split), from the core's classification metrics.

use stepscope_core::data::Table;
use stepscope_core::metrics::class_metrics;
use stepscope_core::model::Layout;
use stepscope_core::Experiment;

/// Most misclassified rows named in the report.
const NAMED_ROWS: usize = 5;

/// The lines for `params` on `table` (named `name`), or none when the run
/// is not a classification or the table is empty.
pub fn class_lines(e: &Experiment, layout: &Layout, params: &[f32], name: &str, table: &Table) -> Vec<String> {
    let Some(metrics) = class_metrics(params, layout, e, table).filter(|m| m.rows() > 0) else {
        return Vec::new();
    };
    let per_class: Vec<String> = metrics
        .per_class_accuracy()
        .iter()
        .enumerate()
        .map(|(k, accuracy)| match accuracy {
            Some(a) => format!("{k} {:.1}% of {}", a * 100.0, metrics.class_rows(k)),
            None => format!("{k} (no rows)"),
        })
        .collect();
    let mut lines = vec![format!("{name} accuracy by class: {}", per_class.join(", "))];
    let named: Vec<String> = metrics
        .misclassified
        .iter()
        .take(NAMED_ROWS)
        .map(|m| format!("row {} is {}, predicted {}", m.row, m.truth, m.predicted))
        .collect();
    let first = if named.is_empty() { String::new() } else { format!(" (first: {})", named.join("; ")) };
    lines.push(format!("{name} misclassified: {} of {} rows{first}", metrics.wrong(), metrics.rows()));
    lines
}
