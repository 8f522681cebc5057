//! The `data.augment` part of an experiment: what changes each training
//! image as it is served (`data::augment` does it).

use serde::{Deserialize, Serialize};

/// What the augmentation does, as the experiment's `data.augment` holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Augment {
    /// Largest translation, in whole pixels each way (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shift: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Simard's elastic distortion: `alpha` scales the smoothed displacement
/// (pixels), `sigma` is the Gaussian's standard deviation (pixels).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Elastic {
    pub alpha: f64,
    pub sigma: f64,
}

/// Limits of the format (a Gaussian wider than this costs more than any
/// image it could move is worth).
pub const MAX_ELASTIC_ALPHA: f64 = 100.0;
pub const MAX_ELASTIC_SIGMA: f64 = 10.0;
pub const MIN_ELASTIC_SIGMA: f64 = 0.5;

impl Augment {
    /// Whether it changes anything.
    pub fn is_active(&self) -> bool {
        self.shift > 0 || self.elastic.is_some_and(|e| e.alpha > 0.0)
    }

    /// The reasons it cannot apply to images of `side` pixels, in words.
    pub fn check(&self, side: usize) -> Result<(), String> {
        if self.shift > side / 2 {
            return Err(format!(
                "data.augment.shift must be at most half the image's side ({} pixels), got {}",
                side / 2,
                self.shift
            ));
        }
        if let Some(e) = self.elastic {
            if !e.alpha.is_finite() || !(0.0..=MAX_ELASTIC_ALPHA).contains(&e.alpha) {
                return Err(format!("data.augment.elastic.alpha must be in [0, {MAX_ELASTIC_ALPHA}], got {}", e.alpha));
            }
            if !e.sigma.is_finite() || !(MIN_ELASTIC_SIGMA..=MAX_ELASTIC_SIGMA).contains(&e.sigma) {
                return Err(format!(
                    "data.augment.elastic.sigma must be in [{MIN_ELASTIC_SIGMA}, {MAX_ELASTIC_SIGMA}], got {}",
                    e.sigma
                ));
            }
        }
        Ok(())
    }

    /// In words, for the page and the CLI ("shift ±2 px, elastic α 34 σ 4").
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.shift > 0 {
            parts.push(format!("shift ±{} px", self.shift));
        }
        if let Some(e) = self.elastic.filter(|e| e.alpha > 0.0) {
            parts.push(format!("elastic α {} σ {}", e.alpha, e.sigma));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}
