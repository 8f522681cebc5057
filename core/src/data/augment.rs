//! Data augmentation: each training image is changed at random as it is
//! served, the work a PyTorch DataLoader's workers do in `__getitem__`.
//!
//! The draws of a row depend only on the experiment's seed and the row's
//! place in the run (the batcher's global counter k), never on who makes
//! the batch: the training loop, a loader worker on the page, or a loader
//! thread natively, in any number, give the same bits. (A stream of one
//! generator would tie the numbers to the order the rows were made in.)
//!
//! For each image (C × H × W, every channel moved alike), in this order:
//! 1. `shift`: a translation by (dy, dx), each uniform in −s..=s whole
//!    pixels, the pixels it uncovers zero: what torchvision's
//!    `RandomCrop(side, padding=s)` gives on zero-background images.
//! 2. `elastic` (Simard, Steinkraus & Platt 2003, "Best practices for
//!    convolutional neural networks applied to visual document analysis"):
//!    two fields of uniform noise in [−1, 1), one per axis, each smoothed
//!    by a Gaussian of `sigma` pixels (separable, truncated at 4σ as
//!    SciPy's `gaussian_filter`, zero outside the image) and scaled by
//!    `alpha`; each pixel is then read bilinearly at its displaced place.
//!
//! Without elastic, a shift moves whole pixels and copies them exactly.

use crate::experiment::Augment;
use crate::rng::{stream, Rng};

/// The generator of training row `k`'s draws: its own stream of the seed.
pub fn row_rng(seed: u64, k: u64) -> Rng {
    Rng::new(seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15), stream::AUGMENT)
}

/// Applies an `Augment` to images of one shape, with its own scratch.
#[derive(Clone, Debug)]
pub struct Augmenter {
    spec: Augment,
    seed: u64,
    shape: [usize; 3],
    kernel: Vec<f32>,
    /// Displacement fields (y, x), a blur's half-way buffer, the image read.
    field: [Vec<f32>; 2],
    half: Vec<f32>,
    source: Vec<f32>,
}

impl Augmenter {
    /// None where `spec` changes nothing.
    pub fn new(spec: &Augment, seed: u64, shape: [usize; 3]) -> Option<Augmenter> {
        if !spec.is_active() {
            return None;
        }
        let kernel = spec.elastic.map_or_else(Vec::new, |e| gaussian_kernel(e.sigma));
        let plane = shape[1] * shape[2];
        let elastic = spec.elastic.is_some_and(|e| e.alpha > 0.0);
        let fields = if elastic { plane } else { 0 };
        Some(Augmenter {
            spec: spec.clone(),
            seed,
            shape,
            kernel,
            field: [vec![0.0; fields], vec![0.0; fields]],
            half: vec![0.0; fields],
            source: vec![0.0; shape[0] * plane],
        })
    }

    /// Bytes of its scratch (the memory budget counts them).
    pub fn bytes(&self) -> u64 {
        4 * (self.kernel.len() + 2 * self.field[0].len() + self.half.len() + self.source.len()) as u64
    }

    /// Changes `image` (C × H × W) as training row `k` is changed.
    pub fn apply(&mut self, image: &mut [f32], k: u64) {
        let [c, h, w] = self.shape;
        debug_assert_eq!(image.len(), c * h * w);
        let mut rng = row_rng(self.seed, k);
        let s = self.spec.shift as u64;
        let (dy, dx) = if s > 0 {
            let dy = rng.below(2 * s + 1) as i64 - s as i64;
            let dx = rng.below(2 * s + 1) as i64 - s as i64;
            (dy, dx)
        } else {
            (0, 0)
        };
        self.source.copy_from_slice(image);
        match self.spec.elastic.filter(|e| e.alpha > 0.0) {
            None => shift_image(&self.source, image, self.shape, dy, dx),
            Some(e) => {
                for f in 0..2 {
                    for v in self.field[f].iter_mut() {
                        *v = rng.uniform(-1.0, 1.0) as f32;
                    }
                    blur(&mut self.field[f], &mut self.half, &self.kernel, h, w);
                }
                let alpha = e.alpha as f32;
                for y in 0..h {
                    for x in 0..w {
                        let at = y * w + x;
                        let sy = (y as i64 - dy) as f32 + alpha * self.field[0][at];
                        let sx = (x as i64 - dx) as f32 + alpha * self.field[1][at];
                        for ch in 0..c {
                            let plane = &self.source[ch * h * w..(ch + 1) * h * w];
                            image[ch * h * w + at] = bilinear(plane, h, w, sy, sx);
                        }
                    }
                }
            }
        }
    }
}

/// Moves every channel by whole pixels, zero where nothing comes from.
fn shift_image(source: &[f32], image: &mut [f32], [c, h, w]: [usize; 3], dy: i64, dx: i64) {
    for ch in 0..c {
        for y in 0..h {
            for x in 0..w {
                let (sy, sx) = (y as i64 - dy, x as i64 - dx);
                let inside = (0..h as i64).contains(&sy) && (0..w as i64).contains(&sx);
                image[(ch * h + y) * w + x] =
                    if inside { source[(ch * h + sy as usize) * w + sx as usize] } else { 0.0 };
            }
        }
    }
}

/// The normalised Gaussian of `sigma`, radius `round(4σ)` (SciPy's
/// `truncate=4.0`: `int(4 * sigma + 0.5)`).
pub fn gaussian_kernel(sigma: f64) -> Vec<f32> {
    let radius = (4.0 * sigma + 0.5) as i64;
    let weights: Vec<f64> = (-radius..=radius).map(|i| libm::exp(-0.5 * (i * i) as f64 / (sigma * sigma))).collect();
    let sum: f64 = weights.iter().sum();
    weights.iter().map(|w| (w / sum) as f32).collect()
}

/// Smooths an H × W field in place: rows, then columns, zero outside.
fn blur(field: &mut [f32], half: &mut [f32], kernel: &[f32], h: usize, w: usize) {
    // Along x: h lines of w, steps of 1; along y: w lines of h, steps of w.
    blur_lines(field, half, kernel, (h, w), (w, 1));
    blur_lines(half, field, kernel, (w, h), (1, w));
}

/// Each of `lines` lines of `len` values (line i starts at i·stride.0,
/// its values stride.1 apart) convolved with `kernel`, zero outside, the
/// taps summed in order.
fn blur_lines(src: &[f32], dst: &mut [f32], kernel: &[f32], (lines, len): (usize, usize), stride: (usize, usize)) {
    let r = (kernel.len() / 2) as i64;
    for i in 0..lines {
        for x in 0..len {
            let mut sum = 0.0f32;
            for (t, &k) in kernel.iter().enumerate() {
                let xx = x as i64 + t as i64 - r;
                if (0..len as i64).contains(&xx) {
                    sum += k * src[i * stride.0 + xx as usize * stride.1];
                }
            }
            dst[i * stride.0 + x * stride.1] = sum;
        }
    }
}

/// The plane read at (y, x) between pixels, zero outside.
fn bilinear(plane: &[f32], h: usize, w: usize, y: f32, x: f32) -> f32 {
    let (y0, x0) = (y.floor(), x.floor());
    let (fy, fx) = (y - y0, x - x0);
    let (y0, x0) = (y0 as i64, x0 as i64);
    let at = |yy: i64, xx: i64| {
        if (0..h as i64).contains(&yy) && (0..w as i64).contains(&xx) {
            plane[yy as usize * w + xx as usize]
        } else {
            0.0
        }
    };
    let top = at(y0, x0) * (1.0 - fx) + at(y0, x0 + 1) * fx;
    let bottom = at(y0 + 1, x0) * (1.0 - fx) + at(y0 + 1, x0 + 1) * fx;
    top * (1.0 - fy) + bottom * fy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Elastic;

    fn image(shape: [usize; 3]) -> Vec<f32> {
        (0..shape.iter().product::<usize>()).map(|i| ((i * 37) % 11) as f32 / 10.0).collect()
    }

    #[test]
    fn a_shift_moves_whole_pixels_and_fills_with_zero() {
        let shape = [2, 6, 5];
        let original = image(shape);
        let spec = Augment { shift: 2, elastic: None };
        let mut a = Augmenter::new(&spec, 7, shape).unwrap();
        let mut moved = 0;
        for k in 0..40 {
            let mut img = original.clone();
            a.apply(&mut img, k);
            // Find the shift the row drew and check every pixel against it.
            let mut rng = row_rng(7, k);
            let dy = rng.below(5) as i64 - 2;
            let dx = rng.below(5) as i64 - 2;
            moved += usize::from(dy != 0 || dx != 0);
            for ch in 0..2 {
                for y in 0..6i64 {
                    for x in 0..5i64 {
                        let (sy, sx) = (y - dy, x - dx);
                        let want = if (0..6).contains(&sy) && (0..5).contains(&sx) {
                            original[(ch * 6 + sy as usize) * 5 + sx as usize]
                        } else {
                            0.0
                        };
                        assert_eq!(img[(ch * 6 + y as usize) * 5 + x as usize], want);
                    }
                }
            }
        }
        assert!(moved > 30, "most rows move: {moved}");
    }

    #[test]
    fn the_draws_belong_to_the_row_not_to_the_order_rows_are_made_in() {
        let shape = [1, 12, 12];
        let spec = Augment { shift: 1, elastic: Some(Elastic { alpha: 8.0, sigma: 2.0 }) };
        let original = image(shape);
        let run = |order: &[u64]| {
            let mut a = Augmenter::new(&spec, 3, shape).unwrap();
            let mut out = vec![Vec::new(); order.len()];
            for &k in order {
                let mut img = original.clone();
                a.apply(&mut img, k);
                out[k as usize] = img;
            }
            out
        };
        let forward = run(&[0, 1, 2, 3, 4, 5]);
        let backward = run(&[5, 3, 1, 4, 2, 0]);
        assert_eq!(forward, backward);
        assert_ne!(forward[0], forward[1]);
        assert_ne!(forward[0], original, "elastic moves the pixels");
        // Another seed, other draws.
        let mut other = Augmenter::new(&spec, 4, shape).unwrap();
        let mut img = original.clone();
        other.apply(&mut img, 0);
        assert_ne!(img, forward[0]);
    }

    #[test]
    fn elastic_with_no_displacement_reads_every_pixel_where_it_was() {
        // Alpha 0 is inactive; a tiny alpha moves a pixel by far less than
        // one, so bilinear reading gives back nearly the image.
        assert!(Augmenter::new(&Augment { shift: 0, elastic: Some(Elastic { alpha: 0.0, sigma: 4.0 }) }, 1, [1, 8, 8])
            .is_none());
        let shape = [1, 10, 10];
        let original = image(shape);
        let spec = Augment { shift: 0, elastic: Some(Elastic { alpha: 1e-4, sigma: 1.0 }) };
        let mut a = Augmenter::new(&spec, 1, shape).unwrap();
        let mut img = original.clone();
        a.apply(&mut img, 9);
        for (y, (got, want)) in img.iter().zip(&original).enumerate() {
            // Edge pixels lose the share read from outside the image.
            assert!((got - want).abs() < 2e-4, "pixel {y}: {got} vs {want}");
        }
    }

    #[test]
    fn the_gaussian_is_scipys() {
        // scipy.ndimage's kernel for sigma 1: radius 4, normalised.
        let k = gaussian_kernel(1.0);
        assert_eq!(k.len(), 9);
        let sum: f32 = k.iter().sum();
        assert!((sum - 1.0).abs() < 1e-6);
        assert!((k[4] - 0.398_943_55).abs() < 1e-4, "centre {}", k[4]);
        assert_eq!(gaussian_kernel(4.0).len(), 33);
    }

    #[test]
    fn limits_are_named() {
        let too_far = Augment { shift: 5, elastic: None };
        assert!(too_far.check(8).unwrap_err().contains("at most half"));
        let wide = Augment { shift: 0, elastic: Some(Elastic { alpha: 30.0, sigma: 20.0 }) };
        assert!(wide.check(28).unwrap_err().contains("sigma"));
        let nan = Augment { shift: 0, elastic: Some(Elastic { alpha: f64::NAN, sigma: 2.0 }) };
        assert!(nan.check(28).unwrap_err().contains("alpha"));
        assert_eq!(
            Augment { shift: 2, elastic: Some(Elastic { alpha: 34.0, sigma: 4.0 }) }.describe(),
            "shift ±2 px, elastic α 34 σ 4"
        );
    }
}
