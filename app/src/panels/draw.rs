//! Canvas drawing helpers: a value grid as an image, and points.

use wasm_bindgen::{Clamped, JsCast};
use web_sys::{CanvasRenderingContext2d, HtmlCanvasElement, ImageData};

use crate::model::views::{color, PlotPoint};

pub fn context(canvas: &HtmlCanvasElement) -> Option<CanvasRenderingContext2d> {
    canvas.get_context("2d").ok().flatten().and_then(|c| c.dyn_into::<CanvasRenderingContext2d>().ok())
}

/// The context of a small image repainted whole with `putImageData`
/// (feature maps, filters, digits): a canvas kept in memory
/// (`willReadFrequently`) and opaque. The browser then paints it into the
/// page's own layer rather than giving each of a conv net's hundred-odd
/// canvases a GPU texture and a layer of its own, which made every frame's
/// layer update and commit cost tens of milliseconds on the page's thread.
pub fn image_context(canvas: &HtmlCanvasElement) -> Option<CanvasRenderingContext2d> {
    let options = web_sys::ContextAttributes2d::new();
    options.set_will_read_frequently(true);
    options.set_alpha(false);
    canvas
        .get_context_with_context_options("2d", &options)
        .ok()
        .flatten()
        .and_then(|c| c.dyn_into::<CanvasRenderingContext2d>().ok())
}

/// Sizes a canvas's backing store, only when it changes: setting a
/// canvas's width, even to the same value, reallocates and clears it, and
/// the browser lays out and rasterizes it anew (the largest main-thread
/// cost of drawing a wide network's views).
pub fn resize(canvas: &HtmlCanvasElement, width: u32, height: u32) {
    if canvas.width() != width {
        canvas.set_width(width);
    }
    if canvas.height() != height {
        canvas.set_height(height);
    }
}

/// Paints `values` ((side, side), each in [-1, 1]) over the whole canvas;
/// the canvas's own size is `side` × `side` (CSS scales it smoothly).
pub fn paint_grid(canvas: &HtmlCanvasElement, values: &[f32], side: usize, classes: usize) {
    let Some(ctx) = context(canvas) else { return };
    resize(canvas, side as u32, side as u32);
    let mut rgba = Vec::with_capacity(side * side * 4);
    for &v in values.iter().take(side * side) {
        let [r, g, b] = color(v, classes);
        rgba.extend([r, g, b, 255]);
    }
    if let Ok(image) = ImageData::new_with_u8_clamped_array_and_sh(Clamped(&rgba), side as u32, side as u32) {
        let _ = ctx.put_image_data(&image, 0.0, 0.0);
    }
}

/// Draws points on a canvas of `size` pixels covering `extent`
/// ([x1 min, x1 max, x2 min, x2 max]); test points get a dark ring.
pub fn paint_points(canvas: &HtmlCanvasElement, points: &[PlotPoint], extent: [f32; 4], size: f64, classes: usize) {
    let Some(ctx) = context(canvas) else { return };
    resize(canvas, size as u32, size as u32);
    ctx.clear_rect(0.0, 0.0, size, size);
    let [x_lo, x_hi, y_lo, y_hi] = extent;
    for p in points {
        let x = ((p.x1 - x_lo) / (x_hi - x_lo)) as f64 * size;
        let y = (1.0 - (p.x2 - y_lo) / (y_hi - y_lo)) as f64 * size;
        let [r, g, b] = color(if classes > 2 { p.value } else { p.value.signum() * p.value.abs().max(0.6) }, classes);
        ctx.begin_path();
        let _ = ctx.arc(x, y, 3.0, 0.0, std::f64::consts::TAU);
        ctx.set_fill_style_str(&format!("rgb({r},{g},{b})"));
        ctx.fill();
        ctx.set_line_width(if p.test { 1.5 } else { 0.8 });
        ctx.set_stroke_style_str(if p.test { "#111" } else { "#fff" });
        ctx.stroke();
    }
}
