//! The one line chart every curve on the page uses: N named series over
//! the step axis, with ticks and units, a readout of the exact values
//! under the pointer, an optional log/linear switch and smoothing, marked
//! steps and a threshold line, and a "Press Train" message instead of an
//! empty frame.
//!
//! ```ignore
//! use crate::panels::chart::{LineChart, Series};
//!
//! let series = Signal::derive(move || vec![
//!     Series::new("AdamW", "s0", runs.get()[0].loss.clone()),   // Vec<(u64, f64)>: (step, value)
//!     Series::new("SGD", "s1", runs.get()[1].loss.clone()),
//! ]);
//! view! {
//!     <LineChart testid="compare-loss" title="Loss" unit="loss" empty="Press Train to see the loss curves"
//!         series=series log_switch=true smoothing=0.6/>
//! }
//! ```
//!
//! - `series`: each `Series { name, class, points }` draws one line;
//!   `class` colours it (`s0`…`s5` are the palette in style.css, or your
//!   own class setting `stroke` and `color`); `points` are (step, value)
//!   in ascending steps (a step going back starts over: only the points
//!   after it are drawn). Values that cannot be drawn (NaN, ±∞, ≤ 0 on a
//!   log axis) leave gaps.
//! - `testid` goes on the `<figure>`; inside it, `{testid}-log` is the log
//!   switch, `{testid}-smoothing` the smoothing slider, `chart-readout` the
//!   readout (its `data-step` is the step shown) and `chart-empty` the
//!   message shown before any point.
//! - Optional: `log` (start on a log axis), `log_switch`, `smoothing`
//!   (Some(weight) shows the slider, TensorBoard's EMA weight in [0, 0.99]),
//!   `from_zero` (keep 0 on a linear axis), `marked` (steps drawn as red
//!   lines: the clipped steps), `threshold` (a dashed horizontal line),
//!   `caption`, `class` (on the figure), `decimals` (of the readout).
//!
//! Drawing stays cheap at the page's redraw rate: each line is thinned to
//! at most four points per pixel column (model::chart_lines), and the
//! ticks are rebuilt only when an axis changes.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

use crate::model::chart_lines::{line_path, nearest, newest_run, smooth};
use crate::model::chart_scale::{step_axis, value_axis, Axis, Scale};
use crate::model::words;

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

// The chart's geometry in SVG user units (the SVG scales to its box).
const W: f64 = 360.0;
const H: f64 = 150.0;
const LEFT: f64 = 46.0;
const RIGHT: f64 = 10.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 30.0;
const PLOT_W: f64 = W - LEFT - RIGHT;
const PLOT_H: f64 = H - TOP - BOTTOM;

/// A line as drawn: the series's newest run, its smoothed values (in the
/// value's units; the raw ones where not smoothed) and its paths.
#[derive(Clone, Debug, PartialEq)]
struct Line {
    name: String,
    class: String,
    points: Vec<(u64, f64)>,
    smoothed: Vec<Option<f64>>,
    /// The faint raw line under a smoothed one.
    raw_path: Option<String>,
    path: String,
}

#[derive(Clone, Debug, PartialEq)]
struct Drawing {
    x: Axis,
    y: Axis,
    lines: Vec<Line>,
    /// x of each marked pixel column.
    marks: Vec<f64>,
    /// y of the threshold line.
    threshold: Option<f64>,
}

impl Drawing {
    fn px(&self, step: u64) -> f64 {
        LEFT + self.x.fraction(step as f64) * PLOT_W
    }

    /// y of a value already in the axis's units (log10 on a log axis).
    fn py(&self, t: f64) -> f64 {
        TOP + (1.0 - self.y.fraction(t)) * PLOT_H
    }
}

/// What there is to draw: None before any point; Err when there are
/// points but none can be drawn on this axis.
fn draw(
    series: &[Series],
    scale: Scale,
    weight: f64,
    from_zero: bool,
    marked: &[u64],
    threshold: Option<f64>,
) -> Option<Result<Drawing, &'static str>> {
    let runs: Vec<&[(u64, f64)]> = series.iter().map(|s| newest_run(&s.points)).collect();
    let first = runs.iter().filter_map(|r| r.first()).map(|p| p.0).min()?;
    let last = runs.iter().filter_map(|r| r.last()).map(|p| p.0).max()?;
    let values = runs.iter().flat_map(|r| r.iter().map(|p| p.1)).chain(threshold);
    let Some(y) = value_axis(values, scale, (PLOT_H / 26.0) as usize, from_zero) else {
        return Some(Err(if scale == Scale::Log {
            "No value above 0 to draw on a log scale."
        } else {
            "No finite value to draw."
        }));
    };
    let mut drawing = Drawing {
        x: step_axis(first, last, (PLOT_W / 75.0) as usize),
        y,
        lines: Vec::new(),
        marks: Vec::new(),
        threshold: None,
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
fn readout(d: &Drawing, fraction: Option<f64>, weight: f64, decimals: usize) -> (u64, Vec<(String, String, String)>) {
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

#[component]
pub fn LineChart(
    /// The figure's data-testid (and the prefix of its controls').
    testid: &'static str,
    title: &'static str,
    /// What the value axis measures ("loss", "‖g‖").
    unit: &'static str,
    /// Shown before any point ("Press Train to see …").
    empty: &'static str,
    #[prop(into)] series: Signal<Vec<Series>>,
    /// Start on a log axis.
    #[prop(optional)]
    log: bool,
    #[prop(optional)] log_switch: bool,
    /// The smoothing slider, starting at this weight.
    #[prop(optional)]
    smoothing: Option<f64>,
    #[prop(optional)] from_zero: bool,
    /// Steps marked with a red line (the clipped steps).
    #[prop(optional, into)]
    marked: Option<Signal<Vec<u64>>>,
    /// A dashed horizontal line (the clipping threshold).
    #[prop(optional, into)]
    threshold: Option<Signal<Option<f64>>>,
    #[prop(optional, into)] caption: Option<Signal<String>>,
    #[prop(optional)] class: &'static str,
    #[prop(default = 4)] decimals: usize,
) -> impl IntoView {
    let log_scale = RwSignal::new(log);
    let weight = RwSignal::new(smoothing.unwrap_or(0.0));
    // The pointer's fraction of the way across the plot.
    let hover = RwSignal::new(None::<f64>);
    let drawing = Memo::new(move |_| {
        let scale = if log_scale.get() { Scale::Log } else { Scale::Linear };
        let marked = marked.map(|m| m.get()).unwrap_or_default();
        let threshold = threshold.and_then(|t| t.get());
        series.with(|s| draw(s, scale, weight.get(), from_zero, &marked, threshold))
    });
    let axes = Memo::new(move |_| {
        drawing.with(|d| d.as_ref().and_then(|d| d.as_ref().ok()).map(|d| (d.x.clone(), d.y.clone())))
    });

    // The SVG's children take no pointer events (style.css), so the
    // offset is from the SVG's own edge, in CSS pixels of its box.
    let on_move = move |ev: web_sys::PointerEvent| {
        let Some(svg) = ev.current_target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) else { return };
        let width = f64::from(svg.client_width());
        if width > 0.0 {
            let x = f64::from(ev.offset_x()) / width * W;
            hover.set(Some(((x - LEFT) / PLOT_W).clamp(0.0, 1.0)));
        }
    };
    let on_smoothing = move |ev| {
        if let Ok(w) = event_target_value(&ev).parse::<f64>() {
            weight.set(w.clamp(0.0, 0.99));
        }
    };

    let grid = move || {
        axes.get().map(|(x, y)| {
            let py = |t: f64| TOP + (1.0 - y.fraction(t)) * PLOT_H;
            let px = |s: f64| LEFT + x.fraction(s) * PLOT_W;
            let minor =
                y.minor.iter().map(|&t| view! { <line class="grid minor" x1=LEFT x2=W - RIGHT y1=py(t) y2=py(t)/> });
            let y_ticks = y.ticks.iter().map(|t| {
                let at = py(t.value);
                view! {
                    <line class="grid" x1=LEFT x2=W - RIGHT y1=at y2=at/>
                    <text class="tick y-tick" x=LEFT - 4.0 y=at + 3.0 text-anchor="end">{t.label.clone()}</text>
                }
            });
            let x_ticks = x.ticks.iter().map(|t| {
                let at = px(t.value);
                view! {
                    <line class="grid" x1=at x2=at y1=TOP y2=TOP + PLOT_H/>
                    <text class="tick x-tick" x=at y=TOP + PLOT_H + 12.0 text-anchor="middle">{t.label.clone()}</text>
                }
            });
            let exponent = y.exponent.map(|e| format!(" × {}", words::power(e))).unwrap_or_default();
            let scale = if y.scale == Scale::Log { " (log)" } else { "" };
            view! {
                {minor.collect_view()}
                {y_ticks.collect_view()}
                {x_ticks.collect_view()}
                <text class="axis-label" x=2 y=10>{format!("{unit}{exponent}{scale}")}</text>
                <text class="axis-label" x=LEFT + PLOT_W / 2.0 y=H - 4.0 text-anchor="middle">"step"</text>
            }
        })
    };
    let lines = move || {
        drawing.with(|d| match d {
            None => view! {
                <text class="empty" data-testid="chart-empty" x=W / 2.0 y=H / 2.0 text-anchor="middle">{empty}</text>
            }
            .into_any(),
            Some(Err(why)) => view! {
                <text class="empty" x=W / 2.0 y=H / 2.0 text-anchor="middle">{*why}</text>
            }
            .into_any(),
            Some(Ok(d)) => {
                let marks =
                    d.marks.iter().map(|&x| view! { <line class="clipped mark" x1=x x2=x y1=TOP y2=TOP + PLOT_H/> });
                let threshold = d.threshold.map(|y| view! { <line class="threshold" x1=LEFT x2=W - RIGHT y1=y y2=y/> });
                let paths = d.lines.iter().map(|l| {
                    // The raw line takes its colour from a group, so that
                    // `path.{class}` names the drawn line alone.
                    let raw = l
                        .raw_path
                        .clone()
                        .map(|p| view! { <g class=l.class.clone()><path class="raw-series" d=p/></g> });
                    // A single point draws no line: a dot instead.
                    let dot = (l.points.len() == 1).then(|| {
                        let (s, v) = l.points[0];
                        d.y.transform(v)
                            .map(|t| view! { <circle class=format!("dot {}", l.class) cx=d.px(s) cy=d.py(t) r=2.5/> })
                    });
                    view! { {raw}<path class=format!("series {}", l.class) d=l.path.clone()/>{dot} }
                });
                view! { {marks.collect_view()}{threshold}{paths.collect_view()} }.into_any()
            }
        })
    };
    let cursor = move || {
        let f = hover.get()?;
        drawing.with(|d| {
            let d = d.as_ref()?.as_ref().ok()?;
            let (step, _) = readout(d, Some(f), 0.0, 0);
            let x = d.px(step);
            let dots = d.lines.iter().filter_map(|l| {
                let (s, v) = l.points[nearest(&l.points, step as f64)?];
                let y = d.py(d.y.transform(v)?);
                Some(view! { <circle class=format!("dot {}", l.class) cx=d.px(s) cy=y r=3/> })
            });
            Some(view! { <line class="cursor" x1=x x2=x y1=TOP y2=TOP + PLOT_H/>{dots.collect_view()} })
        })
    };
    let shown = move || {
        drawing
            .with(|d| d.as_ref().and_then(|d| d.as_ref().ok()).map(|d| readout(d, hover.get(), weight.get(), decimals)))
    };
    let readout_step = move || shown().map(|(step, _)| step.to_string()).unwrap_or_default();
    let readout_text = move || {
        shown().map(|(step, entries)| {
            let prefix = if hover.get().is_some() { "step" } else { "latest: step" };
            let entries = entries.into_iter().map(|(name, class, text)| {
                view! { " · "<span class=format!("key {class}")>{name}</span>" "<span class="value">{text}</span> }
            });
            view! { {format!("{prefix} {}", words::count(step))}{entries.collect_view()} }
        })
    };
    view! {
        <figure class=format!("chart {class}") data-testid=testid>
            <div class="chart-head">
                <span class="title">{title}</span>
                <span class="opts">
                    {smoothing.map(|_| view! {
                        <label class="smoothing" title="Exponential moving average over the raw values (faint)">
                            "smoothing "
                            <input type="range" min="0" max="0.99" step="0.01" data-testid=format!("{testid}-smoothing")
                                aria-label=format!("{title}: smoothing") prop:value=move || weight.get().to_string() on:input=on_smoothing/>
                            <span class="value">{move || format!("{:.2}", weight.get())}</span>
                        </label>
                    })}
                    {log_switch.then(|| view! {
                        <button data-testid=format!("{testid}-log") aria-pressed=move || log_scale.get().to_string()
                            aria-label=format!("{title}: log scale") on:click=move |_| log_scale.update(|l| *l = !*l)>"log"</button>
                    })}
                </span>
            </div>
            <svg viewBox=format!("0 0 {W} {H}") width=W height=H role="img" aria-label=format!("{title} over steps")
                on:pointermove=on_move on:pointerleave=move |_| hover.set(None)>
                <rect class="frame" x=LEFT y=TOP width=PLOT_W height=PLOT_H/>
                {grid}
                {lines}
                {cursor}
            </svg>
            <div class="readout" data-testid="chart-readout" data-step=readout_step aria-live="off">{readout_text}</div>
            {caption.map(|c| view! { <figcaption>{move || c.get()}</figcaption> })}
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(u64, f64)>) -> Vec<Series> {
        vec![Series::new("train", "train", points)]
    }

    #[test]
    fn nothing_to_draw_before_the_first_point() {
        assert_eq!(draw(&series(vec![]), Scale::Linear, 0.0, false, &[], None), None);
        let zeros = draw(&series(vec![(0, 0.0), (1, 0.0)]), Scale::Log, 0.0, false, &[], None);
        assert!(matches!(zeros, Some(Err(_))));
    }

    #[test]
    fn a_line_spans_the_plot_and_marks_fall_on_their_steps() {
        let points: Vec<(u64, f64)> = (0..=100).map(|s| (s, 1.0 / (1.0 + s as f64))).collect();
        let d = draw(&series(points), Scale::Log, 0.6, false, &[50, 50, 100], Some(0.5)).unwrap().unwrap();
        let line = &d.lines[0];
        assert!(line.path.starts_with(&format!("M{LEFT:.1},")), "{}", line.path);
        assert!(line.raw_path.is_some(), "a smoothed line keeps its raw line");
        assert_eq!(d.marks, [LEFT + PLOT_W / 2.0, LEFT + PLOT_W]);
        let y = d.threshold.unwrap();
        assert!(y > TOP && y < TOP + PLOT_H);
        let (step, entries) = readout(&d, Some(0.5), 0.6, 4);
        assert_eq!(step, 50);
        assert!(entries[0].2.starts_with("0.0196 (smoothed "), "{:?}", entries);
        assert_eq!(readout(&d, None, 0.0, 4).0, 100);
    }

    #[test]
    fn a_step_going_back_draws_only_the_newer_run() {
        let points = vec![(0, 1.0), (500, 0.5), (1000, 0.2), (0, 1.0), (10, 0.9)];
        let d = draw(&series(points), Scale::Linear, 0.0, false, &[], None).unwrap().unwrap();
        assert_eq!((d.x.lo, d.x.hi), (0.0, 10.0));
        let xs: Vec<f64> =
            d.lines[0].path.split(' ').map(|c| c[1..].split(',').next().unwrap().parse().unwrap()).collect();
        assert!(xs.windows(2).all(|w| w[0] <= w[1]), "{xs:?}");
    }
}
