//! A run's state, checked as a checkpoint or the page hands it over: sizes
//! against the model, ranges of the counters, the data position against
//! the training rows. (The experiment inside is checked by `validate`.)

use super::TrainState;
use crate::error::Result;
use crate::model::Layout;
use crate::validate::bad;

/// Largest step count a run may hold: a million steps a second for twelve
/// days, and far below where counters could overflow.
pub const MAX_STEP: u64 = 1 << 40;
/// Largest row counter a run may hold (rows served over all epochs).
pub const MAX_ROWS_CONSUMED: u64 = 1 << 60;
/// Most rows a restored run may replay to bring a lagging shuffle epoch up
/// to its row counter: each skipped epoch redraws a permutation.
pub const MAX_SHUFFLE_REPLAY_ROWS: u64 = 10_000_000;

/// A run's state, as a checkpoint or the page hands it over: its
/// experiment; parameter and optimizer buffers of the model's size, with
/// second moments >= 0 (finiteness is `finite`'s: an engine may be built
/// from a non-finite state, and names the layer and phase where it shows); a step and row counter in range; and, given
/// the training rows, a shuffle epoch consistent with the row counter
/// (`train_rows` is `None` where the data is not at hand, as when a file is
/// first read).
pub fn check_state(s: &TrainState, train_rows: Option<usize>) -> Result<()> {
    let e = &s.experiment;
    e.validate()?;
    let count = Layout::new(e).parameter_count;
    if s.params.len() != count {
        return bad(format!("the state holds {} parameters but the model needs {count}", s.params.len()));
    }
    if let (Some(vocabulary), Some(g)) = (&s.vocabulary, e.gpt()) {
        if vocabulary.len() != g.vocab_size {
            return bad(format!(
                "the vocabulary holds {} characters but model.vocab_size is {}",
                vocabulary.len(),
                g.vocab_size
            ));
        }
    }
    if s.vocabulary.is_some() && e.gpt().is_none() {
        return bad("a vocabulary belongs to a gpt model's run only".into());
    }
    let o = &s.optimizer;
    if o.step > MAX_STEP {
        return bad(format!("the step count {} is beyond the largest allowed ({MAX_STEP})", o.step));
    }
    let expected = crate::optim::OptimizerState::new(&e.optimizer, count);
    let names =
        |state: &crate::optim::OptimizerState| state.buffers().iter().map(|(n, b)| (*n, b.len())).collect::<Vec<_>>();
    if names(o) != names(&expected) {
        return bad(format!(
            "the optimizer state holds {:?} but {} keeps {:?}",
            names(o),
            e.optimizer.name(),
            names(&expected)
        ));
    }
    if let Some(i) = o.exp_avg_sq.iter().position(|&v| v < 0.0) {
        return bad(format!(
            "exp_avg_sq holds a negative value ({}) at index {i}: a mean of squared gradients is never negative",
            o.exp_avg_sq[i]
        ));
    }
    let position = &s.data_position;
    let k = position.rows_consumed;
    if k > MAX_ROWS_CONSUMED {
        return bad(format!("data position: rows_consumed {k} is beyond the largest allowed ({MAX_ROWS_CONSUMED})"));
    }
    if position.epoch > k {
        return bad(format!("data position: epoch {} is past rows_consumed {k}", position.epoch));
    }
    let Some(rows) = train_rows else { return Ok(()) };
    if rows == 0 {
        return bad("the training data has no rows".into());
    }
    let current = k / rows as u64;
    if position.epoch > current {
        return bad(format!(
            "data position: epoch {} is past the epoch of rows_consumed {k} over {rows} training rows ({current})",
            position.epoch
        ));
    }
    let replay = (current - position.epoch).saturating_mul(rows as u64);
    if e.data.shuffle && replay > MAX_SHUFFLE_REPLAY_ROWS {
        return bad(format!(
            "data position: epoch {} lags rows_consumed {k} by {} epochs of {rows} rows; restoring would replay the \
             shuffle over {replay} rows (at most {MAX_SHUFFLE_REPLAY_ROWS})",
            position.epoch,
            current - position.epoch
        ));
    }
    Ok(())
}

/// Every parameter and optimizer value finite: what a checkpoint holds.
/// Every parameter and optimizer buffer finite (the message names the
/// buffer and the index).
pub fn check_finite(s: &TrainState) -> Result<()> {
    for (name, values) in [("parameters", &s.params)].into_iter().chain(s.optimizer.buffers()) {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return bad(format!("{name} hold a non-finite value ({}) at index {i}", values[i]));
        }
    }
    Ok(())
}
