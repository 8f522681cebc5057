//! Lines drawn into an RGBA image in Rust, for the network diagram's
//! links: the canvas's own strokes of a wide network's thousands of
//! anti-aliased links were rasterized on the page's thread when the frame
//! was finalized, 100–190 ms per redraw of a 6 × 64 network in headless
//! Chromium. Here they go into the image that already holds the
//! thumbnails, which is put once.

/// An RGBA image (non-premultiplied, as `ImageData`), `width` pixels a row.
pub struct Image<'a> {
    pub rgba: &'a mut [u8],
    pub width: usize,
    pub height: usize,
}

impl Image<'_> {
    /// Draws a line from (x0, y0) to (x1, y1), `line_width` pixels wide, in
    /// `rgb` at opacity `alpha`, anti-aliased by coverage across its width,
    /// over what the image holds ("source over").
    #[allow(clippy::too_many_arguments)]
    pub fn line(&mut self, (x0, y0): (f64, f64), (x1, y1): (f64, f64), line_width: f64, rgb: [u8; 3], alpha: f32) {
        let (dx, dy) = (x1 - x0, y1 - y0);
        let length = (dx * dx + dy * dy).sqrt();
        if length < 1e-9 || !length.is_finite() {
            return;
        }
        // Step along the major axis; across it the line covers
        // line_width / cos(angle) pixels.
        let steep = dy.abs() > dx.abs();
        let (major, minor) = if steep { (dy, dx) } else { (dx, dy) };
        let half = 0.5 * line_width * length / major.abs();
        let (start, end) = if steep { (y0.min(y1), y0.max(y1)) } else { (x0.min(x1), x0.max(x1)) };
        let slope = minor / major;
        let at_major = |m: f64| if steep { x0 + (m - y0) * slope } else { y0 + (m - x0) * slope };
        let limit = if steep { self.height } else { self.width } as f64;
        let across = if steep { self.width } else { self.height } as f64;
        let first = start.floor().max(0.0) as usize;
        let last = (end.ceil().min(limit - 1.0)).max(0.0) as usize;
        let (half, across_max) = (half as f32, across - 1.0);
        let (r, g, b) = (rgb[0] as f32, rgb[1] as f32, rgb[2] as f32);
        // Index steps of one pixel along and across the line.
        let (along_step, across_step) = if steep { (self.width, 1) } else { (1, self.width) };
        for m in first..=last {
            let centre_m = m as f64 + 0.5;
            if centre_m < start || centre_m > end {
                continue;
            }
            let c = at_major(centre_m);
            let lo = (c - half as f64 - 1.0).floor().max(0.0) as usize;
            let hi = (c + half as f64 + 1.0).ceil().min(across_max).max(0.0) as usize;
            let c = c as f32;
            let row = m * along_step;
            for n in lo..=hi {
                let coverage = (half + 0.5 - (n as f32 + 0.5 - c).abs()).clamp(0.0, 1.0);
                if coverage > 0.0 {
                    let at = (row + n * across_step) * 4;
                    if let Some(px) = self.rgba.get_mut(at..at + 4) {
                        blend(px, r, g, b, alpha * coverage);
                    }
                }
            }
        }
    }
}

/// "Source over" of (r, g, b) at opacity `a` onto the RGBA pixel `px`
/// (non-premultiplied). `as u8` saturates and truncates: + 0.5 rounds.
#[inline]
fn blend(px: &mut [u8], r: f32, g: f32, b: f32, a: f32) {
    let da = px[3] as f32 * (1.0 / 255.0);
    if da == 0.0 {
        px.copy_from_slice(&[(r + 0.5) as u8, (g + 0.5) as u8, (b + 0.5) as u8, (a * 255.0 + 0.5) as u8]);
        return;
    }
    let keep = da * (1.0 - a);
    let out = a + keep;
    let inv = 1.0 / out;
    px[0] = ((r * a + px[0] as f32 * keep) * inv + 0.5) as u8;
    px[1] = ((g * a + px[1] as f32 * keep) * inv + 0.5) as u8;
    px[2] = ((b * a + px[2] as f32 * keep) * inv + 0.5) as u8;
    px[3] = (out * 255.0 + 0.5) as u8;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alpha_sum(rgba: &[u8]) -> f64 {
        rgba.chunks(4).map(|p| p[3] as f64 / 255.0).sum()
    }

    #[test]
    fn a_line_covers_its_length_times_its_width() {
        for ((x0, y0), (x1, y1)) in
            [((2.0, 10.0), (60.0, 10.0)), ((2.0, 2.0), (30.0, 60.0)), ((5.0, 55.0), (60.0, 3.0))]
        {
            for width in [1.0, 2.5, 4.0] {
                let mut rgba = vec![0u8; 64 * 64 * 4];
                let mut image = Image { rgba: &mut rgba, width: 64, height: 64 };
                image.line((x0, y0), (x1, y1), width, [10, 20, 30], 1.0);
                let length = ((x1 - x0) * (x1 - x0) + (y1 - y0) * (y1 - y0)).sqrt();
                let covered = alpha_sum(&rgba);
                // Ends are cut square: the area is length × width, within
                // a pixel's worth at each end.
                assert!((covered - length * width).abs() <= 2.0 * width + 2.0, "{covered} vs {}", length * width);
                assert!(rgba.chunks(4).filter(|p| p[3] > 0).all(|p| p[..3] == [10, 20, 30]));
            }
        }
    }

    #[test]
    fn lines_blend_over_what_is_there_and_stay_inside() {
        let mut rgba = vec![255u8; 8 * 8 * 4];
        let mut image = Image { rgba: &mut rgba, width: 8, height: 8 };
        // Half-opaque black over opaque white: grey, still opaque.
        image.line((-5.0, 4.5), (20.0, 4.5), 1.0, [0, 0, 0], 0.5);
        let px = &rgba[(4 * 8 + 3) * 4..(4 * 8 + 3) * 4 + 4];
        assert_eq!(px, [128, 128, 128, 255]);
        // Off the image, degenerate or non-finite: nothing, no panic.
        let mut image = Image { rgba: &mut rgba, width: 8, height: 8 };
        image.line((100.0, 100.0), (200.0, 300.0), 3.0, [0, 0, 0], 1.0);
        image.line((1.0, 1.0), (1.0, 1.0), 3.0, [0, 0, 0], 1.0);
        image.line((f64::NAN, 1.0), (3.0, 1.0), 3.0, [0, 0, 0], 1.0);
    }
}
