//! Summary statistics of a tensor for the page's histograms: the CPU twin
//! of `shaders/tensor_stats.wgsl`, and the decoder of that kernel's
//! 40-float record.

/// Floats per region written by `tensor_stats`: mean, std, min, max,
/// non-finite count, 3 unused, then `HISTOGRAM_BINS` counts.
pub const HISTOGRAM_BINS: usize = 32;
pub const TENSOR_STATS_STRIDE: usize = 8 + HISTOGRAM_BINS;

/// Mean, population standard deviation, range and histogram of the finite
/// values of a tensor, and how many values were not finite.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TensorStats {
    pub mean: f32,
    pub std: f32,
    pub min: f32,
    pub max: f32,
    /// NaN and ±inf values: left out of every other field.
    pub non_finite: u32,
    /// Counts of finite values in `HISTOGRAM_BINS` equal-width bins over
    /// [min, max]; every value is in bin 0 when max == min.
    pub histogram: [u32; HISTOGRAM_BINS],
}

impl TensorStats {
    /// Number of finite values.
    pub fn count(&self) -> u32 {
        self.histogram.iter().sum()
    }
}

/// Bin of `v` in [min, max] split into `HISTOGRAM_BINS` bins, computed in
/// f32 with the kernel's operation order: min(floor((v − min) / (max − min)
/// · 32), 31), and 0 when max == min.
pub fn histogram_bin(v: f32, min: f32, max: f32) -> usize {
    let range = max - min;
    if range > 0.0 {
        (((v - min) / range * HISTOGRAM_BINS as f32).floor() as usize).min(HISTOGRAM_BINS - 1)
    } else {
        0
    }
}

/// The statistics of `values` (the definitions of `tensor_stats.wgsl`;
/// mean and variance are summed in f64 here, in two passes).
pub fn tensor_stats(values: &[f32]) -> TensorStats {
    let mut stats = TensorStats::default();
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    stats.non_finite = (values.len() - finite().count()) as u32;
    let n = finite().count();
    if n == 0 {
        return stats;
    }
    let mean = finite().map(f64::from).sum::<f64>() / n as f64;
    let var = finite().map(|v| (f64::from(v) - mean).powi(2)).sum::<f64>() / n as f64;
    stats.mean = mean as f32;
    stats.std = var.sqrt() as f32;
    stats.min = finite().fold(f32::INFINITY, f32::min);
    stats.max = finite().fold(f32::NEG_INFINITY, f32::max);
    for v in finite() {
        stats.histogram[histogram_bin(v, stats.min, stats.max)] += 1;
    }
    stats
}

/// Decodes one record written by `tensor_stats.wgsl` (the first
/// `TENSOR_STATS_STRIDE` floats of `slice`).
pub fn from_gpu(slice: &[f32]) -> TensorStats {
    assert!(slice.len() >= TENSOR_STATS_STRIDE, "a tensor_stats record is {TENSOR_STATS_STRIDE} floats");
    let mut histogram = [0u32; HISTOGRAM_BINS];
    for (h, &c) in histogram.iter_mut().zip(&slice[8..8 + HISTOGRAM_BINS]) {
        *h = c as u32;
    }
    TensorStats { mean: slice[0], std: slice[1], min: slice[2], max: slice[3], non_finite: slice[4] as u32, histogram }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_example() {
        // Finite values 1, 2, 3, 4: mean 2.5; deviations ±1.5, ±0.5 give
        // var (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25, std √1.25.
        // Bins: (v − 1) / 3 · 32 = 0, 10.67, 21.33, 32 → 0, 10, 21, 31 (clamped).
        let s = tensor_stats(&[3.0, f32::NAN, 1.0, 4.0, f32::NEG_INFINITY, 2.0]);
        assert_eq!(s.mean, 2.5);
        assert_eq!(s.std, 1.25f32.sqrt());
        assert_eq!((s.min, s.max), (1.0, 4.0));
        assert_eq!(s.non_finite, 2);
        let mut h = [0; HISTOGRAM_BINS];
        h[0] = 1;
        h[10] = 1;
        h[21] = 1;
        h[31] = 1;
        assert_eq!(s.histogram, h);
        assert_eq!(s.count(), 4);
    }

    #[test]
    fn constant_empty_and_all_non_finite() {
        let s = tensor_stats(&[-0.5; 9]);
        assert_eq!((s.mean, s.std, s.min, s.max), (-0.5, 0.0, -0.5, -0.5));
        assert_eq!(s.histogram[0], 9);
        assert_eq!(tensor_stats(&[]), TensorStats::default());
        let s = tensor_stats(&[f32::NAN, f32::INFINITY]);
        assert_eq!(s, TensorStats { non_finite: 2, ..TensorStats::default() });
    }

    #[test]
    fn decodes_a_gpu_record() {
        let mut record = vec![0.0f32; TENSOR_STATS_STRIDE];
        record[..5].copy_from_slice(&[0.25, 2.0, -3.0, 4.0, 6.0]);
        record[8] = 5.0;
        record[8 + 31] = 7.0;
        let s = from_gpu(&record);
        assert_eq!((s.mean, s.std, s.min, s.max, s.non_finite), (0.25, 2.0, -3.0, 4.0, 6));
        assert_eq!((s.histogram[0], s.histogram[31], s.count()), (5, 7, 12));
    }
}
