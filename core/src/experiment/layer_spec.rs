//! A layer of `model.layers`: its kinds, their JSON (a dense layer written
//! as it always was, conv and pool layers with a `kind`), and the shape
//! arithmetic of images through conv and pool layers, which validation,
//! the layout and the page's builder all read from here.

use serde::{Deserialize, Serialize};

use super::{one, Activation, Experiment};

/// One layer of the MLP's model: a dense layer (`units`, `activation`:
/// `{"units": N, "activation": A}`, its `"kind": "dense"` never written),
/// or a conv or pool layer (`kind`). For those, `units` is 0: a layer's
/// output width comes from the shapes (`Experiment::widths`), and a pool's
/// activation is `linear`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerSpec {
    pub units: usize,
    pub activation: Activation,
    pub kind: LayerKind,
}

/// What a layer computes: `torch.nn.Linear`, `torch.nn.Conv2d` (a square
/// kernel, zero padding), `F.max_pool2d` or `F.avg_pool2d` (no padding,
/// floor mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LayerKind {
    #[default]
    Dense,
    Conv2d {
        filters: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    MaxPool2d {
        kernel: usize,
        stride: usize,
    },
    AvgPool2d {
        kernel: usize,
        stride: usize,
    },
}

impl LayerKind {
    /// The `kind` written in the experiment.
    pub fn name(&self) -> &'static str {
        match self {
            LayerKind::Dense => "dense",
            LayerKind::Conv2d { .. } => "conv2d",
            LayerKind::MaxPool2d { .. } => "max_pool2d",
            LayerKind::AvgPool2d { .. } => "avg_pool2d",
        }
    }

    /// Conv and pool layers (they read and write images).
    pub fn is_spatial(&self) -> bool {
        !matches!(self, LayerKind::Dense)
    }
}

impl LayerSpec {
    /// The layer in a few words, as tables name it: `conv2d 8×5×5 pad 2`
    /// (filters × kernel², then stride and padding where not 1 and 0),
    /// `max_pool2d 2` (kernel, then the stride where not the kernel),
    /// `dense`.
    pub fn words(&self) -> String {
        match self.kind {
            LayerKind::Dense => "dense".into(),
            LayerKind::Conv2d { filters, kernel, stride, padding } => {
                let mut w = format!("conv2d {filters}×{kernel}×{kernel}");
                if stride != 1 {
                    w += &format!(" stride {stride}");
                }
                if padding != 0 {
                    w += &format!(" pad {padding}");
                }
                w
            }
            LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => {
                let mut w = format!("{} {kernel}", self.kind.name());
                if stride != kernel {
                    w += &format!(" stride {stride}");
                }
                w
            }
        }
    }

    /// A dense layer.
    pub fn dense(units: usize, activation: Activation) -> LayerSpec {
        LayerSpec { units, activation, kind: LayerKind::Dense }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenseFields {
    units: usize,
    activation: Activation,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConvFields {
    kind: String,
    filters: usize,
    kernel: usize,
    #[serde(default = "one")]
    stride: usize,
    #[serde(default)]
    padding: usize,
    activation: Activation,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolFields {
    kind: String,
    kernel: usize,
    #[serde(default)]
    stride: Option<usize>,
}

impl Serialize for LayerSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        let kind = self.kind.name().to_string();
        match self.kind {
            LayerKind::Dense => DenseFields { units: self.units, activation: self.activation }.serialize(s),
            LayerKind::Conv2d { filters, kernel, stride, padding } => {
                ConvFields { kind, filters, kernel, stride, padding, activation: self.activation }.serialize(s)
            }
            LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => {
                PoolFields { kind, kernel, stride: Some(stride) }.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for LayerSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<LayerSpec, D::Error> {
        use serde::de::Error as _;
        let mut map = crate::json::UniqueMap::deserialize(d)?.0;
        let kind = match map.get("kind") {
            None => "dense".to_string(),
            Some(serde_json::Value::String(kind)) => kind.clone(),
            Some(other) => {
                return Err(D::Error::custom(format!(
                    "a layer's kind must be \"dense\", \"conv2d\", \"max_pool2d\" or \"avg_pool2d\", got {other}"
                )))
            }
        };
        let fields = |what: &str, e: serde_json::Error| D::Error::custom(format!("a {what} layer: {e}"));
        match kind.as_str() {
            "dense" => {
                map.remove("kind");
                let f: DenseFields =
                    serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| fields("dense", e))?;
                Ok(LayerSpec::dense(f.units, f.activation))
            }
            "conv2d" => {
                let f: ConvFields =
                    serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| fields("conv2d", e))?;
                let kind =
                    LayerKind::Conv2d { filters: f.filters, kernel: f.kernel, stride: f.stride, padding: f.padding };
                Ok(LayerSpec { units: 0, activation: f.activation, kind })
            }
            "max_pool2d" | "avg_pool2d" => {
                let f: PoolFields =
                    serde_json::from_value(serde_json::Value::Object(map)).map_err(|e| fields(&kind, e))?;
                let stride = f.stride.unwrap_or(f.kernel);
                let kind = if kind == "max_pool2d" {
                    LayerKind::MaxPool2d { kernel: f.kernel, stride }
                } else {
                    LayerKind::AvgPool2d { kernel: f.kernel, stride }
                };
                Ok(LayerSpec { units: 0, activation: Activation::Linear, kind })
            }
            other => Err(D::Error::custom(format!(
                "unknown layer kind `{other}`, expected `dense`, `conv2d`, `max_pool2d` or `avg_pool2d`"
            ))),
        }
    }
}

/// The image a conv or pool layer makes of a [C, H, W] input, or None for
/// a dense layer or where a window does not fit.
pub fn layer_output(kind: &LayerKind, [c, h, w]: [usize; 3]) -> Option<[usize; 3]> {
    match *kind {
        LayerKind::Dense => None,
        LayerKind::Conv2d { filters, kernel, stride, padding } => {
            Some([filters, out_side(h, kernel, stride, padding)?, out_side(w, kernel, stride, padding)?])
        }
        LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => {
            Some([c, out_side(h, kernel, stride, 0)?, out_side(w, kernel, stride, 0)?])
        }
    }
}

/// Output size along one side: ⌊(n + 2·padding − kernel) / stride⌋ + 1, or
/// None where the window does not fit once (or the stride is 0).
pub fn out_side(n: usize, kernel: usize, stride: usize, padding: usize) -> Option<usize> {
    let padded = n.checked_add(padding.checked_mul(2)?)?;
    if stride == 0 || kernel == 0 || padded < kernel {
        return None;
    }
    Some((padded - kernel) / stride + 1)
}

impl Experiment {
    /// The floats each row holds at the input and after each layer: a
    /// dense layer's units, a conv or pool layer's C·H·W (0 where the shape
    /// does not fit, which validation refuses).
    pub fn widths(&self) -> Vec<usize> {
        let mut widths = vec![self.model.inputs];
        let mut image = self.model.input_shape;
        for layer in &self.model.layers {
            let next = image.and_then(|chw| layer_output(&layer.kind, chw));
            widths.push(match layer.kind {
                LayerKind::Dense => layer.units,
                _ => next.map_or(0, |[c, h, w]| c * h * w),
            });
            image = next;
        }
        widths
    }

    /// Each layer's input image [C, H, W], for the conv and pool layers
    /// (None for a dense layer, or where the shapes do not fit).
    pub fn images(&self) -> Vec<Option<[usize; 3]>> {
        let mut image = self.model.input_shape;
        self.model
            .layers
            .iter()
            .map(|layer| {
                let at = image.filter(|_| layer.kind.is_spatial());
                image = image.and_then(|chw| layer_output(&layer.kind, chw));
                at
            })
            .collect()
    }

    /// Each layer's output in words: `C×H×W` for a conv or pool layer, its
    /// units for a dense one.
    pub fn output_words(&self) -> Vec<String> {
        let mut image = self.model.input_shape;
        self.model
            .layers
            .iter()
            .map(|layer| {
                image = image.and_then(|chw| layer_output(&layer.kind, chw));
                match (layer.kind, image) {
                    (LayerKind::Dense, _) | (_, None) => layer.units.to_string(),
                    (_, Some([c, h, w])) => format!("{c}×{h}×{w}"),
                }
            })
            .collect()
    }

    /// The part of the input image that position (`y`, `x`) of conv or
    /// pool layer `layer`'s output depends on: rows `y0..y1` and columns
    /// `x0..x1` of the input, `[y0, x0, y1, x1]` (padding's zeros left
    /// out). Each layer back maps outputs `a..=b` to inputs
    /// `a·s − p ..= b·s − p + k − 1`, clipped to its input. None for a
    /// dense layer, a position outside the output, or an invalid shape.
    pub fn receptive_field(&self, layer: usize, y: usize, x: usize) -> Option<[usize; 4]> {
        let inputs = self.images();
        let [_, oh, ow] = layer_output(&self.model.layers.get(layer)?.kind, (*inputs.get(layer)?)?)?;
        if y >= oh || x >= ow {
            return None;
        }
        let (mut rows, mut cols) = ((y as i64, y as i64), (x as i64, x as i64));
        for l in (0..=layer).rev() {
            let [_, h, w] = inputs[l]?;
            let (k, s, p) = match self.model.layers[l].kind {
                LayerKind::Conv2d { kernel, stride, padding, .. } => (kernel, stride, padding),
                LayerKind::MaxPool2d { kernel, stride } | LayerKind::AvgPool2d { kernel, stride } => {
                    (kernel, stride, 0)
                }
                LayerKind::Dense => return None,
            };
            let (k, s, p) = (k as i64, s as i64, p as i64);
            let back = |(a, b): (i64, i64), n: usize| ((a * s - p).max(0), (b * s - p + k - 1).min(n as i64 - 1));
            rows = back(rows, h);
            cols = back(cols, w);
        }
        Some([rows.0 as usize, cols.0 as usize, rows.1 as usize + 1, cols.1 as usize + 1])
    }

    /// The model in a line: an MLP's widths (`2-16-16-1`), or for a net
    /// over images each layer and what it makes (`1×28×28 → conv2d
    /// 8×5×5 pad 2 → 8×28×28 → … → dense → 10`).
    pub fn architecture_words(&self) -> String {
        match self.model.input_shape {
            None => self.widths().iter().map(usize::to_string).collect::<Vec<_>>().join("-"),
            Some([c, h, w]) => {
                let mut line = format!("{c}×{h}×{w}");
                for (layer, out) in self.model.layers.iter().zip(self.output_words()) {
                    line += &format!(" → {} → {out}", layer.words());
                }
                line
            }
        }
    }
}
