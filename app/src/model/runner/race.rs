//! The runner's side of a race (`model::race`): while one lasts, its lanes
//! train in the frame instead of the run, which waits as it was; ending the
//! race (by the user, or when every lane reached its steps) reports the
//! lanes' last figures once and the run goes on.

use stepscope_core::{Error, Experiment};

use super::{FrameReport, Runner};
use crate::model::race::{RaceLanes, RaceReport, RaceSpec};

impl Runner {
    /// Starts a race of `spec` on the current experiment and engine (a
    /// race under way is replaced). Refused whole, the run untouched.
    pub(super) async fn start_race(&mut self, spec: RaceSpec) -> Result<(), Error> {
        let gpu = self.trainer.gpu_context().cloned();
        let lanes = RaceLanes::new(spec, &self.experiment().clone(), self.data(), gpu, self.fused_allowed)
            .await
            .map_err(|err| err.context("The race did not start"))?;
        self.race = Some(lanes);
        self.race_final = None;
        Ok(())
    }

    /// Ends the race under way, if any: its final report goes out with the
    /// frame.
    pub(super) async fn end_race(&mut self) {
        if let Some(mut race) = self.race.take() {
            self.race_final = Some(race.final_report().await);
        }
    }

    /// A fresh run of `e` (Reset, new data); a race under way starts over
    /// with lanes of the new experiment (Reset acts on the race). If they
    /// cannot be built (a batch larger than new data allows), the race
    /// ends with the reason.
    pub(super) async fn restart_with_race(&mut self, e: &Experiment, csv: Option<super::CsvData>) -> Result<(), Error> {
        let race = self.race.take();
        if let Err(err) = self.restart(e, csv) {
            self.race = race;
            return Err(err);
        }
        let Some(old) = race else { return Ok(()) };
        let spec = old.spec().clone();
        if let Err(err) = self.start_race(spec.clone()).await {
            self.race_final = Some(RaceReport {
                spec,
                lanes: Vec::new(),
                on_gpu: old.on_gpu(),
                started: false,
                ended: true,
                error: Some(err.to_string()),
            });
        }
        Ok(())
    }

    /// Whether a race is under way.
    pub fn racing(&self) -> bool {
        self.race.is_some()
    }

    /// Trains the race for one frame; a race whose lanes are all done, or
    /// that failed, ends here.
    pub(super) async fn race_frame(&mut self, single: bool, budget_ms: f64, report: &mut FrameReport) {
        let Some(race) = self.race.as_mut() else { return };
        match race.train_frame(single, budget_ms, self.yield_after_ms).await {
            Ok(waited) => {
                report.gpu_wait_ms += waited;
                if race.finished() {
                    self.end_race().await;
                }
            }
            Err(err) => {
                let mut last = race.report(true);
                last.error = Some(err.context("The race stopped").to_string());
                self.race = None;
                self.race_final = Some(last);
            }
        }
    }

    /// What the page draws of the race after this frame.
    pub(super) fn race_report(&mut self) -> Option<RaceReport> {
        self.race_final.take().or_else(|| self.race.as_mut().map(|r| r.report(false)))
    }
}

#[cfg(test)]
mod tests {
    use stepscope_core::trainer::block_on;
    use stepscope_core::StepMetrics;

    use super::*;
    use crate::model::edit::default_experiment;
    use crate::model::race::LaneReport;
    use crate::model::runner::{Command, FramePlan};

    /// A lane's reported steps: (step, loss, gradient norm).
    type Steps = Vec<(u64, f32, f32)>;

    fn plan(commands: Vec<Command>, running: bool) -> FramePlan {
        FramePlan { commands, running, budget_ms: 3.0, ..FramePlan::default() }
    }

    /// Runs frames of a race until it ends: every lane's reported steps
    /// (step, loss, gradient norm) and its last report.
    fn race(runner: &mut Runner, spec: RaceSpec) -> (Vec<Steps>, Vec<LaneReport>) {
        let mut commands = vec![Command::StartRace(spec)];
        let mut points: Vec<Steps> = Vec::new();
        for _ in 0..10_000 {
            let report = block_on(runner.frame(plan(std::mem::take(&mut commands), true)));
            assert!(report.outcomes.iter().all(Result::is_ok), "{:?}", report.outcomes);
            assert!(report.trained.is_none(), "the run waits while the race trains");
            let race = report.race.expect("a race report every frame");
            assert_eq!(race.error, None);
            let steps: Vec<u64> = race.lanes.iter().map(|l| l.step).collect();
            let (least, most) = (steps.iter().min().unwrap(), steps.iter().max().unwrap());
            assert!(most - least <= 1, "the lanes stay level: {steps:?}");
            points.resize(race.lanes.len(), Vec::new());
            for (lane, seen) in race.lanes.iter().zip(&mut points) {
                seen.extend(&lane.points);
            }
            if race.ended {
                return (points, race.lanes);
            }
        }
        panic!("the race never ended");
    }

    /// A lone run of `e` through the runner, one step a frame (as Step).
    fn lone(e: &Experiment, steps: usize) -> Vec<StepMetrics> {
        let mut runner = Runner::new(e, None, None).unwrap();
        (0..steps)
            .flat_map(|_| match block_on(runner.frame(plan(vec![Command::StepOnce], false))).trained {
                Some(Ok(metrics)) => metrics,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    /// Each lane of a race equals its experiment run alone, bit for bit on
    /// the CPU engine: every step's loss and gradient norm, the last one
    /// included; the run itself does not move meanwhile.
    #[test]
    fn a_race_lane_is_its_lone_run_bit_for_bit() {
        let base = default_experiment();
        for (setting, values) in [("optimizer", "sgd, adamw"), ("batch", "8, 64")] {
            let spec = RaceSpec::parse(setting, values, "40").unwrap();
            let variants = spec.variants(&base).unwrap();
            let mut runner = Runner::new(&base, None, None).unwrap();
            let (points, lanes) = race(&mut runner, spec);
            assert_eq!(runner.step_count(), 0);
            assert!(!runner.racing(), "a finished race ends by itself");
            assert_eq!(lanes.len(), 2);
            for ((lane, seen), (label, e)) in lanes.iter().zip(&points).zip(&variants) {
                assert_eq!((&lane.label, &lane.experiment, lane.step, lane.done), (label, e, 40, true));
                let alone = lone(e, 40);
                assert!(seen.len() >= 2 && seen.last().unwrap().0 == 39, "{label}: {seen:?}");
                for &(step, loss, norm) in seen {
                    let m = &alone[step as usize];
                    assert_eq!(
                        (m.step, m.loss.to_bits(), m.grad_norm.to_bits()),
                        (step, loss.to_bits(), norm.to_bits())
                    );
                }
                assert_eq!(lane.last_loss.map(f32::to_bits), Some(alone[39].loss.to_bits()), "{label}");
            }
            assert_ne!(lanes[0].last_loss, lanes[1].last_loss, "the lanes differ in {setting}");
        }
    }

    /// A transformer's races of q/k LayerNorm off against on, a tied head
    /// against its own and two z-losses: each lane is its lone run bit for
    /// bit, one of another shape from its own initial weights (two more
    /// tensors a block; the head's own).
    #[test]
    fn a_transformer_races_its_switches_and_z_loss() {
        let mut base = crate::model::edit::default_gpt_experiment();
        let g = base.model.gpt.as_mut().unwrap();
        (g.blocks, g.embed, g.context) = (1, 16, 8);
        base.batch_size = 2;
        base.fit_shards();
        for (setting, values) in [("qk_layernorm", "off, on"), ("tie_embeddings", "on, off"), ("z_loss", "0, 0.001")] {
            let spec = RaceSpec::parse(setting, values, "6").unwrap();
            let variants = spec.variants(&base).unwrap();
            assert_eq!(variants[0].1, base);
            let other = &variants[1].1;
            let g = other.gpt().unwrap();
            assert!(g.qk_layernorm || !g.tie_embeddings || other.z_loss == 0.001, "{setting}");
            let mut runner = Runner::new(&base, None, None).unwrap();
            let (_, lanes) = race(&mut runner, spec);
            for (lane, (label, e)) in lanes.iter().zip(&variants) {
                let alone = lone(e, 6);
                assert_eq!(lane.last_loss.map(f32::to_bits), Some(alone[5].loss.to_bits()), "{label}");
            }
            assert_ne!(lanes[0].last_loss, lanes[1].last_loss, "{setting}");
            let refused = RaceSpec::parse(setting, "0, maybe", "").unwrap().variants(&base).unwrap_err();
            assert!(refused.contains("`maybe`") || refused.contains("`0`"), "{refused}");
        }
    }

    /// Reset acts on the race: its lanes start over; ending it hands the
    /// frame back to the run.
    #[test]
    fn reset_restarts_the_race_and_ending_it_returns_to_the_run() {
        let base = default_experiment();
        let mut runner = Runner::new(&base, None, None).unwrap();
        let spec = RaceSpec::parse("lr", "0.01, 0.05", "").unwrap();
        let first = block_on(runner.frame(plan(vec![Command::StartRace(spec)], true))).race.unwrap();
        assert!(first.started && first.lanes.iter().all(|l| l.step > 0));
        let reset = block_on(runner.frame(plan(vec![Command::Reset(base.clone())], false))).race.unwrap();
        assert!(reset.started && reset.lanes.iter().all(|l| l.step == 0), "{reset:?}");
        let ended = block_on(runner.frame(plan(vec![Command::EndRace], false))).race.unwrap();
        assert!(ended.ended && !runner.racing());
        let trained = block_on(runner.frame(plan(Vec::new(), true)));
        assert!(trained.race.is_none() && matches!(trained.trained, Some(Ok(ref m)) if !m.is_empty()));
        let refused =
            block_on(runner.frame(plan(vec![Command::StartRace(RaceSpec::parse("lr", "1", "").unwrap())], false)));
        assert!(
            matches!(&refused.outcomes[0], Err(e) if e.to_string().contains("2 to 4 values")),
            "{:?}",
            refused.outcomes
        );
        assert!(!runner.racing());
    }
}
