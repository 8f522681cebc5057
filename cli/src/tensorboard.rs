//! `train --tensorboard DIR`: the run as a TensorBoard event file
//! (`stepscope_core::export::tensorboard`), written as the run goes, a
//! flushed record per step, so TensorBoard follows a live run. Tags are
//! grouped as TensorBoard users expect; steps are the metrics log's.

use std::time::{SystemTime, UNIX_EPOCH};

use stepscope_core::export::tensorboard::{file_version_record, histogram_record, scalars_record, step_scalars};
use stepscope_core::model::Layout;
use stepscope_core::StepMetrics;

use crate::files::LogFile;
use crate::Failure;

pub struct TensorBoard {
    file: LogFile,
    pub path: String,
    pub histogram_every: u64,
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn host() -> String {
    let name =
        std::fs::read_to_string("/etc/hostname").ok().or_else(|| std::env::var("HOSTNAME").ok()).unwrap_or_default();
    let name: String = name.trim().chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    if name.is_empty() {
        "stepscope".into()
    } else {
        name
    }
}

impl TensorBoard {
    /// A new event file in `dir` (created if missing), named as
    /// TensorBoard's writers name theirs (the name must hold `tfevents`);
    /// a file of that name already there is left alone and refused.
    pub fn create(dir: &str, histogram_every: u64) -> Result<TensorBoard, Failure> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Failure::usage(format!("--tensorboard: cannot create the folder `{dir}`: {e}")))?;
        let wall = now();
        let path = std::path::Path::new(dir)
            .join(format!("events.out.tfevents.{}.{}.{}.0", wall as u64, host(), std::process::id()))
            .to_string_lossy()
            .into_owned();
        let mut file = LogFile::create_new(&path)?;
        file.write_bytes(&file_version_record(wall))?;
        Ok(TensorBoard { file, path, histogram_every })
    }

    /// A step's scalars: the loss, the gradient norm (and whether it was
    /// clipped), the learning rate, each phase's milliseconds and the
    /// run's steps per second so far.
    /// A step's scalars; a transformer's add `speed/tokens_per_second`
    /// (`tokens_per_second`, the metrics log's figure).
    pub fn step(
        &mut self,
        m: &StepMetrics,
        steps_per_second: f64,
        tokens_per_second: Option<f64>,
    ) -> Result<(), Failure> {
        let mut values = step_scalars(m);
        values.extend([
            ("phase/checkpoint_ms", m.phases.checkpoint_ms as f32),
            ("phase/logging_ms", m.phases.logging_ms as f32),
            ("speed/steps_per_second", steps_per_second as f32),
        ]);
        if let Some(t) = tokens_per_second {
            values.push(("speed/tokens_per_second", t as f32));
        }
        self.file.write_bytes(&scalars_record(now(), m.step, &values))
    }

    /// An evaluation of the `split` rows at `step`.
    pub fn evaluation(&mut self, step: u64, split: &str, loss: f32, accuracy: Option<f32>) -> Result<(), Failure> {
        let (loss_tag, accuracy_tag) = (format!("loss/{split}"), format!("accuracy/{split}"));
        let mut values = vec![(loss_tag.as_str(), loss)];
        if let Some(a) = accuracy {
            values.push((accuracy_tag.as_str(), a));
        }
        self.file.write_bytes(&scalars_record(now(), step, &values))
    }

    /// Whether step `step` (0-based) of a run ending at `last` gets
    /// histograms.
    pub fn histograms_due(&self, step: u64, last: u64) -> bool {
        (step + 1).is_multiple_of(self.histogram_every) || step == last
    }

    /// Histograms of each tensor's weights and gradients at `step`.
    pub fn histograms(&mut self, step: u64, layout: &Layout, params: &[f32], grads: &[f32]) -> Result<(), Failure> {
        let wall = now();
        for t in layout.tensors() {
            let range = t.offset..t.offset + t.len;
            self.file.write_bytes(&histogram_record(
                wall,
                step,
                &format!("weights/{}", t.name),
                &params[range.clone()],
            ))?;
            self.file.write_bytes(&histogram_record(wall, step, &format!("gradients/{}", t.name), &grads[range]))?;
        }
        Ok(())
    }

    pub fn finish(self) -> Result<(), Failure> {
        self.file.finish()
    }
}
