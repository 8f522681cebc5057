//! The builder's edits of a net over images: a hidden layer's kind (dense,
//! conv, max or average pooling), a conv or pool layer's fields, and the
//! conv preset. The core validates every result (`edited`), so an edit the
//! core would refuse shows the core's message and changes nothing.

use stepscope_core::experiment::*;
use stepscope_core::Experiment;

use super::hidden_layers;

/// The kinds a builder row offers: the experiment's name and the label.
pub const LAYER_KINDS: [(&str, &str); 4] =
    [("dense", "Dense"), ("conv2d", "Conv"), ("max_pool2d", "Max pool"), ("avg_pool2d", "Avg pool")];

/// What a conv or pool layer reads: the data's image ([C, H, W]), or the
/// shape a CSV's experiment was given.
fn image_of(e: &Experiment) -> Result<[usize; 3], String> {
    e.image_shape().ok_or_else(|| match e.data.source {
        DataSource::Csv => {
            "Conv and pool layers read images: give the CSV's rows an image shape (C×H×W) first.".to_string()
        }
        source => format!(
            "Conv and pool layers read images, and the {} data's rows are not images: choose the digits first.",
            source.name()
        ),
    })
}

/// A conv layer as the builder first makes it: 8 filters of 3 × 3 with
/// padding 1, so that it keeps its input's size.
fn new_conv(activation: Activation) -> LayerSpec {
    LayerSpec { units: 0, activation, kind: LayerKind::Conv2d { filters: 8, kernel: 3, stride: 1, padding: 1 } }
}

/// Hidden layer `l` becomes a layer of `kind` (`dense`, `conv2d`,
/// `max_pool2d`, `avg_pool2d`), with the builder's first fields.
pub fn set_layer_kind(e: &mut Experiment, l: usize, kind: &str) -> Result<(), String> {
    if l >= hidden_layers(e).len() {
        return Err(format!("There is no hidden layer {}.", l + 1));
    }
    let old = e.model.layers[l].clone();
    if old.kind.name() == kind {
        return Ok(());
    }
    // A layer that had an activation keeps it; a pool had none.
    let activation = match old.activation {
        Activation::Linear => Activation::Relu,
        a => a,
    };
    let new = match kind {
        "dense" => LayerSpec::dense(16, activation),
        "conv2d" => new_conv(activation),
        "max_pool2d" => {
            LayerSpec { units: 0, activation: Activation::Linear, kind: LayerKind::MaxPool2d { kernel: 2, stride: 2 } }
        }
        "avg_pool2d" => {
            LayerSpec { units: 0, activation: Activation::Linear, kind: LayerKind::AvgPool2d { kernel: 2, stride: 2 } }
        }
        other => return Err(format!("Unknown layer kind `{other}` (dense, conv2d, max_pool2d or avg_pool2d).")),
    };
    if new.kind.is_spatial() {
        e.model.input_shape = Some(image_of(e)?);
    }
    e.model.layers[l] = new;
    Ok(())
}

/// One field of hidden layer `l`: a conv layer's `filters`, `kernel`,
/// `stride` or `padding`, a pool's `kernel` or `stride` (the core bounds
/// each and checks that the layers' outputs fit).
pub fn set_layer_field(e: &mut Experiment, l: usize, field: &str, value: usize) -> Result<(), String> {
    let Some(layer) = hidden_layers(e).get(l).map(|x| x.kind) else {
        return Err(format!("There is no hidden layer {}.", l + 1));
    };
    let kind = match (layer, field) {
        (LayerKind::Conv2d { kernel, stride, padding, .. }, "filters") => {
            LayerKind::Conv2d { filters: value, kernel, stride, padding }
        }
        (LayerKind::Conv2d { filters, stride, padding, .. }, "kernel") => {
            LayerKind::Conv2d { filters, kernel: value, stride, padding }
        }
        (LayerKind::Conv2d { filters, kernel, padding, .. }, "stride") => {
            LayerKind::Conv2d { filters, kernel, stride: value, padding }
        }
        (LayerKind::Conv2d { filters, kernel, stride, .. }, "padding") => {
            LayerKind::Conv2d { filters, kernel, stride, padding: value }
        }
        (LayerKind::MaxPool2d { stride, .. }, "kernel") => LayerKind::MaxPool2d { kernel: value, stride },
        (LayerKind::MaxPool2d { kernel, .. }, "stride") => LayerKind::MaxPool2d { kernel, stride: value },
        (LayerKind::AvgPool2d { stride, .. }, "kernel") => LayerKind::AvgPool2d { kernel: value, stride },
        (LayerKind::AvgPool2d { kernel, .. }, "stride") => LayerKind::AvgPool2d { kernel, stride: value },
        (kind, field) => return Err(format!("A {} layer has no `{field}`.", kind.name())),
    };
    e.model.layers[l].kind = kind;
    Ok(())
}

/// The conv preset: two conv blocks (conv, ReLU, 2 × 2 max pooling) and
/// the output layer, over the data's images (the digits where the data are
/// not images). On 28 × 28 images it is ConvNetJS's MNIST demo (8 and 16
/// filters of 5 × 5, pools of 2 and 3), with its trainer's settings as SGD
/// has them (batch 20, L2 decay 0.001; momentum 0.9 at lr 0.01 where
/// ConvNetJS uses adadelta): on MNIST it reaches 95 % where the page's
/// AdamW at 0.02 overfits at about 94 % (bench/conv-page.md); on the 8 × 8
/// digits, 3 × 3 filters and the optimizer as it is.
pub fn conv_preset(e: &mut Experiment) -> Result<(), String> {
    if e.image_shape().is_none() && e.data.source != DataSource::Csv {
        e.data.source = DataSource::Digits;
        e.fit_to_data(None);
    }
    let shape = image_of(e)?;
    let (kernel, second_pool) = if shape[1] >= 20 { (5, 3) } else { (3, 2) };
    let conv = |filters| LayerSpec {
        units: 0,
        activation: Activation::Relu,
        kind: LayerKind::Conv2d { filters, kernel, stride: 1, padding: kernel / 2 },
    };
    let pool = |kernel| LayerSpec {
        units: 0,
        activation: Activation::Linear,
        kind: LayerKind::MaxPool2d { kernel, stride: kernel },
    };
    let output = e.model.layers.last().cloned().ok_or("The model has no output layer.")?;
    e.model.input_shape = Some(shape);
    e.model.layers = vec![conv(8), pool(2), conv(16), pool(second_pool), output];
    if kernel == 5 {
        e.optimizer = serde_json::from_str(r#"{"kind": "sgd", "lr": 0.01, "momentum": 0.9, "weight_decay": 0.001}"#)
            .map_err(|err| err.to_string())?;
        e.schedule = Schedule::Constant;
        e.batch_size = 20;
    }
    Ok(())
}

/// Each hidden layer's output and parameters in words, as the builder
/// shows them: `8×8×8 · 80 params` (a pool has none).
pub fn layer_shapes(e: &Experiment) -> Vec<String> {
    let layout = stepscope_core::model::Layout::new(e);
    e.output_words()
        .into_iter()
        .zip(&layout.layers)
        .map(|(out, shape)| {
            let params = shape.end() - shape.weight_offset;
            match params {
                0 => format!("→ {out}"),
                1 => format!("→ {out} · 1 param"),
                n => format!("→ {out} · {n} params"),
            }
        })
        .collect()
}

/// A CSV's image shape as the control shows it: `1×28×28`, or empty.
pub fn image_shape_text(e: &Experiment) -> String {
    e.model.input_shape.map_or_else(String::new, |[c, h, w]| format!("{c}×{h}×{w}"))
}

/// The Image shape control of a CSV: `C×H×W` (× or x between), or empty
/// (or `none`) for rows that are not images; the core checks that the
/// shape holds the CSV's columns.
pub fn set_image_shape(e: &mut Experiment, text: &str) -> Result<(), String> {
    let text = text.trim();
    let shape = if text.is_empty() || text.eq_ignore_ascii_case("none") {
        None
    } else {
        let parts: Vec<usize> = text
            .split(|c: char| matches!(c, '×' | 'x' | 'X' | '*' | ',') || c.is_whitespace())
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<usize>())
            .collect::<Result<_, _>>()
            .map_err(|_| {
                format!("Image shape: `{text}` is not C×H×W (1×28×28, say), or empty for rows that are not images.")
            })?;
        match parts[..] {
            [c, h, w] => Some([c, h, w]),
            _ => return Err(format!("Image shape: `{text}` is not C×H×W (three numbers: 1×28×28, say).")),
        }
    };
    e.set_csv_image_shape(shape).map_err(|why| format!("Image shape: {why}."))
}

#[cfg(test)]
mod tests {
    use super::super::{default_experiment, edited, fit_new_data};
    use super::*;

    fn digits() -> Experiment {
        edited(&default_experiment(), |x| {
            x.data.source = DataSource::Digits;
            fit_new_data(x);
            Ok(())
        })
        .unwrap()
    }

    #[test]
    fn the_preset_builds_a_conv_net_the_page_takes_on_any_data() {
        let e = edited(&default_experiment(), conv_preset).unwrap();
        assert_eq!(e.data.source, DataSource::Digits, "the spiral's points are not images");
        assert_eq!(e.model.input_shape, Some([1, 8, 8]));
        assert_eq!(
            e.architecture_words(),
            "1×8×8 → conv2d 8×3×3 pad 1 → 8×8×8 → max_pool2d 2 → 8×4×4 → conv2d 16×3×3 pad 1 → 16×4×4 → max_pool2d 2 → 16×2×2 → dense → 10"
        );
        assert_eq!(layer_shapes(&e)[0], "→ 8×8×8 · 80 params");
        assert_eq!(layer_shapes(&e)[1], "→ 8×4×4");
        assert_eq!(layer_shapes(&e)[4], "→ 10 · 650 params");
    }

    #[test]
    fn on_mnist_the_preset_is_convnetjs_s_demo() {
        let mnist = edited(&default_experiment(), |x| {
            x.data.source = DataSource::Mnist;
            fit_new_data(x);
            Ok(())
        })
        .unwrap();
        assert_eq!(mnist.model.inputs, 784);
        let e = edited(&mnist, conv_preset).unwrap();
        assert_eq!(
            e.architecture_words(),
            "1×28×28 → conv2d 8×5×5 pad 2 → 8×28×28 → max_pool2d 2 → 8×14×14 → conv2d 16×5×5 pad 2 → 16×14×14 → max_pool2d 3 → 16×4×4 → dense → 10"
        );
        assert_eq!((e.optimizer.name(), e.batch_size, e.schedule), ("sgd", 20, Schedule::Constant));
        // The same net as the CLI's example, but for its data.
        let example = Experiment::from_json(include_str!("../../../../examples/mnist_convnet.json")).unwrap();
        assert_eq!((e.model.layers.clone(), e.optimizer.clone()), (example.model.layers, example.optimizer));
    }

    #[test]
    fn kinds_and_fields_change_one_layer_and_the_core_refuses_what_does_not_fit() {
        let e = digits();
        let conv = edited(&e, |x| set_layer_kind(x, 0, "conv2d")).unwrap();
        assert_eq!(conv.model.input_shape, Some([1, 8, 8]));
        assert_eq!(conv.model.layers[0].kind, LayerKind::Conv2d { filters: 8, kernel: 3, stride: 1, padding: 1 });
        assert_eq!(conv.model.layers[0].activation, Activation::Tanh, "the activation stays");
        // Conv after a dense layer: the core's message, nothing changed.
        let err = edited(&e, |x| set_layer_kind(x, 1, "conv2d")).unwrap_err();
        assert!(err.contains("conv and pool layers come before the first dense layer"), "{err}");
        let wider = edited(&conv, |x| set_layer_field(x, 0, "filters", 12)).unwrap();
        assert_eq!(wider.widths()[1], 12 * 64);
        let err = edited(&conv, |x| set_layer_field(x, 0, "kernel", 11)).unwrap_err();
        assert!(err.contains("needs an input of at least 11 × 11, got 10 × 10"), "{err}");
        let err = edited(&conv, |x| set_layer_field(x, 0, "padding", 3)).unwrap_err();
        assert!(err.contains("padding must be less than the kernel"), "{err}");
        let pooled = edited(&conv, |x| set_layer_kind(x, 0, "max_pool2d")).unwrap();
        assert_eq!(pooled.output_words()[0], "1×4×4");
        let err = edited(&pooled, |x| set_layer_field(x, 0, "filters", 3)).unwrap_err();
        assert_eq!(err, "A max_pool2d layer has no `filters`.");
        let back = edited(&pooled, |x| set_layer_kind(x, 0, "dense")).unwrap();
        assert_eq!(back.model.layers[0], LayerSpec::dense(16, Activation::Relu));
        // On the spiral's points there is no image to read.
        let err = edited(&default_experiment(), |x| set_layer_kind(x, 0, "conv2d")).unwrap_err();
        assert!(err.contains("the spiral data's rows are not images"), "{err}");
        assert!(edited(&e, |x| set_layer_kind(x, 5, "conv2d")).is_err());
    }
}
