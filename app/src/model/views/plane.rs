//! The input plane's views: its extent, the model inputs at each grid
//! point, the data's points, and the colours of outputs and classes
//! (TensorFlow Playground's orange through white to blue).

use stepscope_core::data::Dataset;
use stepscope_core::experiment::{DataSource, Loss};
use stepscope_core::Experiment;

use super::is_image_data;

/// Grid points per side for the boundary and the thumbnails, at most
/// (`grid_side` picks fewer for a large network).
pub const GRID: usize = 48;

/// A point to draw: position on the plane, value in [-1, 1] (class 0 → -1,
/// class 1 → +1, or the regression target), test or train.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlotPoint {
    pub x1: f32,
    pub x2: f32,
    pub value: f32,
    pub test: bool,
}

/// The plane's extent, [x1 min, x1 max, x2 min, x2 max]: the built-in
/// data's [-6, 6]², a two-input CSV's range padded by 5 %; None for images,
/// text and a CSV of other widths.
pub fn plane_extent(e: &Experiment, data: &Dataset) -> Option<[f32; 4]> {
    if is_image_data(e) || e.gpt().is_some() {
        return None;
    }
    if e.data.source != DataSource::Csv {
        return Some([-6.0, 6.0, -6.0, 6.0]);
    }
    if e.model.inputs != 2 {
        return None;
    }
    let (mut lo, mut hi) = ([f32::INFINITY; 2], [f32::NEG_INFINITY; 2]);
    for row in data.train.inputs.chunks_exact(2) {
        for k in 0..2 {
            lo[k] = lo[k].min(row[k]);
            hi[k] = hi[k].max(row[k]);
        }
    }
    let pad = |l: f32, h: f32| ((h - l) * 0.05).max(1e-3);
    Some([lo[0] - pad(lo[0], hi[0]), hi[0] + pad(lo[0], hi[0]), lo[1] - pad(lo[1], hi[1]), hi[1] + pad(lo[1], hi[1])])
}

/// Maps a network output row to [-1, 1] for colouring: probability of
/// class 1 scaled for bce and 2-class cross_entropy, the value itself for
/// mse (clamped).
pub(super) fn output_value(row: &[f32], loss: Loss) -> f32 {
    match loss {
        Loss::BceWithLogits => 2.0 / (1.0 + (-row[0]).exp()) - 1.0,
        Loss::CrossEntropy if row.len() == 2 => {
            let p1 = 1.0 / (1.0 + (row[0] - row[1]).exp());
            2.0 * p1 - 1.0
        }
        Loss::CrossEntropy => {
            // The most likely class, plus its softmax probability as the
            // fraction (below 1): `color` pales the class's hue where the
            // model is unsure.
            let best = row.iter().enumerate().fold(0, |b, (i, &v)| if v > row[b] { i } else { b });
            let sum: f32 = row.iter().map(|&v| (v - row[best]).exp()).sum();
            best as f32 + (1.0 / sum).min(CERTAIN)
        }
        Loss::Mse => row[0].clamp(-1.0, 1.0),
    }
}

/// The model inputs at each point of a (side, side) grid over `extent`,
/// row 0 at the top (the largest x2): the experiment's features of (x1,
/// x2), or (x1, x2) itself for a CSV.
pub fn grid_inputs(e: &Experiment, extent: [f32; 4], side: usize) -> Vec<f32> {
    let [x_lo, x_hi, y_lo, y_hi] = extent;
    let features = e.data.features();
    let csv = e.data.source == DataSource::Csv;
    let mut inputs = Vec::with_capacity(side * side * e.model.inputs);
    for r in 0..side {
        let x2 = y_hi - (r as f32 + 0.5) / side as f32 * (y_hi - y_lo);
        for c in 0..side {
            let x1 = x_lo + (c as f32 + 0.5) / side as f32 * (x_hi - x_lo);
            if csv {
                inputs.extend([x1, x2]);
            } else {
                inputs.extend(features.iter().map(|f| f.eval(x1 as f64, x2 as f64) as f32));
            }
        }
    }
    inputs
}

pub(super) fn plot_points(e: &Experiment, data: &Dataset) -> Vec<PlotPoint> {
    let regression = e.data.source.is_regression();
    let multiclass = e.loss == Loss::CrossEntropy && e.outputs() > 2;
    // A label as `color` reads it: a class index for several classes, else
    // -1 / +1 (or the regression value).
    let value = |label: f64| if regression || multiclass { label as f32 } else { 2.0 * label as f32 - 1.0 };
    if e.data.source != DataSource::Csv {
        let point = |test: bool| {
            move |p: &stepscope_core::data::Point| PlotPoint {
                x1: p.x1 as f32,
                x2: p.x2 as f32,
                value: value(p.label),
                test,
            }
        };
        let train = data.train_points.iter().map(point(false));
        let test = data.test_points.iter().map(point(true));
        return train.chain(test).collect();
    }
    let rows = |table: &stepscope_core::data::Table, test: bool| {
        let t = table.target_width;
        table
            .inputs
            .chunks_exact(2)
            .zip(table.targets.chunks_exact(t))
            .map(|(x, y)| {
                let v = match e.loss {
                    Loss::BceWithLogits => 2.0 * y[0] - 1.0,
                    Loss::CrossEntropy if !multiclass => 2.0 * y[0] - 1.0,
                    Loss::CrossEntropy => y[0],
                    Loss::Mse => y[0].clamp(-1.0, 1.0),
                };
                PlotPoint { x1: x[0], x2: x[1], value: v, test }
            })
            .collect::<Vec<_>>()
    };
    let mut points = rows(&data.train, false);
    points.extend(rows(&data.test, true));
    points
}

/// The largest probability a multi-class value carries in its fraction.
pub const CERTAIN: f32 = 0.999;

/// Colour of a value in [-1, 1]: orange (-1) through white (0) to blue (+1),
/// as TensorFlow Playground. For multi-class, `value` is a class index plus
/// the model's probability for it (`class + p`, p < 1): the class's hue,
/// lighter than the points and paler the closer p is to chance
/// (1 / classes). A bare class index (a data point's label) is the full hue.
pub fn color(value: f32, classes: usize) -> [u8; 3] {
    if classes > 2 {
        let class = value.floor();
        let fraction = value - class;
        let chance = 1.0 / classes as f32;
        let mix = if fraction > 0.0 {
            // The plane: never quite white (a point of it always shows its
            // class), and never as strong as the data points drawn over it.
            let sure = ((fraction - chance) / (CERTAIN - chance)).clamp(0.0, 1.0);
            0.2 + 0.55 * sure
        } else {
            1.0
        };
        let [r, g, b] = hue(class as usize);
        let blend = |c: u8| (255.0 + (c as f32 - 255.0) * mix).round() as u8;
        return [blend(r), blend(g), blend(b)];
    }
    let v = value.clamp(-1.0, 1.0);
    let (from, to) = if v < 0.0 { ([245.0, 147.0, 34.0], -v) } else { ([8.0, 119.0, 189.0], v) };
    let mix = |c: f32| (255.0 + (c - 255.0) * to).round() as u8;
    [mix(from[0]), mix(from[1]), mix(from[2])]
}

/// The hue of class `k` (the first two are the binary data's orange and
/// blue).
fn hue(k: usize) -> [u8; 3] {
    const HUES: [[u8; 3]; 8] = [
        [245, 147, 34],
        [8, 119, 189],
        [46, 160, 67],
        [214, 39, 40],
        [148, 103, 189],
        [140, 86, 75],
        [227, 119, 194],
        [127, 127, 127],
    ];
    HUES[k % HUES.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_classes_take_a_hue_each_paler_where_the_model_is_unsure() {
        // Three classes: a label (bare index) is the full hue; a sure
        // output is lighter, so points stand out on it; an output at chance
        // is pale but still not white.
        assert_eq!(color(2.0, 3), [46, 160, 67]);
        let sure = color(2.0 + CERTAIN, 3);
        assert!(sure[1] > 160 && sure[0] > 46 && sure[1] < 255, "{sure:?}");
        let unsure = color(2.0 + 1.0 / 3.0, 3);
        assert!(unsure.iter().all(|&c| c > 180) && unsure != [255, 255, 255], "{unsure:?}");
        assert!(unsure[0] > sure[0], "paler where unsure");
        // The fraction is the softmax probability of the argmax.
        let v = output_value(&[0.0, 3.0, 0.0], Loss::CrossEntropy);
        let p = 3f32.exp() / (2.0 + 3f32.exp());
        assert_eq!(v.floor(), 1.0);
        assert!((v - 1.0 - p).abs() < 1e-6, "{v}");
        assert_eq!(output_value(&[0.0, 30.0, 0.0], Loss::CrossEntropy), 1.0 + CERTAIN);
    }

    #[test]
    fn colours_run_from_orange_through_white_to_blue() {
        assert_eq!(color(-1.0, 0), [245, 147, 34]);
        assert_eq!(color(0.0, 0), [255, 255, 255]);
        assert_eq!(color(1.0, 0), [8, 119, 189]);
    }
}
