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
//!   message shown until the data spans two steps.
//! - Optional: `log` (start on a log axis), `log_switch`, `smoothing`
//!   (Some(weight) shows the slider, TensorBoard's EMA weight in [0, 0.99]),
//!   `from_zero` (keep 0 on a linear axis), `marked` (steps marked in red
//!   along the bottom: the clipped steps), `threshold` (a dashed horizontal line),
//!   `caption`, `class` (on the figure), `decimals` (of the readout).
//!
//! The SVG is drawn at its measured width (a ResizeObserver), so text and
//! lines keep their size in any column. Drawing stays cheap at the page's
//! redraw rate: each line is thinned to at most four points per pixel
//! column (model::chart_lines), and the ticks are rebuilt only when an
//! axis changes. What is drawn is plain data (model::chart_plot).

use leptos::prelude::*;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsCast;

use crate::model::chart_lines::nearest;
pub use crate::model::chart_plot::Series;
use crate::model::chart_plot::{draw, readout, Look, DEFAULT_WIDTH, HEIGHT, LEFT, MIN_WIDTH, PLOT_H, RIGHT, TOP};
use crate::model::chart_scale::Scale;
use crate::model::words;

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
    let width = RwSignal::new(DEFAULT_WIDTH);
    let svg = NodeRef::<leptos::svg::Svg>::new();
    watch_width(svg, width);
    let drawing = Memo::new(move |_| {
        let scale = if log_scale.get() { Scale::Log } else { Scale::Linear };
        let look = Look { scale, weight: weight.get(), from_zero, width: width.get() };
        let marked = marked.map(|m| m.get()).unwrap_or_default();
        let threshold = threshold.and_then(|t| t.get());
        series.with(|s| draw(s, look, &marked, threshold))
    });
    let axes = Memo::new(move |_| {
        drawing.with(|d| d.as_ref().and_then(|d| d.as_ref().ok()).map(|d| (d.x.clone(), d.y.clone(), d.look.width)))
    });

    // The SVG's children take no pointer events (style.css), so the
    // offset is from the SVG's own edge, in CSS pixels of its box.
    let on_move = move |ev: web_sys::PointerEvent| {
        let Some(svg) = ev.current_target().and_then(|t| t.dyn_into::<web_sys::Element>().ok()) else { return };
        let shown = f64::from(svg.client_width());
        if shown > 0.0 {
            let w = width.get_untracked();
            let x = f64::from(ev.offset_x()) / shown * w;
            hover.set(Some(((x - LEFT) / (w - LEFT - RIGHT)).clamp(0.0, 1.0)));
        }
    };
    let on_smoothing = move |ev| {
        if let Ok(w) = event_target_value(&ev).parse::<f64>() {
            weight.set(w.clamp(0.0, 0.99));
        }
    };

    let grid = move || {
        axes.get().map(|(x, y, w)| {
            let (right, plot_w) = (w - RIGHT, w - LEFT - RIGHT);
            let py = |t: f64| TOP + (1.0 - y.fraction(t)) * PLOT_H;
            let px = |s: f64| LEFT + x.fraction(s) * plot_w;
            let minor =
                y.minor.iter().map(|&t| view! { <line class="grid minor" x1=LEFT x2=right y1=py(t) y2=py(t)/> });
            let y_ticks = y.ticks.iter().map(|t| {
                let at = py(t.value);
                view! {
                    <line class="grid" x1=LEFT x2=right y1=at y2=at/>
                    <text class="tick y-tick" x=LEFT - 4.0 y=at + 3.0 text-anchor="end">{t.label.clone()}</text>
                }
            });
            let x_ticks = x.ticks.iter().map(|t| {
                let at = px(t.value);
                // A label at the right end ends there, inside the chart.
                let anchor = if at > right - 16.0 { "end" } else { "middle" };
                view! {
                    <line class="grid" x1=at x2=at y1=TOP y2=TOP + PLOT_H/>
                    <text class="tick x-tick" x=at y=TOP + PLOT_H + 12.0 text-anchor=anchor>{t.label.clone()}</text>
                }
            });
            let exponent = y.exponent.map(|e| format!(" × {}", words::power(e))).unwrap_or_default();
            let scale = if y.scale == Scale::Log { " (log)" } else { "" };
            view! {
                {minor.collect_view()}
                {y_ticks.collect_view()}
                {x_ticks.collect_view()}
                <text class="axis-label" x=2 y=10>{format!("{unit}{exponent}{scale}")}</text>
                <text class="axis-label" x=LEFT + plot_w / 2.0 y=HEIGHT - 4.0 text-anchor="middle">"step"</text>
            }
        })
    };
    let lines = move || {
        let middle = width.get() / 2.0;
        drawing.with(|d| match d {
            None => view! {
                <text class="empty" data-testid="chart-empty" x=middle y=HEIGHT / 2.0 text-anchor="middle">{empty}</text>
            }
            .into_any(),
            Some(Err(why)) => view! {
                <text class="empty" x=middle y=HEIGHT / 2.0 text-anchor="middle">{*why}</text>
            }
            .into_any(),
            Some(Ok(d)) => {
                // Marks as a rug along the bottom: many marked steps never
                // hide the line.
                let marks = d.marks.iter().map(|&x| {
                    view! { <line class="clipped mark" x1=x x2=x y1=TOP + PLOT_H - 7.0 y2=TOP + PLOT_H/> }
                });
                let right = d.look.width - RIGHT;
                let threshold = d.threshold.map(|y| view! { <line class="threshold" x1=LEFT x2=right y1=y y2=y/> });
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
            <svg node_ref=svg viewBox=move || format!("0 0 {} {HEIGHT}", width.get()) width=move || width.get() height=HEIGHT
                role="img" aria-label=format!("{title} over steps")
                on:pointermove=on_move on:pointerleave=move |_| hover.set(None)>
                <rect class="frame" x=LEFT y=TOP width=move || width.get() - LEFT - RIGHT height=PLOT_H/>
                {grid}
                {lines}
                {cursor}
            </svg>
            <div class="readout" data-testid="chart-readout" data-step=readout_step aria-live="off">{readout_text}</div>
            {caption.map(|c| view! { <figcaption>{move || c.get()}</figcaption> })}
        </figure>
    }
}

/// Keeps `width` at the SVG's rendered width: a ResizeObserver reports
/// every change of its box (a window resize, a column reflowing, a closed
/// section opening, where it was 0 wide).
fn watch_width(svg: NodeRef<leptos::svg::Svg>, width: RwSignal<f64>) {
    Effect::new(move |observing: Option<bool>| {
        if observing == Some(true) {
            return true;
        }
        let Some(element) = svg.get() else { return false };
        let target: web_sys::Element = element.clone().unchecked_into();
        let measure = Closure::<dyn FnMut()>::new(move || {
            let w = f64::from(target.client_width());
            // Hidden (0 wide): keep the last width until it shows again.
            if w > 0.0 {
                let _ = width.try_set(w.max(MIN_WIDTH).round());
            }
        });
        match web_sys::ResizeObserver::new(measure.as_ref().unchecked_ref()) {
            Ok(observer) => observer.observe(element.unchecked_ref()),
            Err(_) => return false,
        }
        // The observer holds the callback for the chart's lifetime.
        measure.forget();
        true
    });
}
