//! A classroom's link: `?hide=` hides controls by their `data-testid`
//! (`?hide=optimizer,learning-rate`), `?lock=1` makes the network
//! read-only. The query is parsed and bounded in the core
//! (`stepscope_core::link::hide_request`, `lock_request`), where the fuzzer
//! reaches it; this module decides what the page does with it.
//!
//! Hiding is one generated `<style>` element, not a flag each control
//! reads: a rule matches a control whenever it exists, so a control that
//! is created later (a new layer's units, the optimizer's β fields after a
//! switch) is hidden from its first frame, and no panel needs to know.
//! Each rule hides the control and the field wrapper around it (a `label`
//! or `.field` that contains it), so no orphaned label stays behind.
//!
//! The lock is held where edits are applied (`AppState::edit` calls
//! `check_lock`), so a control that is re-enabled by hand still cannot
//! change the network; the disabled buttons only say so early.

use stepscope_core::checkpoint::read_checkpoint_header;
use stepscope_core::link::{hide_request, lock_request, HideRequest, LockRequest};
use stepscope_core::Experiment;

use super::edit::{hidden_layers, MAX_HIDDEN_LAYERS};

/// The title of a control the lock disables.
pub const LOCKED_TITLE: &str = "The link locked the network (lock=1)";

/// The page's `data-testid`s that `hide=` knows without looking at the
/// page (docs/page.md's tables). An id that is not here is still accepted
/// when the page has an element with it (`unknown_ids`).
#[rustfmt::skip]
pub const PAGE_IDS: &[&str] = &[
    "train-toggle", "step-once", "reset", "step-count", "steps-per-second", "frame-busy-max",
    "train-loss", "test-loss", "accuracy", "backend-name", "backend-reason", "engine-pin", "engine-thread",
    "add-layer", "remove-layer", "learning-rate", "batch-size", "optimizer", "weight-decay", "momentum",
    "nesterov", "beta1", "beta2", "schedule", "warmup-steps", "total-steps", "min-lr", "schedule-preview",
    "clip-grad-norm", "grad-accumulation", "regularization", "regularization-rate", "seed", "dataset",
    "noise", "train-share", "regenerate", "csv-upload", "decision-boundary", "network-diagram", "link-mode",
    "output-layer", "loss-curves", "phase-timeline", "step-wall-ms", "flops", "grad-norm",
    "download-checkpoint", "restore-checkpoint", "verify-restore", "verify-result", "grad-norm-chart",
    "lr-chart", "step-phase", "current-phase", "phase-tensors", "phase-summary", "grad-norm-per-layer-chart",
    "checkpoint-every", "checkpoint-background", "checkpoint-status", "export-pytorch", "export-data",
    "lesson-no-zero-grad", "augmentation", "num-workers", "prefetch-factor", "lesson-augmentation",
    "loader-status", "loader-cores", "gpu-busy-share", "lesson-high-lr",
    "lesson-high-lr-clip", "lesson-high-lr-warmup", "lesson-lr-readout", "accumulation-k",
    "accumulation-check", "accumulation-result", "log-every", "logging-share", "copy-link",
    "download-metrics", "download-tensorboard", "download-trace", "model-kind", "gpt-blocks", "gpt-heads",
    "gpt-embed", "gpt-context", "gpt-qk-layernorm", "gpt-tie-embeddings", "z-loss", "text-upload", "text-preview",
    "sample-text", "sample-prompt", "sample-temperature", "attention-window", "tokens-per-second", "val-loss",
    "gpt-lessons",
];

/// Ids that carry a hidden layer's number N (`units-0`, …).
const LAYER_ID_PREFIXES: [&str; 5] = ["layer-", "units-", "units-plus-", "units-minus-", "activation-"];

/// Whether `id` is one of the page's known ids, per-layer ids included
/// (N below the page's limit of hidden layers).
pub fn is_page_id(id: &str) -> bool {
    PAGE_IDS.contains(&id)
        || LAYER_ID_PREFIXES.iter().any(|prefix| {
            id.strip_prefix(prefix)
                .and_then(|n| n.parse::<usize>().ok().filter(|n| n.to_string().len() == id.len() - prefix.len()))
                .is_some_and(|n| n < MAX_HIDDEN_LAYERS)
        })
}

/// What the page's link asks of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classroom {
    pub hide: HideRequest,
    pub lock: LockRequest,
    /// A parameter given more than once (`engine`, `backend`, `fused`):
    /// none of its values applies, and the notice says so.
    pub repeated: Vec<String>,
}

impl Classroom {
    /// From a query string (`location.search`).
    pub fn from_search(search: &str) -> Classroom {
        Classroom {
            hide: hide_request(search),
            lock: lock_request(search),
            repeated: stepscope_core::link::query_problems(search),
        }
    }

    /// The message for the user: what the link's parameters could not
    /// apply (`unknown`: ids no control has). None when all of it applied.
    pub fn notice(&self, unknown: &[String]) -> Option<String> {
        let mut parts: Vec<String> = self.hide.problems.clone();
        if !unknown.is_empty() {
            let names: Vec<String> = unknown.iter().map(|id| format!("`{id}`")).collect();
            let rest = if unknown.len() < self.hide.ids.len() { "; the others are hidden" } else { "" };
            parts.push(format!("hide=: no control is named {}{rest}.", names.join(", ")));
        }
        parts.extend(self.lock.problem.clone());
        parts.extend(self.repeated.iter().cloned());
        (!parts.is_empty()).then(|| format!("This link's settings: {}", parts.join(" ")))
    }
}

/// The style sheet that hides `ids`: each control, and the label or field
/// wrapper that holds it. The core allows only letters, digits, `-` and
/// `_` in an id, so each is written into its selector as it is.
pub fn hide_css(ids: &[String]) -> String {
    ids.iter()
        .filter(|id| stepscope_core::link::is_control_id(id))
        .map(|id| {
            let sel = format!("[data-testid=\"{id}\"]");
            format!("{sel}, label:has({sel}), .field:has({sel}) {{ display: none !important; }}\n")
        })
        .collect()
}

/// Refuses an edit from `old` to `new` that changes the network (hidden
/// layers, their units or activations) while the link locks it. The
/// inputs and the output layer follow the data, which stays editable.
pub fn check_lock(locked: bool, old: &Experiment, new: &Experiment) -> Result<(), String> {
    if locked && (hidden_layers(old) != hidden_layers(new) || old.model.gpt != new.model.gpt) {
        return Err("This link locks the network (lock=1): its layers, units and activations stay as they are. \
            Training, the data and the hyperparameters can still change."
            .into());
    }
    Ok(())
}

/// Refuses a checkpoint upload whose network is not the page's while the
/// link locks it. Only its header is read here (cheap); the whole file is
/// still checked on the engine's side, which names what is wrong with a
/// file that is not a checkpoint.
pub fn check_restore(locked: bool, current: &Experiment, checkpoint: &[u8]) -> Result<(), String> {
    match read_checkpoint_header(checkpoint) {
        Ok((saved, _)) if locked => check_lock(true, current, &saved).map_err(|_| {
            "This link locks the network (lock=1): a checkpoint of another network is not restored.".into()
        }),
        _ => Ok(()),
    }
}

/// Puts the hiding style sheet into the document's head, replacing one
/// put there before.
pub fn install_hide_style(css: &str) {
    let Some(document) = web_sys::window().and_then(|w| w.document()) else { return };
    let style = match document.get_element_by_id("stepscope-hide") {
        Some(style) => style,
        None => {
            let Ok(style) = document.create_element("style") else { return };
            style.set_id("stepscope-hide");
            let Some(head) = document.head() else { return };
            if head.append_child(&style).is_err() {
                return;
            }
            style
        }
    };
    style.set_text_content(Some(css));
}

/// The ids in `ids` that name no control: neither a known id of the page
/// nor an element on it now.
pub fn unknown_ids(ids: &[String]) -> Vec<String> {
    let document = web_sys::window().and_then(|w| w.document());
    ids.iter()
        .filter(|id| !is_page_id(id))
        .filter(|id| {
            let selector = format!("[data-testid=\"{id}\"]");
            document.as_ref().is_none_or(|d| d.query_selector(&selector).ok().flatten().is_none())
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::{add_layer, default_experiment, edited, set_lr, set_units};
    use stepscope_core::checkpoint::save_checkpoint;
    use stepscope_core::data::Dataset;
    use stepscope_core::engine::CpuEngine;

    #[test]
    fn known_ids_include_each_layers_controls() {
        for id in ["optimizer", "learning-rate", "units-0", "units-plus-15", "activation-3", "layer-1", "copy-link"] {
            assert!(is_page_id(id), "{id}");
        }
        for id in ["units-16", "units-", "units-01", "units-x", "optimiser", "layer-+1"] {
            assert!(!is_page_id(id), "{id}");
        }
    }

    #[test]
    fn the_notice_names_unknown_ids_and_the_cores_problems() {
        let c = Classroom::from_search("?hide=optimizer,nosuch,%3Cscript%3E&lock=yes");
        assert_eq!(c.hide.ids, ["optimizer", "nosuch"]);
        assert!(c.lock.locked);
        let notice = c.notice(&["nosuch".into()]).unwrap();
        assert!(notice.contains("no control is named `nosuch`; the others are hidden"), "{notice}");
        assert!(notice.contains("`<script>`") && notice.contains("lock=`yes`"), "{notice}");
        let fine = Classroom::from_search("?hide=optimizer&lock=1");
        assert_eq!(fine.notice(&[]), None);
        let all_unknown = Classroom::from_search("?hide=nosuch").notice(&["nosuch".into()]).unwrap();
        assert!(!all_unknown.contains("the others"), "{all_unknown}");
        // A parameter given twice is named, and none of its values applies.
        let twice = Classroom::from_search("?engine=cpu&engine=gpu").notice(&[]).unwrap();
        assert!(twice.contains("engine= appears 2 times in the link; none of them applies."), "{twice}");
    }

    #[test]
    fn the_style_hides_each_control_with_its_wrapper() {
        let css = hide_css(&["optimizer".into(), "learning-rate".into(), "bad\"id".into()]);
        assert_eq!(css.lines().count(), 2, "{css}");
        assert!(css.contains(
            "[data-testid=\"optimizer\"], label:has([data-testid=\"optimizer\"]), .field:has([data-testid=\"optimizer\"]) { display: none !important; }"
        ));
        assert!(!css.contains("bad"));
        assert_eq!(hide_css(&[]), "");
    }

    #[test]
    fn a_lock_refuses_network_edits_and_allows_the_rest() {
        let e = default_experiment();
        let wider = edited(&e, |x| set_units(x, 0, 20)).unwrap();
        let deeper = edited(&e, add_layer).unwrap();
        let mut tanh_to_relu = e.clone();
        tanh_to_relu.model.layers[1].activation = stepscope_core::experiment::Activation::Relu;
        for changed in [&wider, &deeper, &tanh_to_relu] {
            assert!(check_lock(true, &e, changed).unwrap_err().contains("lock=1"));
            assert!(check_lock(false, &e, changed).is_ok());
        }
        let faster = edited(&e, |x| set_lr(x, 0.1)).unwrap();
        assert!(check_lock(true, &e, &faster).is_ok());
        let wider_run = CpuEngine::new(&wider, Dataset::load(&wider, None).unwrap()).unwrap();
        let wider_file = save_checkpoint(&wider_run.state()).unwrap();
        let same_file =
            save_checkpoint(&CpuEngine::new(&faster, Dataset::load(&faster, None).unwrap()).unwrap().state()).unwrap();
        assert!(check_restore(true, &e, &wider_file).unwrap_err().contains("another network"));
        assert!(check_restore(false, &e, &wider_file).is_ok());
        assert!(check_restore(true, &e, &same_file).is_ok(), "the same network, other hyperparameters");
        assert!(check_restore(true, &e, b"not a checkpoint").is_ok(), "the engine's side names what is wrong");
        let mut more_inputs = e.clone();
        more_inputs.model.inputs = 3;
        assert!(check_lock(true, &e, &more_inputs).is_ok(), "the inputs follow the data");
    }
}
