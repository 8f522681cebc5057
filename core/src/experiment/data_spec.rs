//! The `data` part of an experiment: where the rows come from and how they
//! are split, and which losses and output widths fit them.

use serde::{Deserialize, Serialize};

use super::{Activation, Experiment, LayerSpec, Loss};

/// The digits' images (`data::digits_table`): pixels a side.
pub const DIGITS_SIDE: usize = 8;
/// Pixels of an image: the model's inputs.
pub const DIGITS_PIXELS: usize = DIGITS_SIDE * DIGITS_SIDE;
/// Classes: the digits 0..9.
pub const DIGITS_CLASSES: usize = 10;
/// MNIST's images (`data::mnist_table`): 28 × 28 pixels, 10 classes.
pub const MNIST_SIDE: usize = 28;
pub const MNIST_PIXELS: usize = MNIST_SIDE * MNIST_SIDE;
pub const MNIST_CLASSES: usize = 10;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSpec {
    pub source: DataSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_fraction: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<Feature>>,
    #[serde(default = "yes")]
    pub shuffle: bool,
    /// What changes each training image as it is served (images only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub augment: Option<super::Augment>,
    /// Loader workers making the batches beside the training loop (0: the
    /// loop makes them), as PyTorch's `DataLoader(num_workers=…)`. How the
    /// batches are made, never what they hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_workers: Option<usize>,
    /// Batches each loader worker makes ahead (PyTorch's `prefetch_factor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_factor: Option<usize>,
}

fn yes() -> bool {
    true
}

pub const DEFAULT_SAMPLES: usize = 500;
pub const DEFAULT_NOISE: f64 = 0.0;
pub const DEFAULT_TRAIN_FRACTION: f64 = 0.5;
/// PyTorch's default.
pub const DEFAULT_PREFETCH_FACTOR: usize = 2;
/// Loader workers at most, and batches each makes ahead at most.
pub const MAX_LOADER_WORKERS: usize = 16;
pub const MAX_PREFETCH_FACTOR: usize = 16;
pub const DEFAULT_FEATURES: [Feature; 2] = [Feature::X1, Feature::X2];

impl DataSpec {
    pub fn samples(&self) -> usize {
        self.samples.unwrap_or(DEFAULT_SAMPLES)
    }
    pub fn noise(&self) -> f64 {
        self.noise.unwrap_or(DEFAULT_NOISE)
    }
    /// The share of rows that train. A CSV without `train_fraction` trains
    /// on every row, as CSV runs did before they could be split, so their
    /// experiments (in links and checkpoints) still mean the same run.
    pub fn train_fraction(&self) -> f64 {
        match (self.train_fraction, self.source) {
            (Some(fraction), _) => fraction,
            (None, DataSource::Csv | DataSource::Text | DataSource::Shakespeare) => 1.0,
            (None, _) => DEFAULT_TRAIN_FRACTION,
        }
    }
    /// Whether `other` serves the same rows in the same order: it may
    /// differ in how they are changed (`augment`) and made (the loader).
    pub fn same_rows(&self, other: &DataSpec) -> bool {
        let plain = |d: &DataSpec| DataSpec { augment: None, num_workers: None, prefetch_factor: None, ..d.clone() };
        plain(self) == plain(other)
    }
    pub fn num_workers(&self) -> usize {
        self.num_workers.unwrap_or(0)
    }
    pub fn prefetch_factor(&self) -> usize {
        self.prefetch_factor.unwrap_or(DEFAULT_PREFETCH_FACTOR)
    }
    /// The augmentation that changes something, if any.
    pub fn active_augment(&self) -> Option<&super::Augment> {
        self.augment.as_ref().filter(|a| a.is_active())
    }
    pub fn features(&self) -> Vec<Feature> {
        self.features.clone().unwrap_or_else(|| DEFAULT_FEATURES.to_vec())
    }
    /// The model's input width the data gives: one per feature for the 2-D
    /// datasets, one per pixel for digits; None for a CSV (its `x…` columns).
    pub fn input_width(&self) -> Option<usize> {
        match self.source {
            DataSource::Csv | DataSource::Text | DataSource::Shakespeare => None,
            DataSource::Digits => Some(DIGITS_PIXELS),
            DataSource::Mnist => Some(MNIST_PIXELS),
            _ => Some(self.features().len()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataSource {
    Circle,
    Xor,
    Gauss,
    Spiral,
    RegPlane,
    RegGauss,
    /// Three interleaved spiral arms (CS231n's), classes 0, 1 and 2.
    Spiral3,
    /// The 8×8 handwritten digits (core/data/README.md), classes 0..9.
    Digits,
    /// 5,000 of MNIST's 28×28 handwritten digits (core/data/README.md).
    Mnist,
    Csv,
    /// A UTF-8 text file (`--data`), read as characters: the transformer's
    /// rows are windows of its tokens.
    Text,
    /// Tiny Shakespeare, built in (core/data/README.md).
    Shakespeare,
}

impl DataSource {
    /// Every built-in source, in the order a dataset control lists them.
    pub const BUILT_IN: [DataSource; 9] = [
        DataSource::Circle,
        DataSource::Xor,
        DataSource::Gauss,
        DataSource::Spiral,
        DataSource::Spiral3,
        DataSource::RegPlane,
        DataSource::RegGauss,
        DataSource::Digits,
        DataSource::Mnist,
    ];

    /// The name the experiment JSON uses (`"spiral3"`).
    pub fn name(self) -> &'static str {
        match self {
            DataSource::Circle => "circle",
            DataSource::Xor => "xor",
            DataSource::Gauss => "gauss",
            DataSource::Spiral => "spiral",
            DataSource::RegPlane => "reg_plane",
            DataSource::RegGauss => "reg_gauss",
            DataSource::Spiral3 => "spiral3",
            DataSource::Digits => "digits",
            DataSource::Mnist => "mnist",
            DataSource::Csv => "csv",
            DataSource::Text => "text",
            DataSource::Shakespeare => "shakespeare",
        }
    }

    pub fn is_regression(self) -> bool {
        matches!(self, DataSource::RegPlane | DataSource::RegGauss)
    }

    /// Classes of a built-in classification dataset; None for regression
    /// and for a CSV (whose file decides).
    pub fn classes(self) -> Option<usize> {
        match self {
            DataSource::Circle | DataSource::Xor | DataSource::Gauss | DataSource::Spiral => Some(2),
            DataSource::Spiral3 => Some(3),
            DataSource::Digits => Some(DIGITS_CLASSES),
            DataSource::Mnist => Some(MNIST_CLASSES),
            DataSource::RegPlane
            | DataSource::RegGauss
            | DataSource::Csv
            | DataSource::Text
            | DataSource::Shakespeare => None,
        }
    }

    /// Whether the rows are points of the plane (x1, x2) that a decision
    /// boundary can be drawn over: every built-in but digits. A CSV's rows
    /// are whatever its columns hold.
    pub fn is_plane(self) -> bool {
        !matches!(
            self,
            DataSource::Digits | DataSource::Mnist | DataSource::Csv | DataSource::Text | DataSource::Shakespeare
        )
    }

    /// Whether the rows are windows of a text's tokens (the transformer's).
    pub fn is_text(self) -> bool {
        matches!(self, DataSource::Text | DataSource::Shakespeare)
    }

    /// Pixels a side when each row is a square image (digits: 8, MNIST:
    /// 28), else None.
    pub fn image_side(self) -> Option<usize> {
        match self {
            DataSource::Digits => Some(DIGITS_SIDE),
            DataSource::Mnist => Some(MNIST_SIDE),
            _ => None,
        }
    }

    /// The image each row holds, [C, H, W], where the source's rows are
    /// images (one channel: digits 8 × 8, MNIST 28 × 28), else None.
    pub fn image_shape(self) -> Option<[usize; 3]> {
        self.image_side().map(|side| [1, side, side])
    }
}

/// Input features of the built-in 2-D datasets, as TensorFlow Playground's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Feature {
    #[serde(rename = "x1")]
    X1,
    #[serde(rename = "x2")]
    X2,
    #[serde(rename = "x1_sq")]
    X1Squared,
    #[serde(rename = "x2_sq")]
    X2Squared,
    #[serde(rename = "x1_x2")]
    X1TimesX2,
    #[serde(rename = "sin_x1")]
    SinX1,
    #[serde(rename = "sin_x2")]
    SinX2,
}

impl Feature {
    pub fn eval(self, x1: f64, x2: f64) -> f64 {
        match self {
            Feature::X1 => x1,
            Feature::X2 => x2,
            Feature::X1Squared => x1 * x1,
            Feature::X2Squared => x2 * x2,
            Feature::X1TimesX2 => x1 * x2,
            Feature::SinX1 => x1.sin(),
            Feature::SinX2 => x2.sin(),
        }
    }
}

impl Experiment {
    /// The losses that fit the data, the usual choice first: `mse` for
    /// regression; for two classes `bce_with_logits`, `cross_entropy` (two
    /// units) and `mse` (±1 targets); for more classes `cross_entropy`
    /// alone. A CSV keeps the loss its file was read with (`[self.loss]`):
    /// which others fit depends on the values in the file.
    pub fn fitting_losses(&self) -> Vec<Loss> {
        if self.data.source == DataSource::Csv {
            return vec![self.loss];
        }
        match self.data.source.classes() {
            None => vec![Loss::Mse],
            Some(2) => vec![Loss::BceWithLogits, Loss::CrossEntropy, Loss::Mse],
            Some(_) => vec![Loss::CrossEntropy],
        }
    }

    /// Output units `loss` needs on this experiment's data (one per class
    /// for `cross_entropy`, else one), or None when the loss does not fit
    /// it. For a CSV, the current output width with the current loss.
    pub fn output_units_for(&self, loss: Loss) -> Option<usize> {
        if !self.fitting_losses().contains(&loss) {
            return None;
        }
        match (self.data.source, loss) {
            (DataSource::Csv, _) => Some(self.outputs()),
            (source, Loss::CrossEntropy) => source.classes(),
            _ => Some(1),
        }
    }

    /// Fits the model's ends to the data: `model.inputs` to the data's
    /// input width, the loss to `loss` where it fits (else the first
    /// fitting one), and the output layer to a linear layer of the units
    /// that loss needs. Hidden layers are left as they are. For digits, the
    /// fields that do not apply to it (`samples`, `noise`, `features`) are
    /// cleared. A CSV is left alone: its upload chose both ends from the
    /// file.
    pub fn fit_to_data(&mut self, loss: Option<Loss>) {
        if self.data.source == DataSource::Csv {
            return;
        }
        if !self.data.source.is_plane() {
            (self.data.samples, self.data.noise, self.data.features) = (None, None, None);
        }
        let fitting = self.fitting_losses();
        self.loss = loss.filter(|l| fitting.contains(l)).unwrap_or(fitting[0]);
        if let Some(width) = self.data.input_width() {
            self.model.inputs = width;
        }
        self.fit_image_shape();
        // Augmentation is for images, and a shift for the image's side.
        match self.image_shape() {
            Some([_, h, w]) => {
                if let Some(a) = self.data.augment.as_mut() {
                    a.shift = a.shift.min(h.min(w) / 2);
                }
            }
            None => self.data.augment = None,
        }
        let units = self.output_units_for(self.loss).expect("a fitting loss has an output width");
        if let Some(out) = self.model.layers.last_mut() {
            *out = LayerSpec::dense(units, Activation::Linear);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(data: &str, loss: &str, inputs: usize, outputs: usize) -> Result<Experiment, String> {
        Experiment::from_json(&format!(
            r#"{{"model": {{"inputs": {inputs}, "layers": [{{"units": 8, "activation": "relu"}},
                {{"units": {outputs}, "activation": "linear"}}]}}, "loss": "{loss}",
                "optimizer": {{"kind": "adam", "lr": 0.01}}, "batch_size": 32, "data": {data}}}"#
        ))
        .map_err(|e| e.to_string())
    }

    #[test]
    fn new_sources_round_trip_through_json() {
        for (data, loss, inputs, outputs) in [
            (r#"{"source": "spiral3", "samples": 300, "noise": 0.1, "train_fraction": 0.7}"#, "cross_entropy", 2, 3),
            (r#"{"source": "digits", "train_fraction": 0.8, "shuffle": false}"#, "cross_entropy", 64, 10),
            (r#"{"source": "digits"}"#, "cross_entropy", 64, 10),
            (r#"{"source": "csv", "train_fraction": 0.75}"#, "bce_with_logits", 2, 1),
        ] {
            let e = experiment(data, loss, inputs, outputs).unwrap();
            assert_eq!(Experiment::from_json(&e.to_json()).unwrap(), e, "{data}");
            let json: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
            assert_eq!(json["data"]["source"], e.data.source.name());
        }
        for source in DataSource::BUILT_IN.into_iter().chain([DataSource::Csv]) {
            assert_eq!(serde_json::to_value(source).unwrap(), source.name());
        }
    }

    #[test]
    fn a_csv_without_a_split_trains_on_every_row() {
        let whole = experiment(r#"{"source": "csv"}"#, "mse", 2, 1).unwrap();
        assert_eq!(whole.data.train_fraction(), 1.0);
        let split = experiment(r#"{"source": "csv", "train_fraction": 0.6}"#, "mse", 2, 1).unwrap();
        assert_eq!(split.data.train_fraction(), 0.6);
        assert_eq!(experiment(r#"{"source": "xor"}"#, "mse", 2, 1).unwrap().data.train_fraction(), 0.5);
    }

    #[test]
    fn losses_that_do_not_fit_are_refused_naming_both() {
        let cases = [
            (r#"{"source": "digits"}"#, "mse", 64, 1, "digits has 10 classes: the loss must be cross_entropy with 10 output units, not mse"),
            (r#"{"source": "digits"}"#, "bce_with_logits", 64, 1, "digits has 10 classes: the loss must be cross_entropy with 10 output units, not bce_with_logits"),
            (r#"{"source": "digits"}"#, "cross_entropy", 64, 3, "digits has 10 classes: the loss must be cross_entropy with 10 output units, not 3"),
            (r#"{"source": "spiral3"}"#, "bce_with_logits", 2, 1, "spiral3 has 3 classes: the loss must be cross_entropy with 3 output units, not bce_with_logits"),
            (r#"{"source": "spiral3"}"#, "cross_entropy", 2, 2, "spiral3 has 3 classes: the loss must be cross_entropy with 3 output units, not 2"),
            (r#"{"source": "spiral"}"#, "cross_entropy", 2, 3, "the output layer has 3 units but spiral data with loss cross_entropy needs 2"),
            (r#"{"source": "reg_gauss"}"#, "cross_entropy", 2, 2, "data.source \"reg_gauss\" is a regression dataset: it needs loss \"mse\" with 1 output unit, not \"cross_entropy\""),
            (r#"{"source": "digits"}"#, "cross_entropy", 2, 10, "digits has 64 inputs (8×8 pixels): model.inputs must be 64, got 2"),
            (r#"{"source": "digits", "noise": 0.1}"#, "cross_entropy", 64, 10, "data.noise does not apply to \"source\": \"digits\""),
            (r#"{"source": "digits", "features": ["x1"]}"#, "cross_entropy", 64, 10, "data.features does not apply"),
            (r#"{"source": "digits", "samples": 100}"#, "cross_entropy", 64, 10, "data.samples does not apply"),
            (r#"{"source": "digits", "train_fraction": 0}"#, "cross_entropy", 64, 10, "data.train_fraction must be in (0, 1], got 0"),
            (r#"{"source": "csv", "train_fraction": 1.5}"#, "mse", 2, 1, "data.train_fraction must be in (0, 1], got 1.5"),
            (r#"{"source": "csv", "noise": 0.1}"#, "mse", 2, 1, "data.noise does not apply to \"source\": \"csv\""),
        ];
        for (data, loss, inputs, outputs, want) in cases {
            let msg = experiment(data, loss, inputs, outputs).unwrap_err();
            assert!(msg.contains(want), "{data} {loss}: `{msg}` lacks `{want}`");
        }
    }

    #[test]
    fn fitting_losses_and_their_output_widths() {
        let spiral3 = experiment(r#"{"source": "spiral3"}"#, "cross_entropy", 2, 3).unwrap();
        assert_eq!(spiral3.fitting_losses(), vec![Loss::CrossEntropy]);
        assert_eq!(spiral3.output_units_for(Loss::CrossEntropy), Some(3));
        assert_eq!(spiral3.output_units_for(Loss::Mse), None);
        let xor = experiment(r#"{"source": "xor"}"#, "bce_with_logits", 2, 1).unwrap();
        assert_eq!(xor.fitting_losses(), vec![Loss::BceWithLogits, Loss::CrossEntropy, Loss::Mse]);
        assert_eq!(
            [Loss::BceWithLogits, Loss::CrossEntropy, Loss::Mse].map(|l| xor.output_units_for(l)),
            [Some(1), Some(2), Some(1)]
        );
        let plane = experiment(r#"{"source": "reg_plane"}"#, "mse", 2, 1).unwrap();
        assert_eq!(plane.fitting_losses(), vec![Loss::Mse]);
        let csv = experiment(r#"{"source": "csv"}"#, "cross_entropy", 2, 4).unwrap();
        assert_eq!(csv.fitting_losses(), vec![Loss::CrossEntropy]);
        assert_eq!(csv.output_units_for(Loss::CrossEntropy), Some(4));
        // Every fitting loss with its width validates, on every built-in.
        for source in DataSource::BUILT_IN {
            let mut e = xor.clone();
            e.data.source = source;
            for loss in e.clone().fitting_losses() {
                e.fit_to_data(Some(loss));
                assert_eq!(e.loss, loss);
                e.validate().unwrap_or_else(|err| panic!("{source:?} {loss:?}: {err}"));
            }
        }
    }

    #[test]
    fn fit_to_data_sets_both_ends_and_keeps_the_hidden_layers() {
        let mut e = experiment(
            r#"{"source": "xor", "samples": 200, "noise": 0.1, "features": ["x1", "x2"]}"#,
            "bce_with_logits",
            2,
            1,
        )
        .unwrap();
        e.data.source = DataSource::Digits;
        e.fit_to_data(Some(Loss::Mse));
        assert_eq!((e.loss, e.widths()), (Loss::CrossEntropy, vec![64, 8, 10]));
        assert!(e.validate().is_ok());
        e.data.source = DataSource::Circle;
        e.fit_to_data(None);
        assert_eq!((e.loss, e.widths()), (Loss::BceWithLogits, vec![2, 8, 1]));
        e.fit_to_data(Some(Loss::CrossEntropy));
        assert_eq!((e.loss, e.widths()), (Loss::CrossEntropy, vec![2, 8, 2]));
    }

    #[test]
    fn a_net_over_images_reads_the_datas_image_or_loses_its_conv_layers() {
        let mut e = Experiment::from_json(
            r#"{"model": {"input_shape": [1, 8, 8], "layers": [
                {"kind": "conv2d", "filters": 4, "kernel": 3, "padding": 1, "activation": "relu"},
                {"kind": "max_pool2d", "kernel": 2}, {"units": 12, "activation": "tanh"},
                {"units": 10, "activation": "linear"}]}, "loss": "cross_entropy",
                "optimizer": {"kind": "adam", "lr": 0.01}, "batch_size": 8, "data": {"source": "digits"}}"#,
        )
        .unwrap();
        e.fit_to_data(None);
        assert_eq!(e.model.input_shape, Some([1, 8, 8]));
        assert_eq!(e.widths(), vec![64, 256, 64, 12, 10]);
        e.data.source = DataSource::Spiral;
        e.fit_to_data(None);
        assert_eq!((e.model.input_shape, e.widths()), (None, vec![2, 12, 1]), "the dense layers stay");
        assert!(e.validate().is_ok());
        assert_eq!(DataSource::Digits.image_shape(), Some([1, 8, 8]));
        assert_eq!(DataSource::Spiral.image_shape(), None);
    }
}
