//! The series behind the page's line charts (panels/chart.rs): smoothing
//! like TensorBoard's, thinning to pixel columns that keeps spikes, SVG
//! paths with gaps, the nearest point to the pointer, and how a history
//! stays in step order when the step count goes back (a reset, a
//! rollback, a restore) and stays bounded.

/// TensorBoard's smoothing: an exponential moving average with weight
/// `weight` in [0, 1), s_t = w·s_{t−1} + (1 − w)·x_t from s_0 = 0,
/// debiased like Adam's moments (shown as s_t / (1 − wᵗ), so the first
/// points are not pulled towards 0). A missing value (None) passes through
/// and does not enter the average; a constant series is left as it is.
/// Source: tensorboard/components/vz_line_chart2/line-chart.ts, resmoothDataset.
pub fn smooth(values: &[Option<f64>], weight: f64) -> Vec<Option<f64>> {
    let first = values.iter().flatten().next();
    if weight <= 0.0 || values.iter().flatten().all(|v| Some(v) == first) {
        return values.to_vec();
    }
    let (mut last, mut count) = (0.0, 0);
    values
        .iter()
        .map(|v| {
            let v = (*v)?;
            last = last * weight + (1.0 - weight) * v;
            count += 1;
            Some(last / (1.0 - weight.powi(count)))
        })
        .collect()
}

/// Points (x in pixels, ascending; y) thinned to at most four per pixel
/// column: its first, lowest, highest and last, in order (the M4
/// aggregation of Jugel et al., VLDB 2014). A line through them covers the
/// same pixels as one through every point, spikes included.
pub fn downsample(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len().min(1024));
    let mut start = 0;
    while start < points.len() {
        let column = points[start].0.floor();
        let end = start + points[start..].iter().take_while(|p| p.0.floor() == column).count();
        let run = &points[start..end];
        let low = run.iter().enumerate().min_by(|a, b| a.1 .1.total_cmp(&b.1 .1)).map_or(0, |(i, _)| i);
        let high = run.iter().enumerate().max_by(|a, b| a.1 .1.total_cmp(&b.1 .1)).map_or(0, |(i, _)| i);
        let mut picks = [0, low.min(high), low.max(high), run.len() - 1];
        picks.sort_unstable();
        let mut previous = None;
        for i in picks {
            if previous != Some(i) {
                out.push(run[i]);
                previous = Some(i);
            }
        }
        start = end;
    }
    out
}

/// An SVG path through `points` (x, y in pixels; None for a value that
/// cannot be drawn, which leaves a gap), each run of drawable points
/// thinned by `downsample`.
pub fn line_path(points: &[(f64, Option<f64>)]) -> String {
    let mut d = String::new();
    for run in points.split(|p| p.1.is_none()) {
        let run: Vec<(f64, f64)> = run.iter().filter_map(|&(x, y)| Some((x, y?))).collect();
        for (i, (x, y)) in downsample(&run).into_iter().enumerate() {
            let command = if i == 0 { 'M' } else { 'L' };
            d.push_str(&format!("{}{command}{x:.1},{y:.1}", if d.is_empty() { "" } else { " " }));
        }
    }
    d
}

/// The index of the point nearest `step` in `points` (ascending steps).
pub fn nearest(points: &[(u64, f64)], step: f64) -> Option<usize> {
    let after = points.partition_point(|p| (p.0 as f64) < step);
    let candidates = [after.checked_sub(1), (after < points.len()).then_some(after)];
    candidates.into_iter().flatten().min_by(|&a, &b| {
        let distance = |i: usize| (points[i].0 as f64 - step).abs();
        distance(a).total_cmp(&distance(b))
    })
}

/// The points after the last step that went backwards: a series that
/// holds two runs draws only the newer one, never a line back across the
/// chart.
pub fn newest_run(points: &[(u64, f64)]) -> &[(u64, f64)] {
    let start = points.windows(2).rposition(|w| w[1].0 < w[0].0).map_or(0, |i| i + 1);
    &points[start..]
}

/// Before `step` is recorded: drops the points at `step` or later, so a
/// history stays in step order when the count goes back (a reset whose
/// first steps arrive after a frame of the old run, a rollback, a restore)
/// and a step recorded again replaces its old point.
pub fn cut_from<T>(history: &mut Vec<T>, step: u64, step_of: impl Fn(&T) -> u64) {
    if history.last().is_some_and(|p| step_of(p) >= step) {
        history.retain(|p| step_of(p) < step);
    }
}

/// Halves a history that has grown past its limit: of each two
/// neighbours, the one with the larger `peak` (the larger gradient norm:
/// a spike or a clipped step survives thinning; a NaN counts as largest).
pub fn halve<T: Copy>(history: &mut Vec<T>, peak: impl Fn(&T) -> f64) {
    let kept: Vec<T> = history
        .chunks(2)
        .map(|pair| match pair {
            [a, b] if peak(b).is_nan() || (!peak(a).is_nan() && peak(b) > peak(a)) => *b,
            _ => pair[0],
        })
        .collect();
    *history = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_is_a_debiased_moving_average() {
        let raw = [Some(1.0), Some(3.0), None, Some(3.0)];
        let smoothed = smooth(&raw, 0.5);
        // s1 = 0.5·1 / (1 − 0.5) = 1; s2 = (0.25 + 1.5) / 0.75; s3 = (0.875 + 1.5) / 0.875.
        assert_eq!(smoothed[0], Some(1.0));
        assert!((smoothed[1].unwrap() - 1.75 / 0.75).abs() < 1e-12);
        assert_eq!(smoothed[2], None);
        assert!((smoothed[3].unwrap() - 2.375 / 0.875).abs() < 1e-12);
        assert_eq!(smooth(&raw, 0.0), raw);
        assert_eq!(smooth(&[Some(2.0); 4], 0.9), [Some(2.0); 4]);
        // A spike is damped, not dropped.
        let spiky: Vec<Option<f64>> = (0..20).map(|i| Some(if i == 10 { 100.0 } else { 1.0 })).collect();
        let s = smooth(&spiky, 0.6);
        assert!(s[10].unwrap() > 1.0 && s[10].unwrap() < 100.0);
    }

    #[test]
    fn downsampling_keeps_extremes_in_order() {
        // 10,000 points over 100 columns, one spike up and one down.
        let points: Vec<(f64, f64)> = (0..10_000)
            .map(|i| {
                let y = match i {
                    4321 => 50.0,
                    4322 => -50.0,
                    _ => (i as f64 / 300.0).sin(),
                };
                (i as f64 / 100.0, y)
            })
            .collect();
        let thin = downsample(&points);
        assert!(thin.len() <= 400, "{}", thin.len());
        assert!(thin.contains(&(43.21, 50.0)) && thin.contains(&(43.22, -50.0)));
        assert!(thin.windows(2).all(|w| w[0].0 <= w[1].0), "in x order");
        assert_eq!(thin.first(), points.first());
        assert_eq!(thin.last(), points.last());
        // Few points pass whole.
        let few = [(0.0, 1.0), (10.0, 2.0), (20.0, 0.5)];
        assert_eq!(downsample(&few), few);
    }

    #[test]
    fn a_path_breaks_where_a_value_cannot_be_drawn() {
        let d = line_path(&[(0.0, Some(1.0)), (5.0, Some(2.0)), (10.0, None), (15.0, Some(3.0)), (20.0, Some(4.0))]);
        assert_eq!(d, "M0.0,1.0 L5.0,2.0 M15.0,3.0 L20.0,4.0");
        assert_eq!(line_path(&[(0.0, None)]), "");
    }

    #[test]
    fn the_nearest_point_to_the_pointer() {
        let points = [(0, 1.0), (10, 2.0), (30, 3.0)];
        assert_eq!(nearest(&points, -5.0), Some(0));
        assert_eq!(nearest(&points, 4.0), Some(0));
        assert_eq!(nearest(&points, 6.0), Some(1));
        assert_eq!(nearest(&points, 25.0), Some(2));
        assert_eq!(nearest(&points, 99.0), Some(2));
        assert_eq!(nearest(&[], 1.0), None);
    }

    #[test]
    fn a_step_going_back_cuts_the_history() {
        #[derive(Clone, Copy, Debug, PartialEq)]
        struct Point(u64, f64);
        let mut h: Vec<Point> = (0..100).map(|s| Point(s, 1.0)).collect();
        // A reset: step 0 again drops the whole old run.
        cut_from(&mut h, 0, |p| p.0);
        assert!(h.is_empty());
        // A rollback to step 40, and a step recorded again.
        let mut h: Vec<Point> = (0..100).map(|s| Point(s, 1.0)).collect();
        cut_from(&mut h, 40, |p| p.0);
        assert_eq!(h.len(), 40);
        assert_eq!(h.last(), Some(&Point(39, 1.0)));
        cut_from(&mut h, 39, |p| p.0);
        assert_eq!(h.last(), Some(&Point(38, 1.0)));
        // Recording in order cuts nothing.
        cut_from(&mut h, 50, |p| p.0);
        assert_eq!(h.len(), 39);
        // A series that still holds two runs draws the newer one.
        let both = [(0, 1.0), (5, 1.0), (9, 1.0), (0, 2.0), (3, 2.0)];
        assert_eq!(newest_run(&both), &both[3..]);
        assert_eq!(newest_run(&both[..3]), &both[..3]);
    }

    #[test]
    fn halving_keeps_the_peaks() {
        let mut h: Vec<(u64, f64)> = (0..10).map(|s| (s, if s == 3 { 9.0 } else { 1.0 })).collect();
        h.push((10, f64::NAN));
        h.push((11, 1.0));
        halve(&mut h, |p| p.1);
        assert_eq!(h.len(), 6);
        assert!(h.contains(&(3, 9.0)));
        assert!(h.iter().any(|p| p.0 == 10 && p.1.is_nan()));
        assert_eq!(h[0], (0, 1.0));
    }
}
