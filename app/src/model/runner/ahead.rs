//! Training while the page draws. The page's loop asks for a frame, draws
//! its report and waits for the next animation frame; a worker that only
//! trained inside requests would sit idle for that part of every frame
//! (about 40 % of it on MNIST's conv net, measured). So, in the worker
//! only, a frame that trained short steps lets the runner go on stepping,
//! one whole step at a time, until the next request arrives or `AHEAD_MS`
//! have passed (a hidden tab, whose animation frames stop,
//! does not train on unseen). The next frame reports those steps first,
//! before its own: the page sees every step, in order, with its own
//! phases. Steps trained ahead of a command that replaces the run (a
//! reset, a restore, a rollback, another upload) are dropped with the run
//! they belonged to.
//!
//! Not ahead: on the GPU (its submits are awaited anyway), in an engine
//! race, in the lessons that log every N steps, while an upload is read,
//! after a loss spike, where an automatic checkpoint is due (the next
//! frame takes it first), and where steps are long (over `AHEAD_STEP_MS`:
//! a transformer's, taken in parts by the frames; a step ahead is always
//! whole, so the run is never left part-way through one by a pause, and a
//! long one would hold up the page's next request).

use stepscope_core::trainer::Backend;
use stepscope_core::{Error, StepMetrics};
use web_time::Instant;

use super::{Command, Runner};
use crate::model::clock::ms_since;

/// The longest the worker trains past the page's last request.
pub const AHEAD_MS: f64 = 60.0;
/// The longest mean step of a frame after which steps are trained ahead.
pub const AHEAD_STEP_MS: f64 = 30.0;

/// Steps trained since the last frame's report.
#[derive(Default)]
pub(super) struct Ahead {
    steps: Vec<StepMetrics>,
    error: Option<Error>,
    spent_ms: f64,
    /// A request other than a frame came meanwhile.
    stopped: bool,
}

/// What a frame takes over from the time between requests.
pub(super) struct TakenAhead {
    pub result: Result<Vec<StepMetrics>, Error>,
    pub ms: f64,
}

impl Command {
    /// Whether the command ends the run that is training (its steps
    /// trained ahead then belong to no run the page shows).
    fn replaces_run(&self) -> bool {
        matches!(
            self,
            Command::Reset(_)
                | Command::RestoreCheckpoint(_)
                | Command::Rollback(_)
                | Command::ReadCsv(..)
                | Command::ReadText(..)
        )
    }
}

impl Runner {
    /// Lets the runner train between requests after this frame (`frame`
    /// calls it at its end with whether the frame may be followed so, and
    /// its steps' mean wall time).
    pub(super) fn allow_ahead(&mut self, allowed: bool, mean_step_ms: f64) {
        let allowed = allowed
            && mean_step_ms <= AHEAD_STEP_MS
            && !self.trainer.mid_step()
            && self.trainer.backend() == Backend::Cpu
            && !self.racing()
            && self.steps_per_log.is_none()
            && self.csv_job.is_none()
            && self.csv_upload.is_none();
        self.ahead = allowed.then(Ahead::default);
    }

    /// One step (or part of a long one) ahead of the next request, when
    /// allowed: false when there is nothing to do (the caller then waits
    /// for the next request).
    pub async fn train_ahead(&mut self) -> bool {
        let due = self.checkpoint_due(self.checkpoint_every);
        match &self.ahead {
            Some(a) if a.error.is_none() && !a.stopped && a.spent_ms < AHEAD_MS && !due => {}
            _ => return false,
        }
        let started = Instant::now();
        // One whole step (`single`).
        let (result, _) = self.train_frame(true, 0.0).await;
        self.views_dirty = true;
        let Some(ahead) = self.ahead.as_mut() else { return false };
        let took = ms_since(started);
        ahead.spent_ms += took;
        if took > 2.0 * AHEAD_STEP_MS {
            // Steps grew long (a checkpoint, a loaded machine): no more.
            ahead.stopped = true;
        }
        match result {
            Ok(mut steps) => ahead.steps.append(&mut steps),
            Err(err) => ahead.error = Some(err),
        }
        true
    }

    /// No more steps ahead until the next frame (a request other than a
    /// frame came: an engine switch, a race); those taken are kept for it.
    pub fn stop_ahead(&mut self) {
        if let Some(ahead) = self.ahead.as_mut() {
            ahead.stopped = true;
        }
    }

    /// The steps trained since the last report, for a frame with these
    /// commands: none when a command replaces the run.
    pub(super) fn take_ahead(&mut self, commands: &[Command]) -> Option<TakenAhead> {
        let ahead = self.ahead.take()?;
        if commands.iter().any(Command::replaces_run) || (ahead.steps.is_empty() && ahead.error.is_none()) {
            return None;
        }
        let result = match ahead.error {
            Some(err) => Err(err),
            None => Ok(ahead.steps),
        };
        Some(TakenAhead { result, ms: ahead.spent_ms })
    }
}

#[cfg(test)]
mod tests {
    use stepscope_core::trainer::block_on;

    use super::*;
    use crate::model::edit::default_experiment;
    use crate::model::runner::FramePlan;

    fn plan(commands: Vec<Command>, running: bool) -> FramePlan {
        FramePlan { commands, running, budget_ms: 0.0, ..FramePlan::default() }
    }

    fn steps(trained: Option<Result<Vec<StepMetrics>, Error>>) -> Vec<u64> {
        match trained {
            Some(Ok(metrics)) => metrics.iter().map(|m| m.step).collect(),
            other => panic!("{other:?}"),
        }
    }

    /// Steps trained between requests lead the next report, in order, with
    /// the bits of the same run trained only inside frames; a pause
    /// reports them and stops; nothing is trained ahead of a paused run.
    #[test]
    fn steps_ahead_lead_the_next_report_and_match_a_run_without_them() {
        let e = default_experiment();
        let mut runner = Runner::new(&e, None, None).unwrap();
        let mut seen = steps(block_on(runner.frame(plan(vec![], true))).trained);
        let mut ahead = 0;
        while block_on(runner.train_ahead()) {
            ahead += 1;
        }
        assert!(ahead >= 1, "a frame that trained lets the runner go on");
        let report = block_on(runner.frame(plan(vec![], false)));
        assert!(report.ahead_ms > 0.0);
        let reported = steps(report.trained);
        assert_eq!(reported.len(), ahead, "the pause reports the steps trained ahead");
        seen.extend(reported);
        assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>(), "every step once, in order");
        assert!(!block_on(runner.train_ahead()), "a paused run is not trained ahead");
        assert_eq!(runner.step_count(), seen.len() as u64);

        // The same number of steps inside frames only: the same bits.
        let mut alone = Runner::new(&e, None, None).unwrap();
        let mut losses = Vec::new();
        while losses.len() < seen.len() {
            match block_on(alone.frame(plan(vec![Command::StepOnce], false))).trained {
                Some(Ok(m)) => losses.extend(m.iter().map(|m| (m.loss, m.grad_norm))),
                other => panic!("{other:?}"),
            }
        }
        let mut again = Runner::new(&e, None, None).unwrap();
        let mut with_ahead = Vec::new();
        let record = |trained: Option<Result<Vec<StepMetrics>, Error>>, to: &mut Vec<(f32, f32)>| {
            if let Some(Ok(m)) = trained {
                to.extend(m.iter().map(|m| (m.loss, m.grad_norm)));
            }
        };
        while with_ahead.len() < losses.len() {
            record(block_on(again.frame(plan(vec![], true))).trained, &mut with_ahead);
            block_on(again.train_ahead());
            block_on(again.train_ahead());
        }
        record(block_on(again.frame(plan(vec![], false))).trained, &mut with_ahead);
        assert_eq!(again.step_count(), with_ahead.len() as u64);
        assert_eq!(with_ahead[..losses.len()], losses[..]);
    }

    /// A reset drops the steps trained ahead with the run they belonged
    /// to; an edit keeps them; a request other than a frame stops the
    /// training ahead and keeps what was trained.
    #[test]
    fn a_reset_drops_the_steps_ahead_and_an_edit_keeps_them() {
        let e = default_experiment();
        let mut runner = Runner::new(&e, None, None).unwrap();
        block_on(runner.frame(plan(vec![], true)));
        assert!(block_on(runner.train_ahead()));
        let report = block_on(runner.frame(plan(vec![Command::Reset(e.clone())], false)));
        assert_eq!(report.trained.as_ref().map(|t| t.is_ok()), None, "nothing of the old run: {:?}", report.trained);
        assert_eq!(runner.step_count(), 0);

        let first = steps(block_on(runner.frame(plan(vec![], true))).trained);
        assert!(block_on(runner.train_ahead()));
        runner.stop_ahead();
        assert!(!block_on(runner.train_ahead()), "stopped until the next frame");
        let mut edited = e.clone();
        edited.clip_grad_norm = Some(0.5);
        let next = steps(block_on(runner.frame(plan(vec![Command::Apply(edited)], true))).trained);
        assert_eq!(next[0], first.last().unwrap() + 1, "the step ahead leads the edited frame's steps");
        assert_eq!(next, (next[0]..next[0] + next.len() as u64).collect::<Vec<_>>());
    }
}
