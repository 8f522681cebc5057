//! "Verify restore": the restore nobody tested is the one that fails, so
//! test it. A checkpoint is restored into a fresh engine, its parameters
//! and optimizer state are compared bit for bit with the run it came from,
//! and both take the same next steps, which must give the same losses.

use super::{load_checkpoint, save_checkpoint};
use crate::data::Dataset;
use crate::engine::{CpuEngine, TrainState};
use crate::error::Result;

/// What verification found.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    pub bytes: usize,
    pub step: u64,
    /// Parameters equal bit for bit.
    pub params_equal: bool,
    /// Every optimizer buffer and the step equal bit for bit.
    pub optimizer_equal: bool,
    /// Data position and RNG equal.
    pub data_position_equal: bool,
    /// Losses of the next steps: (from the original state, from the restore).
    pub next_losses: Vec<(f32, f32)>,
}

impl VerifyReport {
    pub fn passed(&self) -> bool {
        self.params_equal
            && self.optimizer_equal
            && self.data_position_equal
            && self.next_losses.iter().all(|(a, b)| a.to_bits() == b.to_bits())
    }

    pub fn summary(&self) -> String {
        let losses = self.next_losses.iter().all(|(a, b)| a.to_bits() == b.to_bits());
        format!(
            "{}: checkpoint of step {} ({} bytes) restored into a fresh engine; parameters {}, optimizer state {}, data position {}, next {} losses {}",
            if self.passed() { "Restore verified" } else { "Restore FAILED" },
            self.step,
            self.bytes,
            if self.params_equal { "identical" } else { "DIFFER" },
            if self.optimizer_equal { "identical" } else { "DIFFERS" },
            if self.data_position_equal { "identical" } else { "DIFFERS" },
            self.next_losses.len(),
            if losses { "identical" } else { "DIFFER" },
        )
    }
}

/// Saves `state`, restores the bytes into a fresh CPU engine, and compares:
/// state fields bit for bit, then `next_steps` steps from each.
pub fn verify_restore(state: &TrainState, data: &Dataset, next_steps: usize) -> Result<VerifyReport> {
    let bytes = save_checkpoint(state)?;
    let restored = load_checkpoint(&bytes)?;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let params_equal = bits(&restored.params) == bits(&state.params);
    let o = (&restored.optimizer, &state.optimizer);
    let optimizer_equal = o.0.step == o.1.step
        && bits(&o.0.exp_avg) == bits(&o.1.exp_avg)
        && bits(&o.0.exp_avg_sq) == bits(&o.1.exp_avg_sq)
        && bits(&o.0.momentum_buffer) == bits(&o.1.momentum_buffer);
    let data_position_equal = restored.data_position == state.data_position;
    let mut original = CpuEngine::from_state(state.clone(), data.clone())?;
    let mut copy = CpuEngine::from_state(restored, data.clone())?;
    let mut next_losses = Vec::with_capacity(next_steps);
    for _ in 0..next_steps {
        next_losses.push((original.step()?.loss, copy.step()?.loss));
    }
    Ok(VerifyReport {
        bytes: bytes.len(),
        step: state.step(),
        params_equal,
        optimizer_equal,
        data_position_equal,
        next_losses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Experiment;

    #[test]
    fn a_run_verifies_exactly() {
        let e = Experiment::from_json(
            r#"{"seed": 2, "model": {"inputs": 2, "layers": [{"units": 5, "activation": "tanh"}, {"units": 1, "activation": "linear"}]},
                "loss": "bce_with_logits", "optimizer": {"kind": "adam", "lr": 0.01}, "batch_size": 8,
                "data": {"source": "circle", "samples": 60}}"#,
        )
        .unwrap();
        let data = Dataset::load(&e, None).unwrap();
        let mut engine = CpuEngine::new(&e, data.clone()).unwrap();
        for _ in 0..7 {
            engine.step().unwrap();
        }
        let report = verify_restore(&engine.state(), &data, 5).unwrap();
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.next_losses.len(), 5);
        assert!(report.summary().starts_with("Restore verified"));
        // Any difference fails the report and is named.
        let mut broken = report.clone();
        broken.next_losses[3].1 = f32::from_bits(broken.next_losses[3].1.to_bits() ^ 1);
        assert!(!broken.passed());
        assert!(broken.summary().contains("losses DIFFER"), "{}", broken.summary());
    }
}
