//! Axes of the page's line charts (panels/chart.rs): the domain and nice
//! tick values of a value axis, linear (1-2-5 steps, the labels sharing a
//! power of ten where they would need more than four decimals) or log
//! (decades), and of the step axis; and where a value falls on an axis.

use super::words;

/// How a value axis maps values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// A labelled tick: its value and its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: String,
}

/// One axis: its domain, labelled ticks, unlabelled grid lines, and the
/// power of ten the labels are divided by (said beside the unit).
#[derive(Clone, Debug, PartialEq)]
pub struct Axis {
    pub scale: Scale,
    /// The ends of the domain, in transformed units (log10 of the value on
    /// a log axis).
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<Tick>,
    /// Grid lines without labels (2…9 × 10ᵏ on a log axis of few decades).
    pub minor: Vec<f64>,
    /// The labels read in units of 10ⁿ (e.g. a learning rate in 10⁻⁵).
    pub exponent: Option<i32>,
}

impl Axis {
    /// The value in the axis's own units: log10 on a log axis; None where
    /// it cannot be drawn (not finite, or ≤ 0 on a log axis).
    pub fn transform(&self, v: f64) -> Option<f64> {
        transform(self.scale, v)
    }

    /// Where a transformed value falls: 0 at `lo`, 1 at `hi`.
    pub fn fraction(&self, t: f64) -> f64 {
        (t - self.lo) / (self.hi - self.lo)
    }

    /// Where `v` falls, or None where it cannot be drawn.
    pub fn fraction_of(&self, v: f64) -> Option<f64> {
        self.transform(v).map(|t| self.fraction(t))
    }

    /// The value at `fraction` of the way along (the step under the pointer).
    pub fn value_at(&self, fraction: f64) -> f64 {
        let t = self.lo + fraction * (self.hi - self.lo);
        match self.scale {
            Scale::Linear => t,
            Scale::Log => 10f64.powf(t),
        }
    }
}

pub fn transform(scale: Scale, v: f64) -> Option<f64> {
    match scale {
        _ if !v.is_finite() => None,
        Scale::Linear => Some(v),
        Scale::Log if v > 0.0 => Some(v.log10()),
        Scale::Log => None,
    }
}

/// 1, 2 or 5 × 10ᵏ, the nice step nearest above `raw` (Heckbert's "nice
/// numbers for graph labels", Graphics Gems, 1990).
pub fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    let f = raw / magnitude;
    let nice = match f {
        f if f <= 1.0 => 1.0,
        f if f <= 2.0 => 2.0,
        f if f <= 5.0 => 5.0,
        _ => 10.0,
    };
    nice * magnitude
}

/// The nice step below `step` (a nice step itself): 1000 → 500 → 200 → 100.
fn smaller_nice_step(step: f64) -> f64 {
    let magnitude = 10f64.powf(step.log10().floor());
    match (step / magnitude).round() as u32 {
        1 => magnitude / 2.0,
        2 => magnitude,
        _ => magnitude * 2.0,
    }
}

/// A value axis over `values` with about `target` labelled ticks; None
/// when no value can be drawn (none finite, or none positive on a log
/// axis). `from_zero` keeps 0 in a linear domain (a learning rate).
pub fn value_axis(values: impl IntoIterator<Item = f64>, scale: Scale, target: usize, from_zero: bool) -> Option<Axis> {
    let (lo, hi) = values
        .into_iter()
        .filter_map(|v| transform(scale, v))
        .fold(None, |range: Option<(f64, f64)>, t| Some(range.map_or((t, t), |(lo, hi)| (lo.min(t), hi.max(t)))))?;
    Some(match scale {
        Scale::Linear if from_zero => linear_axis(lo.min(0.0), hi.max(0.0), target),
        Scale::Linear => linear_axis(lo, hi, target),
        Scale::Log => log_axis(lo, hi),
    })
}

/// Ticks `nice_step` apart, the domain widened to the ticks around the
/// data; a flat series gets ±10 % (±1 around 0).
fn linear_axis(lo: f64, hi: f64, target: usize) -> Axis {
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - pad, hi + pad)
    };
    // Halved, so that a span of two opposite f32 extremes stays finite.
    let step = nice_step((hi / 2.0 - lo / 2.0) * 2.0 / target.max(1) as f64);
    // (With a little slack: 3e-5 / 1e-5 is 3.0000000000000004.)
    let (first, last) = ((lo / step + 1e-9).floor() as i64, (hi / step - 1e-9).ceil() as i64);
    let values: Vec<f64> = (first..=last).map(|i| i as f64 * step).collect();
    let largest = values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    // Labels that would need more than four decimals, or run past a
    // million, share a power of ten instead.
    let exponent =
        (words::decimals_for(step) > 4 || largest >= 1e6).then(|| largest.log10().floor() as i32).filter(|&e| e != 0);
    let scale = exponent.map_or(1.0, |e| 10f64.powi(-e));
    let ticks = values.iter().map(|&value| Tick { value, label: words::tick(value * scale, step * scale) }).collect();
    Axis { scale: Scale::Linear, lo: first as f64 * step, hi: last as f64 * step, ticks, minor: Vec::new(), exponent }
}

/// Decades over log10 values `lo`…`hi`: the data's range padded by 5 %,
/// widened to whole decades when fewer than two fall inside; at most
/// about six labelled (every k-th decade beyond), with 2…9 × 10ᵏ as
/// unlabelled lines across three decades or fewer.
fn log_axis(lo: f64, hi: f64) -> Axis {
    let pad = ((hi - lo) * 0.05).max(0.05);
    let (mut lo, mut hi) = (lo - pad, hi + pad);
    if hi.floor() - lo.ceil() < 1.0 {
        (lo, hi) = (lo.floor(), hi.ceil());
    }
    let (first, last) = (lo.ceil() as i32, hi.floor() as i32);
    let every = ((last - first + 1) as f64 / 6.0).ceil().max(1.0) as i32;
    let ticks = (first..=last)
        .filter(|k| k.rem_euclid(every) == 0)
        .map(|k| Tick { value: k as f64, label: words::decade(k) })
        .collect();
    let minor = if hi - lo <= 3.0 {
        (lo.floor() as i32..=hi.ceil() as i32)
            .flat_map(|k| (2..=9).map(move |m| (m as f64).log10() + k as f64))
            .filter(|t| (lo..=hi).contains(t))
            .collect()
    } else {
        Vec::new()
    };
    Axis { scale: Scale::Log, lo, hi, ticks, minor, exponent: None }
}

/// The step axis from `first` to `last` (exactly: the curve reaches both
/// ends), whole-step ticks about `target` apart, labelled with thousands
/// separators.
pub fn step_axis(first: u64, last: u64, target: usize) -> Axis {
    let (lo, hi) = (first as f64, last.max(first + 1) as f64);
    let mut step = nice_step((hi - lo) / target.max(1) as f64).max(1.0);
    let inside = |step: f64| (hi / step).floor() - (lo / step).ceil() + 1.0;
    // At least two ticks on a narrow chart: the next smaller nice step.
    while inside(step) < 2.0 && step > 1.0 {
        step = smaller_nice_step(step);
    }
    let ticks = ((lo / step).ceil() as u64..=(hi / step).floor() as u64)
        .map(|i| {
            let value = i as f64 * step;
            Tick { value, label: words::count(value as u64) }
        })
        .collect();
    Axis { scale: Scale::Linear, lo, hi, ticks, minor: Vec::new(), exponent: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(axis: &Axis) -> Vec<&str> {
        axis.ticks.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn nice_steps_are_one_two_five() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.3), 2.0);
        assert_eq!(nice_step(3.1), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert!((nice_step(0.00031) - 0.0005).abs() < 1e-15);
    }

    #[test]
    fn linear_ticks_cover_the_data_in_nice_steps() {
        let axis = value_axis([0.093, 0.71], Scale::Linear, 5, false).unwrap();
        assert_eq!(labels(&axis), ["0", "0.2", "0.4", "0.6", "0.8"]);
        assert_eq!((axis.lo, axis.hi), (0.0, 0.8));
        // An awkward range: ticks 1-2-5 apart, exact labels, no rounding dust.
        let axis = value_axis([0.6928, 0.6934], Scale::Linear, 4, false).unwrap();
        assert_eq!(labels(&axis), ["0.6928", "0.6930", "0.6932", "0.6934"]);
        let axis = value_axis([-3.0, 17_500.0], Scale::Linear, 4, false).unwrap();
        assert_eq!(labels(&axis), ["-5,000", "0", "5,000", "10,000", "15,000", "20,000"]);
    }

    #[test]
    fn tiny_and_huge_labels_share_a_power_of_ten() {
        // A warmup from 0 to 3e-5: labels in 10⁻⁵, not "0.000005".
        let axis = value_axis([0.0, 3e-5], Scale::Linear, 4, true).unwrap();
        assert_eq!(axis.exponent, Some(-5));
        assert_eq!(labels(&axis), ["0", "1", "2", "3"]);
        let axis = value_axis([0.0, 1.28e30], Scale::Linear, 4, false).unwrap();
        assert_eq!(axis.exponent, Some(30));
        assert_eq!(labels(&axis), ["0", "0.5", "1.0", "1.5"]);
        // A constant learning rate from 0.
        let axis = value_axis([0.02, 0.02], Scale::Linear, 4, true).unwrap();
        assert_eq!(labels(&axis), ["0", "0.005", "0.010", "0.015", "0.020"]);
    }

    #[test]
    fn a_flat_series_gets_a_range() {
        let axis = value_axis([0.5; 3], Scale::Linear, 4, false).unwrap();
        assert!(axis.lo < 0.5 && axis.hi > 0.5, "{axis:?}");
        assert!(axis.ticks.len() >= 2);
        let axis = value_axis([0.0; 3], Scale::Linear, 4, false).unwrap();
        assert_eq!((axis.lo, axis.hi), (-1.0, 1.0));
        let axis = value_axis([1.0; 3], Scale::Log, 4, false).unwrap();
        assert_eq!(labels(&axis), ["0.1", "1", "10"]);
    }

    #[test]
    fn log_ticks_are_decades() {
        let axis = value_axis([3e-4, 2.0, 40.0], Scale::Log, 4, false).unwrap();
        assert_eq!(labels(&axis), ["0.001", "0.01", "0.1", "1", "10"]);
        assert!(axis.lo < 3e-4f64.log10() && axis.hi > 40f64.log10());
        // Less than a decade: widened to the decades around it, with
        // unlabelled 2…9 lines.
        let axis = value_axis([0.12, 0.7], Scale::Log, 4, false).unwrap();
        assert_eq!(labels(&axis), ["0.1", "1"]);
        assert_eq!(axis.minor.len(), 8);
        // An explosion over 38 decades: every k-th decade, in powers of ten.
        let axis = value_axis([1e-8, 3e30], Scale::Log, 4, false).unwrap();
        assert!(axis.ticks.len() <= 7, "{:?}", labels(&axis));
        assert!(labels(&axis).contains(&"10⁻⁷") || labels(&axis).contains(&"10⁻⁶"), "{:?}", labels(&axis));
        assert!(axis.minor.is_empty());
    }

    #[test]
    fn zero_negative_and_non_finite_values_are_left_off_a_log_axis() {
        let axis = value_axis([0.0, -1.0, f64::NAN, f64::INFINITY, 0.5, 5.0], Scale::Log, 4, false).unwrap();
        assert_eq!(labels(&axis), ["0.1", "1", "10"]);
        assert_eq!(axis.fraction_of(0.0), None);
        assert_eq!(axis.fraction_of(-1.0), None);
        assert!(axis.fraction_of(0.5).unwrap() > 0.0);
        assert!(value_axis([0.0, -2.0], Scale::Log, 4, false).is_none());
        assert!(value_axis([f64::NAN], Scale::Linear, 4, false).is_none());
        // Linear: NaN is left off, the rest drawn.
        let axis = value_axis([f64::NAN, 1.0, 2.0], Scale::Linear, 4, false).unwrap();
        assert!(axis.lo <= 1.0 && axis.hi >= 2.0);
    }

    #[test]
    fn step_ticks_are_whole_steps_with_separators() {
        let axis = step_axis(0, 15_457, 5);
        assert_eq!(labels(&axis), ["0", "5,000", "10,000", "15,000"]);
        assert_eq!((axis.lo, axis.hi), (0.0, 15_457.0));
        // A narrow chart starting past 0 still gets two ticks.
        let axis = step_axis(2, 1938, 3);
        assert_eq!(labels(&axis), ["500", "1,000", "1,500"]);
        assert_eq!(smaller_nice_step(1000.0), 500.0);
        assert_eq!(smaller_nice_step(500.0), 200.0);
        assert_eq!(smaller_nice_step(200.0), 100.0);
        let axis = step_axis(3, 3, 5);
        assert_eq!(labels(&axis), ["3", "4"]);
        assert_eq!(axis.value_at(0.5), 3.5);
    }
}
