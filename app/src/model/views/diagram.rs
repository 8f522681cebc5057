//! The network diagram as one RGBA image: a thumbnail per drawn neuron
//! (its output over the input plane) and the links between them, coloured
//! by sign and sized by the weight, the gradient or the last update.
//!
//! It is drawn on the engine's side, with the views (`Runner::views`): the
//! page puts the image once. Drawn on the page, a wide network's thousands
//! of anti-aliased links cost the page's thread 100–190 ms a redraw (the
//! canvas's strokes, rasterized when the frame was finalized), and in
//! Rust on the page still 160 ms for a 6 × 64 network.

use stepscope_core::experiment::DataSource;
use stepscope_core::model::Layout;

use super::raster::Image;
use super::{color, Snapshot, SHOWN_UNITS};

/// What the diagram's links show.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum LinkMode {
    #[default]
    Weight,
    Gradient,
    Update,
}

/// The diagram, drawn.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Diagram {
    pub mode: LinkMode,
    pub width: usize,
    pub height: usize,
    /// RGBA, `width` pixels a row (as `ImageData`).
    #[serde(with = "crate::model::bytes::vec")]
    pub rgba: Vec<u8>,
    /// "+N more" under a layer wider than the diagram shows: (x, y, text).
    pub notes: Vec<(f64, f64, String)>,
}

const NODE: f64 = 34.0;
/// Steps of a link's drawn magnitude (width and opacity).
const LINK_LEVELS: usize = 8;
const GAP_Y: f64 = 40.0;
/// Space between columns: 96 px, less for a deep network so that the
/// diagram stays about `MAX_WIDTH` wide (CSS scales it into its column).
const GAP_X: f64 = 96.0;
const MIN_GAP_X: f64 = 48.0;
const MAX_WIDTH: f64 = 720.0;

/// Draws the diagram of `snap` for `e` with links showing `mode`; None when
/// the snapshot is from before a model change.
pub fn draw_diagram(e: &stepscope_core::Experiment, snap: &Snapshot, mode: LinkMode) -> Option<Diagram> {
    if e.gpt().is_some() || e.model.layers.iter().any(|l| l.kind.is_spatial()) {
        // A transformer is drawn by the page from its shape (`panels::gpt`),
        // a conv net by its feature maps and filters (`panels::images`).
        return None;
    }
    let layout = Layout::new(e);
    let widths = e.widths();
    let drawn = |n: usize| n.min(SHOWN_UNITS);
    let fits = snap.links.len() == layout.layers.len()
        && snap.links.iter().zip(&layout.layers).all(|(b, l)| (b.outs, b.ins) == (drawn(l.units), drawn(l.inputs)));
    if !fits {
        return None;
    }
    let tallest = widths.iter().copied().max().unwrap_or(1).min(SHOWN_UNITS) as f64;
    // Room under the columns for "+N more".
    let extra = if widths.iter().any(|&n| n > SHOWN_UNITS) { 16.0 } else { 0.0 };
    let gaps = (widths.len() - 1).max(1) as f64;
    let gap_x = ((MAX_WIDTH - NODE - 8.0) / gaps).clamp(MIN_GAP_X, GAP_X);
    let (w, h) = (gap_x * (widths.len() - 1) as f64 + NODE + 8.0, GAP_Y * tallest + 8.0 + extra);
    let pos = |col: usize, row: usize| -> (f64, f64) {
        let n = widths[col].min(SHOWN_UNITS) as f64;
        let top = (h - extra - GAP_Y * n) / 2.0;
        (4.0 + gap_x * col as f64, top + GAP_Y * row as f64 + (GAP_Y - NODE) / 2.0)
    };
    let kind = match mode {
        LinkMode::Weight => 0,
        LinkMode::Gradient => 1,
        LinkMode::Update => 2,
    };
    // Inputs: each feature over the plane; then every unit's output.
    let (cw, ch) = (w as usize, h as usize);
    let mut image = vec![0u8; cw * ch * 4];
    let features = e.data.features();
    for (col, &width) in widths.iter().enumerate() {
        for row in 0..width.min(SHOWN_UNITS) {
            let grid: Vec<f32> = if col == 0 {
                feature_grid(e, snap, row, &features)
            } else {
                snap.neurons.get(col - 1).and_then(|layer| layer.get(row)).cloned().unwrap_or_default()
            };
            let (x, y) = pos(col, row);
            thumbnail(&mut image, cw, &grid, snap.grid, x.round() as usize, y.round() as usize);
        }
    }
    // Links, by sign and by magnitude in LINK_LEVELS steps (width and
    // opacity), between the columns.
    let mut picture = Image { rgba: &mut image, width: cw, height: ch };
    for (l, block) in snap.links.iter().enumerate() {
        let (values, max) = (&block.values[kind], block.max[kind].max(1e-12));
        for o in 0..block.outs {
            for i in 0..block.ins {
                let v = values[o * block.ins + i] / max;
                let level = ((v.abs() * LINK_LEVELS as f32) as usize).min(LINK_LEVELS - 1);
                let magnitude = (level as f32 + 0.5) / LINK_LEVELS as f32;
                let (x0, y0) = pos(l, i);
                let (x1, y1) = pos(l + 1, o);
                let rgb = color(if v >= 0.0 { 1.0 } else { -1.0 }, 0);
                let width = 0.5 + 3.5 * magnitude as f64;
                picture.line((x0 + NODE, y0 + NODE / 2.0), (x1, y1 + NODE / 2.0), width, rgb, 0.25 + 0.75 * magnitude);
            }
        }
    }
    // The rest of a wide layer, named rather than drawn.
    let notes = widths
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > SHOWN_UNITS)
        .map(|(col, &width)| {
            let (x, y) = pos(col, SHOWN_UNITS - 1);
            (x, y + NODE + 12.0, format!("+{} more", width - SHOWN_UNITS))
        })
        .collect();
    Some(Diagram { mode, width: cw, height: ch, rgba: image, notes })
}

fn feature_grid(
    e: &stepscope_core::Experiment,
    snap: &Snapshot,
    index: usize,
    features: &[stepscope_core::experiment::Feature],
) -> Vec<f32> {
    if e.data.source == DataSource::Csv || snap.boundary.is_none() {
        return Vec::new();
    }
    let [x_lo, x_hi, y_lo, y_hi] = snap.extent;
    let Some(feature) = features.get(index) else { return Vec::new() };
    let side = snap.grid;
    let raw: Vec<f32> = (0..side * side)
        .map(|i| {
            let (r, c) = (i / side, i % side);
            let x2 = y_hi - (r as f32 + 0.5) / side as f32 * (y_hi - y_lo);
            let x1 = x_lo + (c as f32 + 0.5) / side as f32 * (x_hi - x_lo);
            feature.eval(x1 as f64, x2 as f64) as f32
        })
        .collect();
    let scale = raw.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    raw.iter().map(|v| v / scale).collect()
}

/// A NODE×NODE picture of a (n, n) grid, nearest-sampled, written into
/// `image` (RGBA, `width` pixels a row) at (x, y); grey when there is
/// nothing to show.
fn thumbnail(image: &mut [u8], width: usize, grid: &[f32], n: usize, x: usize, y: usize) {
    let side = NODE as usize;
    for r in 0..side {
        for c in 0..side {
            let rgb = if n > 0 && grid.len() == n * n {
                color(grid[(r * n / side) * n + c * n / side], 0)
            } else {
                [200, 200, 200]
            };
            let at = ((y + r) * width + x + c) * 4;
            if let Some(px) = image.get_mut(at..at + 4) {
                px.copy_from_slice(&[rgb[0], rgb[1], rgb[2], 255]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::edit::default_experiment;

    #[test]
    fn the_diagram_draws_thumbnails_and_links_by_mode() {
        let e = default_experiment();
        let layout = Layout::new(&e);
        let mut snap = Snapshot { grid: 4, ..Snapshot::default() };
        snap.links = layout
            .layers
            .iter()
            .map(|l| {
                let (outs, ins) = (l.units.min(SHOWN_UNITS), l.inputs.min(SHOWN_UNITS));
                let block = |sign: f32| (0..outs * ins).map(|k| sign * (k % 3) as f32).collect::<Vec<f32>>();
                super::super::LinkBlock {
                    outs,
                    ins,
                    values: [block(1.0), block(-1.0), vec![0.0; outs * ins]],
                    max: [2.0; 3],
                }
            })
            .collect();
        snap.neurons = layout.layers.iter().map(|l| vec![vec![0.5; 16]; l.units.min(SHOWN_UNITS)]).collect();
        let weights = draw_diagram(&e, &snap, LinkMode::Weight).unwrap();
        let gradients = draw_diagram(&e, &snap, LinkMode::Gradient).unwrap();
        assert_eq!(weights.rgba.len(), 4 * weights.width * weights.height);
        assert_ne!(weights.rgba, gradients.rgba, "the links follow the mode");
        let drawn = |d: &Diagram| d.rgba.chunks(4).filter(|p| p[3] > 0).count();
        let updates = draw_diagram(&e, &snap, LinkMode::Update).unwrap();
        // Zero updates still draw the thinnest links, over the thumbnails.
        assert!(drawn(&weights) > drawn(&updates) && drawn(&updates) > 0);
        assert!(weights.notes.is_empty());
        // A snapshot of another model draws nothing.
        snap.links.pop();
        assert!(draw_diagram(&e, &snap, LinkMode::Weight).is_none());
    }
}
