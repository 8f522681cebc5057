//! What a line chart draws (panels/chart.rs), as plain data: the series,
//! the chart's geometry at its measured width, the axes, each line's
//! paths (thinned to pixel columns), marks and the threshold, and the
//! readout at the pointer.

use super::chart_lines::{line_path, nearest, newest_run, smooth};
use super::chart_scale::{step_axis, value_axis, Axis, Scale};
use super::words;

/// One line of a chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Its name in the readout.
    pub name: String,
    /// The CSS class that colours it (`stroke` and `color`).
    pub class: String,
    /// (step, value), ascending steps.
    pub points: Vec<(u64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, class: impl Into<String>, points: Vec<(u64, f64)>) -> Series {
        Series { name: name.into(), class: class.into(), points }
    }
}

// The chart's geometry in CSS pixels: the SVG's user units are its
// pixels at the width the chart measured (so text never scales).
pub const HEIGHT: f64 = 150.0;
pub const LEFT: f64 = 46.0;
pub const RIGHT: f64 = 10.0;
pub const TOP: f64 = 16.0;
pub const BOTTOM: f64 = 30.0;
pub const PLOT_H: f64 = HEIGHT - TOP - BOTTOM;
/// The width drawn before the chart is measured, and the narrowest.
pub const DEFAULT_WIDTH: f64 = 360.0;
pub const MIN_WIDTH: f64 = 200.0;

/// How a chart draws its values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Look {
    pub scale: Scale,
    /// The smoothing weight (0: none).
    pub weight: f64,
    /// Keep 0 on a linear axis.
    pub from_zero: bool,
    /// The SVG's width in pixels.
    pub width: f64,
}

impl Look {
    pub fn plot_w(&self) -> f64 {
        self.width - LEFT - RIGHT
    }
}

/// A line as drawn: the series's newest run, its smoothed values (in the
/// value's units; the raw ones where not smoothed) and its paths.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub name: String,
    pub class: String,
    pub points: Vec<(u64, f64)>,
    pub smoothed: Vec<Option<f64>>,
    /// The faint raw line under a smoothed one.
    pub raw_path: Option<String>,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Drawing {
    pub x: Axis,
    pub y: Axis,
    pub lines: Vec<Line>,
    /// x of each marked pixel column.
    pub marks: Vec<f64>,
    /// y of the threshold line.
    pub threshold: Option<f64>,
    pub look: Look,
}

impl Drawing {
    pub fn px(&self, step: u64) -> f64 {
        LEFT + self.x.fraction(step as f64) * self.look.plot_w()
    }

    /// y of a value already in the axis's units (log10 on a log axis).
    pub fn py(&self, t: f64) -> f64 {
        TOP + (1.0 - self.y.fraction(t)) * PLOT_H
    }
}

/// What there is to draw: None before the data spans two steps (a lone
/// point, such as the loss before training, is not yet a curve); Err
/// when there are points but none can be drawn on this axis.
pub fn draw(
    series: &[Series],
    look: Look,
    marked: &[u64],
    threshold: Option<f64>,
) -> Option<Result<Drawing, &'static str>> {
    let Look { scale, weight, from_zero, .. } = look;
    let runs: Vec<&[(u64, f64)]> = series.iter().map(|s| newest_run(&s.points)).collect();
    let first = runs.iter().filter_map(|r| r.first()).map(|p| p.0).min()?;
    let last = runs.iter().filter_map(|r| r.last()).map(|p| p.0).max().filter(|&last| last > first)?;
    let values = runs.iter().flat_map(|r| r.iter().map(|p| p.1)).chain(threshold);
    let Some(y) = value_axis(values, scale, (PLOT_H / 26.0) as usize, from_zero) else {
        return Some(Err(if scale == Scale::Log {
            "No value above 0 to draw on a log scale."
        } else {
            "No finite value to draw."
        }));
    };
    let mut drawing = Drawing {
        x: step_axis(first, last, (look.plot_w() / 75.0) as usize),
        y,
        lines: Vec::new(),
        marks: Vec::new(),
        threshold: None,
        look,
    };
    for (s, run) in series.iter().zip(&runs) {
        let t: Vec<Option<f64>> = run.iter().map(|p| drawing.y.transform(p.1)).collect();
        let smoothed_t = smooth(&t, weight);
        let path_of = |values: &[Option<f64>]| {
            let xy: Vec<(f64, Option<f64>)> =
                run.iter().zip(values).map(|(p, v)| (drawing.px(p.0), v.map(|v| drawing.py(v)))).collect();
            line_path(&xy)
        };
        let untransform = |v: f64| if scale == Scale::Log { 10f64.powf(v) } else { v };
        drawing.lines.push(Line {
            name: s.name.clone(),
            class: s.class.clone(),
            points: run.to_vec(),
            smoothed: smoothed_t.iter().map(|v| v.map(untransform)).collect(),
            raw_path: (weight > 0.0).then(|| path_of(&t)),
            path: path_of(&smoothed_t),
        });
    }
    let mut marks: Vec<f64> = marked.iter().map(|&s| (drawing.px(s) * 2.0).round() / 2.0).collect();
    marks.dedup();
    drawing.marks = marks;
    drawing.threshold = threshold.and_then(|c| drawing.y.transform(c)).map(|t| drawing.py(t));
    Some(Ok(drawing))
}

/// The readout at `fraction` across the plot (None: the latest step): the
/// step of the first line's nearest point, and each line's value there.
pub fn readout(
    d: &Drawing,
    fraction: Option<f64>,
    weight: f64,
    decimals: usize,
) -> (u64, Vec<(String, String, String)>) {
    let target = fraction.map_or(d.x.hi, |f| d.x.value_at(f));
    let mut step = None;
    let entries = d
        .lines
        .iter()
        .filter_map(|line| {
            let i = nearest(&line.points, target)?;
            let (at, v) = line.points[i];
            let shown = *step.get_or_insert(at);
            let mut text = words::value(v, decimals);
            if weight > 0.0 {
                if let Some(s) = line.smoothed[i] {
                    text.push_str(&format!(" (smoothed {})", words::value(s, decimals)));
                }
            }
            if at != shown {
                text.push_str(&format!(" at step {}", words::count(at)));
            }
            Some((line.name.clone(), line.class.clone(), text))
        })
        .collect();
    (step.unwrap_or(0), entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(scale: Scale, weight: f64) -> Look {
        Look { scale, weight, from_zero: false, width: DEFAULT_WIDTH }
    }

    fn series(points: Vec<(u64, f64)>) -> Vec<Series> {
        vec![Series::new("train", "train", points)]
    }

    #[test]
    fn nothing_to_draw_before_the_first_point() {
        assert_eq!(draw(&series(vec![]), look(Scale::Linear, 0.0), &[], None), None);
        assert_eq!(draw(&series(vec![(0, 0.69)]), look(Scale::Linear, 0.0), &[], None), None);
        let zeros = draw(&series(vec![(0, 0.0), (1, 0.0)]), look(Scale::Log, 0.0), &[], None);
        assert!(matches!(zeros, Some(Err(_))));
    }

    #[test]
    fn a_line_spans_the_plot_and_marks_fall_on_their_steps() {
        let points: Vec<(u64, f64)> = (0..=100).map(|s| (s, 1.0 / (1.0 + s as f64))).collect();
        let d = draw(&series(points), look(Scale::Log, 0.6), &[50, 50, 100], Some(0.5)).unwrap().unwrap();
        let line = &d.lines[0];
        assert!(line.path.starts_with(&format!("M{LEFT:.1},")), "{}", line.path);
        assert!(line.raw_path.is_some(), "a smoothed line keeps its raw line");
        let plot_w = DEFAULT_WIDTH - LEFT - RIGHT;
        assert_eq!(d.marks, [LEFT + plot_w / 2.0, LEFT + plot_w]);
        let y = d.threshold.unwrap();
        // Wider, the same steps fall further right; the height stays.
        let wide =
            draw(&series(vec![(0, 1.0), (100, 2.0)]), Look { width: 720.0, ..look(Scale::Log, 0.0) }, &[50], None);
        assert_eq!(wide.unwrap().unwrap().marks, [LEFT + (720.0 - LEFT - RIGHT) / 2.0]);
        assert!(y > TOP && y < TOP + PLOT_H);
        let (step, entries) = readout(&d, Some(0.5), 0.6, 4);
        assert_eq!(step, 50);
        assert!(entries[0].2.starts_with("0.0196 (smoothed "), "{:?}", entries);
        assert_eq!(readout(&d, None, 0.0, 4).0, 100);
    }

    #[test]
    fn a_step_going_back_draws_only_the_newer_run() {
        let points = vec![(0, 1.0), (500, 0.5), (1000, 0.2), (0, 1.0), (10, 0.9)];
        let d = draw(&series(points), look(Scale::Linear, 0.0), &[], None).unwrap().unwrap();
        assert_eq!((d.x.lo, d.x.hi), (0.0, 10.0));
        let xs: Vec<f64> =
            d.lines[0].path.split(' ').map(|c| c[1..].split(',').next().unwrap().parse().unwrap()).collect();
        assert!(xs.windows(2).all(|w| w[0] <= w[1]), "{xs:?}");
    }
}
