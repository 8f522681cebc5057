//! A conv net's feature maps and filters between the views. The views
//! evaluate the whole train and test sets, so on MNIST they come every
//! few seconds (at most a fifth of the engine's time, `views_due`); the
//! maps and filters of one test image cost one image's forward pass, so
//! they are made again every `MAPS_EVERY_MS` while the run trains, and at
//! once when another test image is asked for (`Command::MapsImage`). A
//! finished set of views carries the maps of the step it is reported at,
//! not of the older step its evaluations began at, so the maps never go
//! back in time.

use stepscope_core::experiment::LayerKind;
use stepscope_core::model::Layout;
use web_time::Instant;

use super::Runner;
use crate::model::clock::ms_since;
use crate::model::views::{conv_views, ConvViews, Snapshot};

/// The maps and filters are made again this often while the run trains.
pub const MAPS_EVERY_MS: f64 = 250.0;

/// When and at which step the maps were last made, and whether they are
/// wanted at once.
#[derive(Default)]
pub(super) struct LiveMaps {
    at: Option<Instant>,
    step: Option<u64>,
    forced: bool,
}

impl LiveMaps {
    /// Another test image was asked for: the next frame makes its maps.
    pub(super) fn force(&mut self) {
        self.forced = true;
    }

    fn due(&self, step: u64) -> bool {
        self.forced || (self.step != Some(step) && self.at.is_none_or(|t| ms_since(t) >= MAPS_EVERY_MS))
    }
}

impl Runner {
    /// The maps and filters at the run's step, with that step, where due
    /// (None for a network without conv or pool layers).
    pub(super) async fn live_maps(&mut self) -> Option<(u64, ConvViews)> {
        let step = self.step_count();
        if !self.maps.due(step) {
            return None;
        }
        self.make_maps(step).await
    }

    /// A finished set of views gets the maps of the run's step.
    pub(super) async fn refresh_maps_in(&mut self, snap: &mut std::sync::Arc<Snapshot>) {
        let step = self.step_count();
        let Some((_, conv)) = self.make_maps(step).await else { return };
        if let Some(images) = std::sync::Arc::make_mut(snap).images.as_mut() {
            images.conv = Some(conv);
        }
    }

    async fn make_maps(&mut self, step: u64) -> Option<(u64, ConvViews)> {
        // Asked every frame: a network without conv or pool layers (or a
        // transformer) answers before anything is cloned or laid out.
        if self.experiment().gpt().is_some()
            || self.experiment().model.layers.iter().all(|l| l.kind == LayerKind::Dense)
        {
            return None;
        }
        let e = self.experiment().clone();
        let layout = Layout::new(&e);
        let row = self.maps_row;
        let made = self
            .trainer
            .with_tensors_and_data(|t, data| {
                let test = &data.test;
                conv_views(&e, &layout, t[0], Some(t[1]), test, row.min(test.rows().saturating_sub(1)))
            })
            .await;
        self.maps = LiveMaps { at: Some(Instant::now()), step: Some(step), forced: false };
        made.ok().flatten().map(|conv| (step, conv))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Command, FramePlan, FrameReport, Runner};
    use crate::model::edit::{conv_preset, default_experiment};
    use stepscope_core::experiment::DataSource;
    use stepscope_core::trainer::block_on;

    fn frame(runner: &mut Runner, commands: Vec<Command>, running: bool) -> FrameReport {
        let plan = FramePlan { commands, running, budget_ms: 5.0, views_budget_ms: 0.5, ..FramePlan::default() };
        block_on(runner.frame(plan))
    }

    /// A conv net's maps come between the views, from the step they are
    /// reported at; a finished set of views carries the maps of its
    /// report's step; another test image's maps come in the next frame,
    /// training or not.
    #[test]
    fn a_conv_nets_maps_come_between_the_views() {
        let mut e = default_experiment();
        e.data.source = DataSource::Digits;
        e.fit_to_data(None);
        conv_preset(&mut e).unwrap();
        let mut runner = Runner::new(&e, None, None).unwrap();
        let (mut maps, mut views) = (0, 0);
        for _ in 0..400 {
            let report = frame(&mut runner, vec![], true);
            let step = runner.step_count();
            if let Some((at, conv)) = &report.maps {
                assert_eq!(*at, step, "the maps are of the step the frame ended at");
                assert!(!conv.layers.is_empty());
                maps += 1;
            }
            if let Some(Ok(snap)) = &report.views {
                assert!(report.maps.is_none(), "the views carry the maps themselves");
                assert!(snap.images.as_ref().unwrap().conv.is_some());
                views += 1;
            }
            if maps >= 2 && views >= 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(maps >= 2 && views >= 1, "maps {maps}, views {views}");
        // Paused: another image's maps in the next frame.
        let report = frame(&mut runner, vec![Command::MapsImage(7)], false);
        let (_, conv) = report.maps.expect("the asked-for image's maps");
        assert_eq!(conv.row, 7);
        // …and not again until the step changes.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(frame(&mut runner, vec![], false).maps.is_none());
    }
}
