//! The built-in 2-D datasets of TensorFlow Playground (`dataset.ts`),
//! drawn from our seeded RNG. Noise is a fraction (0.1 = the playground's
//! "10"). Classes are 0 and 1 (the playground's -1 and +1). `spiral3` is
//! CS231n's three-arm spiral, classes 0, 1 and 2.

use std::f64::consts::PI;

use super::Point;
use crate::experiment::DataSource;
use crate::rng::Rng;

pub fn generate_points(source: DataSource, samples: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    match source {
        DataSource::Circle => circle(samples, noise, rng),
        DataSource::Xor => xor(samples, noise, rng),
        DataSource::Gauss => two_gauss(samples, noise, rng),
        DataSource::Spiral => spiral(samples, noise, rng),
        DataSource::RegPlane => reg_plane(samples, noise, rng),
        DataSource::RegGauss => reg_gauss(samples, noise, rng),
        DataSource::Spiral3 => spiral3(samples, noise, rng),
        // Not points of the plane: rows of a table (`Dataset::load`).
        DataSource::Digits | DataSource::Mnist | DataSource::Csv | DataSource::Text | DataSource::Shakespeare => {
            Vec::new()
        }
    }
}

fn class(positive: bool) -> f64 {
    if positive {
        1.0
    } else {
        0.0
    }
}

fn circle(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    let radius = 5.0;
    let mut points = Vec::with_capacity(n);
    // Inside the circle: class 1; the ring outside: class 0. The label is
    // taken at the noisy position, so noise flips points near the edge.
    for (count, (r_lo, r_hi)) in [(n / 2, (0.0, radius * 0.5)), (n - n / 2, (radius * 0.7, radius))] {
        for _ in 0..count {
            let r = rng.uniform(r_lo, r_hi);
            let angle = rng.uniform(0.0, 2.0 * PI);
            let x1 = r * angle.sin();
            let x2 = r * angle.cos();
            let nx = rng.uniform(-radius, radius) * noise;
            let ny = rng.uniform(-radius, radius) * noise;
            let inside = ((x1 + nx).powi(2) + (x2 + ny).powi(2)).sqrt() < radius * 0.5;
            points.push(Point { x1, x2, label: class(inside) });
        }
    }
    points
}

fn xor(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    let padding = 0.3;
    (0..n)
        .map(|_| {
            let mut x1 = rng.uniform(-5.0, 5.0);
            x1 += if x1 > 0.0 { padding } else { -padding };
            let mut x2 = rng.uniform(-5.0, 5.0);
            x2 += if x2 > 0.0 { padding } else { -padding };
            let nx = rng.uniform(-5.0, 5.0) * noise;
            let ny = rng.uniform(-5.0, 5.0) * noise;
            Point { x1, x2, label: class((x1 + nx) * (x2 + ny) >= 0.0) }
        })
        .collect()
}

fn two_gauss(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    // The playground maps noise 0..0.5 linearly to variance 0.5..4.
    let variance = 0.5 + noise / 0.5 * 3.5;
    let mut points = Vec::with_capacity(n);
    for (count, centre, label) in [(n / 2, 2.0, 1.0), (n - n / 2, -2.0, 0.0)] {
        for _ in 0..count {
            let x1 = rng.normal(centre, variance);
            let x2 = rng.normal(centre, variance);
            points.push(Point { x1, x2, label });
        }
    }
    points
}

fn spiral(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    let mut points = Vec::with_capacity(n);
    for (count, delta, label) in [(n / 2, 0.0, 1.0), (n - n / 2, PI, 0.0)] {
        for i in 0..count {
            let r = i as f64 / count as f64 * 5.0;
            let t = 1.75 * i as f64 / count as f64 * 2.0 * PI + delta;
            let x1 = r * t.sin() + rng.uniform(-1.0, 1.0) * noise;
            let x2 = r * t.cos() + rng.uniform(-1.0, 1.0) * noise;
            points.push(Point { x1, x2, label });
        }
    }
    points
}

/// CS231n's spiral (<https://cs231n.github.io/neural-networks-case-study/>):
/// arm k of K = 3 takes n/K points (the first n mod K arms one more), the
/// i-th of m at radius r = i/(m−1) and angle t = 4k + 4·i/(m−1) + ε with
/// ε ~ N(0, σ²), point (r sin t, r cos t). CS231n's σ = 0.2 is noise 0.1
/// here (σ = 2·noise); radii are scaled by 5 to fill the plane as the
/// playground's spiral does.
fn spiral3(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    const ARMS: usize = 3;
    let sigma = 2.0 * noise;
    let mut points = Vec::with_capacity(n);
    for arm in 0..ARMS {
        let count = n / ARMS + usize::from(arm < n % ARMS);
        let last = (count.max(2) - 1) as f64;
        for i in 0..count {
            let along = i as f64 / last;
            let r = 5.0 * along;
            let t = 4.0 * (arm as f64 + along) + rng.normal(0.0, sigma * sigma);
            points.push(Point { x1: r * t.sin(), x2: r * t.cos(), label: arm as f64 });
        }
    }
    points
}

fn reg_plane(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    let radius = 6.0;
    (0..n)
        .map(|_| {
            let x1 = rng.uniform(-radius, radius);
            let x2 = rng.uniform(-radius, radius);
            let nx = rng.uniform(-radius, radius) * noise;
            let ny = rng.uniform(-radius, radius) * noise;
            // Label scale: x1 + x2 in [-10, 10] maps to [-1, 1].
            let label = (x1 + nx + x2 + ny) / 10.0;
            Point { x1, x2, label }
        })
        .collect()
}

fn reg_gauss(n: usize, noise: f64, rng: &mut Rng) -> Vec<Point> {
    let gaussians =
        [(-4.0, 2.5, 1.0), (0.0, 2.5, -1.0), (4.0, 2.5, 1.0), (-4.0, -2.5, -1.0), (0.0, -2.5, 1.0), (4.0, -2.5, -1.0)];
    let label_at = |x1: f64, x2: f64| {
        let mut label: f64 = 0.0;
        for (cx, cy, sign) in gaussians {
            // Distance 0..2 maps to 1..0, clamped.
            let dist = ((x1 - cx) * (x1 - cx) + (x2 - cy) * (x2 - cy)).sqrt();
            let value = sign * (1.0 - dist / 2.0).clamp(0.0, 1.0);
            if value.abs() > label.abs() {
                label = value;
            }
        }
        label
    };
    let radius = 6.0;
    (0..n)
        .map(|_| {
            let x1 = rng.uniform(-radius, radius);
            let x2 = rng.uniform(-radius, radius);
            let nx = rng.uniform(-radius, radius) * noise;
            let ny = rng.uniform(-radius, radius) * noise;
            Point { x1, x2, label: label_at(x1 + nx, x2 + ny) }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_gives_the_requested_count_with_valid_labels() {
        for source in [
            DataSource::Circle,
            DataSource::Xor,
            DataSource::Gauss,
            DataSource::Spiral,
            DataSource::RegPlane,
            DataSource::RegGauss,
            DataSource::Spiral3,
        ] {
            let points = generate_points(source, 101, 0.2, &mut Rng::new(1, 1));
            assert_eq!(points.len(), 101, "{source:?}");
            for p in &points {
                assert!(p.x1.is_finite() && p.x2.is_finite());
                match source.classes() {
                    None => assert!((-1.5..=1.5).contains(&p.label), "{source:?} {p:?}"),
                    Some(classes) => {
                        assert!(p.label.fract() == 0.0 && (0.0..classes as f64).contains(&p.label), "{p:?}")
                    }
                }
            }
        }
    }

    #[test]
    fn spiral3_is_balanced_seeded_and_noisy_as_asked() {
        let draw = |n, noise, seed| spiral3(n, noise, &mut Rng::new(seed, 1));
        assert_eq!(draw(301, 0.1, 4), draw(301, 0.1, 4));
        assert_ne!(draw(301, 0.1, 4), draw(301, 0.1, 5));
        let counts = |points: &[Point]| {
            let mut c = [0; 3];
            points.iter().for_each(|p| c[p.label as usize] += 1);
            c
        };
        assert_eq!(counts(&draw(301, 0.1, 4)), [101, 100, 100]);
        assert_eq!(counts(&draw(2, 0.0, 4)), [1, 1, 0]);
        // Without noise, arm k's i-th point of m lies at radius 5·i/(m−1)
        // and angle 4k + 4·i/(m−1): the arms interleave, 4 radians apart.
        for p in draw(30, 0.0, 4) {
            let r = p.x1.hypot(p.x2);
            let t = 4.0 * (p.label + r / 5.0);
            assert!((p.x1 - r * t.sin()).abs() < 1e-12 && (p.x2 - r * t.cos()).abs() < 1e-12, "{p:?}");
        }
        // Noise moves points off their arm; more noise, further.
        let off = |noise| -> f64 {
            draw(300, noise, 4)
                .iter()
                .map(|p| {
                    let r = p.x1.hypot(p.x2);
                    let t = 4.0 * (p.label + r / 5.0);
                    (p.x1 - r * t.sin()).hypot(p.x2 - r * t.cos())
                })
                .sum()
        };
        assert!(off(0.0) < 1e-9 && off(0.05) > 1.0 && off(0.3) > 3.0 * off(0.05));
    }

    #[test]
    fn noiseless_classes_follow_their_geometry() {
        let mut rng = Rng::new(5, 1);
        for p in circle(200, 0.0, &mut rng) {
            let r = (p.x1 * p.x1 + p.x2 * p.x2).sqrt();
            assert_eq!(p.label == 1.0, r < 2.5);
        }
        for p in xor(200, 0.0, &mut rng) {
            assert_eq!(p.label == 1.0, p.x1 * p.x2 >= 0.0);
        }
    }
}
