//! The views inside a conv net, ConvNetJS's: for one test image, every
//! conv and pool layer's output, a map per channel; and every conv
//! layer's filters as images. From the engine's real parameters and the
//! CPU reference forward pass of that one image.

use stepscope_core::data::Table;
use stepscope_core::engine::{forward_pass, Activations};
use stepscope_core::model::{LayerOp, Layout};
use stepscope_core::Experiment;

/// Channels of a layer drawn as maps, at most.
pub const SHOWN_MAPS: usize = 16;
/// Filters of a layer drawn, at most, and input channels of each.
pub const SHOWN_CONV_FILTERS: usize = 16;
pub const SHOWN_FILTER_CHANNELS: usize = 8;

/// One conv or pool layer as the page draws it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConvLayerView {
    /// Index of the layer in the model.
    pub layer: usize,
    /// The layer in words (`conv2d 8×3×3 pad 1`).
    pub words: String,
    /// Its output: channels, height, width.
    pub shape: [usize; 3],
    /// The first `SHOWN_MAPS` channels' maps, (height, width) each, scaled
    /// to [-1, 1] by the largest magnitude in that map.
    pub maps: Vec<Vec<f32>>,
    /// A conv layer's kernel side, its input channels, and how many of
    /// them are drawn per filter.
    pub kernel: usize,
    pub in_channels: usize,
    pub filter_channels: usize,
    /// A conv layer's first `SHOWN_CONV_FILTERS` filters: each (kernel,
    /// kernel · filter_channels), its input channels side by side, scaled to
    /// [-1, 1] by the filter's largest magnitude. Empty for a pool.
    pub filters: Vec<Vec<f32>>,
    /// The same filters' gradients of the last step, laid out alike, each
    /// scaled by its own largest magnitude (empty where none was given).
    pub gradients: Vec<Vec<f32>>,
}

/// The conv views of one test image.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConvViews {
    /// Row of the test set shown, and its image [C, H, W] (pixels in [0, 1]).
    pub row: usize,
    pub input_shape: [usize; 3],
    pub image: Vec<f32>,
    pub layers: Vec<ConvLayerView>,
}

fn scaled(values: &[f32]) -> Vec<f32> {
    let scale = values.iter().fold(1e-12f32, |m, v| if v.is_finite() { m.max(v.abs()) } else { m });
    values.iter().map(|v| v / scale).collect()
}

/// Each filter's first `SHOWN_FILTER_CHANNELS` input channels side by side:
/// `weights` is the layer's (filters, channels, kernel, kernel) block.
pub fn filter_images(weights: &[f32], channels: usize, kernel: usize) -> Vec<Vec<f32>> {
    let shown = channels.min(SHOWN_FILTER_CHANNELS);
    let per_filter = channels * kernel * kernel;
    weights
        .chunks_exact(per_filter.max(1))
        .take(SHOWN_CONV_FILTERS)
        .map(|w| {
            let mut image = Vec::with_capacity(kernel * kernel * shown);
            for i in 0..kernel {
                for c in 0..shown {
                    image.extend_from_slice(&w[c * kernel * kernel + i * kernel..][..kernel]);
                }
            }
            scaled(&image)
        })
        .collect()
}

/// The views of test row `row` (None for a net without conv or pool
/// layers, or no test rows), with the filters' gradients where `grads`
/// (the last step's, laid out as `params`) are given.
pub fn conv_views(
    e: &Experiment,
    layout: &Layout,
    params: &[f32],
    grads: Option<&[f32]>,
    test: &Table,
    row: usize,
) -> Option<ConvViews> {
    let input_shape = e.model.input_shape?;
    if !layout.layers.iter().any(|l| l.op != LayerOp::Dense) || row >= test.rows() {
        return None;
    }
    let image = test.inputs[row * test.input_width..][..test.input_width].to_vec();
    let mut acts = Activations::try_new(layout, 1).ok()?;
    forward_pass(&mut acts, params, &image, layout, e);
    let layers = layout
        .layers
        .iter()
        .zip(e.model.layers.iter().zip(e.output_words()))
        .enumerate()
        .filter_map(|(l, (shape, (spec, _)))| {
            let (c, h, w, kernel, filters, gradients) = match shape.op {
                LayerOp::Dense => return None,
                LayerOp::Conv(conv) => {
                    let images =
                        |t: &[f32]| filter_images(&t[shape.weight_offset..shape.bias_offset], conv.c_in, conv.kernel);
                    let gradients = grads.filter(|g| g.len() == params.len()).map(images).unwrap_or_default();
                    (conv.filters, conv.out_h(), conv.out_w(), conv.kernel, images(params), gradients)
                }
                LayerOp::MaxPool(p) | LayerOp::AvgPool(p) => (p.c, p.out_h(), p.out_w(), 0, Vec::new(), Vec::new()),
            };
            let out = &acts.a[l];
            let maps = out.chunks_exact((h * w).max(1)).take(c.min(SHOWN_MAPS)).map(scaled).collect();
            let in_channels = match shape.op {
                LayerOp::Conv(conv) => conv.c_in,
                _ => 0,
            };
            let filter_channels = in_channels.min(SHOWN_FILTER_CHANNELS);
            Some(ConvLayerView {
                layer: l,
                words: spec.words(),
                shape: [c, h, w],
                maps,
                kernel,
                in_channels,
                filter_channels,
                filters,
                gradients,
            })
        })
        .collect();
    Some(ConvViews { row, input_shape, image, layers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_shows_its_channels_side_by_side_scaled_by_its_largest() {
        // 2 filters × 2 channels × 2 × 2.
        let w: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        let f = filter_images(&w, 2, 2);
        assert_eq!(f.len(), 2);
        // Row 0: channel 0's (1, 2), channel 1's (5, 6); row 1: (3, 4), (7, 8).
        let expect: Vec<f32> = [1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0].iter().map(|v| v / 8.0).collect();
        assert_eq!(f[0], expect);
    }
}
