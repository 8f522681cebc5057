//! The image a training row holds: a built-in source's (the digits, MNIST),
//! or, for a CSV, the shape its experiment gives it (`model.input_shape`,
//! C × H × W over the row's C·H·W input columns, channel by channel, row by
//! row). Conv and pool layers read it, augmentation changes it, the page
//! draws it.

use super::{DataSource, Experiment};

/// The most pixels a side of a CSV's image may have (`image_shape_for`).
pub const MAX_GUESSED_SIDE: usize = 256;

impl Experiment {
    /// The image each row holds, [C, H, W], where the rows are images: the
    /// source's, or a CSV's `model.input_shape`; None otherwise.
    pub fn image_shape(&self) -> Option<[usize; 3]> {
        match self.data.source {
            DataSource::Csv if self.gpt().is_none() => self.model.input_shape,
            source => source.image_shape(),
        }
    }

    /// Fits the input image to built-in data: a net over images reads the
    /// data's image (`input_shape`); on data whose rows are not images its
    /// conv and pool layers cannot read them and go, the dense ones stay.
    /// A CSV keeps the shape it was given; without one, its conv and pool
    /// layers go too.
    pub fn fit_image_shape(&mut self) {
        if self.gpt().is_some() {
            return;
        }
        let shape = match self.data.source {
            DataSource::Csv => self.model.input_shape,
            source => source.image_shape(),
        };
        match shape {
            Some(shape) if self.model.layers.iter().any(|l| l.kind.is_spatial()) => {
                self.model.input_shape = Some(shape)
            }
            Some(shape) if self.model.input_shape.is_some() => self.model.input_shape = Some(shape),
            Some(_) => {}
            None => {
                let last = self.model.layers.len().saturating_sub(1);
                let mut i = 0;
                self.model.layers.retain(|l| {
                    i += 1;
                    i - 1 == last || !l.kind.is_spatial()
                });
                self.model.input_shape = None;
            }
        }
    }

    /// A CSV's rows as images: `shape` ([C, H, W]) over its inputs, or none
    /// (its conv and pool layers go, and its augmentation). The shape must
    /// hold exactly the CSV's input columns.
    pub fn set_csv_image_shape(&mut self, shape: Option<[usize; 3]>) -> Result<(), String> {
        if self.data.source != DataSource::Csv {
            return Err(format!("the {} data's images have their own shape", self.data.source.name()));
        }
        if let Some([c, h, w]) = shape {
            if c == 0 || h == 0 || w == 0 || c * h * w != self.model.inputs {
                return Err(format!(
                    "an image of {c} × {h} × {w} holds {} values, and the CSV's rows have {} inputs",
                    c * h * w,
                    self.model.inputs
                ));
            }
        }
        self.model.input_shape = shape;
        if shape.is_none() {
            self.data.augment = None;
        }
        self.fit_image_shape();
        Ok(())
    }
}

/// The image shape a CSV of `inputs` columns most likely holds: one channel
/// of n × n (784: MNIST's 28 × 28), or three of n × n (3,072: 32 × 32 RGB),
/// n at least 4; None where the count is neither.
pub fn image_shape_for(inputs: usize) -> Option<[usize; 3]> {
    let square = |n: usize| {
        let side = (n as f64).sqrt().round() as usize;
        ((4..=MAX_GUESSED_SIDE).contains(&side) && side * side == n).then_some(side)
    };
    square(inputs)
        .map(|s| [1, s, s])
        .or_else(|| inputs.is_multiple_of(3).then(|| square(inputs / 3)).flatten().map(|s| [3, s, s]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_image_is_guessed_from_its_columns() {
        assert_eq!(image_shape_for(784), Some([1, 28, 28]));
        assert_eq!(image_shape_for(64), Some([1, 8, 8]));
        assert_eq!(image_shape_for(3072), Some([3, 32, 32]));
        assert_eq!(image_shape_for(9), None, "a 3 × 3 image is too small to be one");
        assert_eq!(image_shape_for(2), None);
        assert_eq!(image_shape_for(785), None);
    }

    #[test]
    fn a_csv_image_shape_must_hold_its_inputs() {
        let mut e = Experiment::from_json(
            r#"{"model": {"inputs": 64, "layers": [{"units": 8, "activation": "relu"}, {"units": 2, "activation": "linear"}]},
                "loss": "cross_entropy", "optimizer": {"kind": "adam", "lr": 0.01}, "batch_size": 32,
                "data": {"source": "csv"}}"#,
        )
        .unwrap();
        assert_eq!(e.image_shape(), None);
        assert!(e.set_csv_image_shape(Some([1, 8, 9])).unwrap_err().contains("72 values"));
        e.set_csv_image_shape(Some([1, 8, 8])).unwrap();
        assert_eq!(e.image_shape(), Some([1, 8, 8]));
        e.validate().unwrap();
        e.set_csv_image_shape(None).unwrap();
        assert_eq!((e.image_shape(), e.model.input_shape), (None, None));
    }
}
