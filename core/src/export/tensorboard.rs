//! TensorBoard event files: the records a `SummaryWriter` writes, so a
//! Stepscope run opens in TensorBoard (and in tools that import its files).
//!
//! A file is a sequence of records, each framed as
//! `u64 length (LE) · masked CRC32C(length) · data · masked CRC32C(data)`,
//! mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8. Each record's data is a
//! protobuf `Event` (`tensorflow/core/util/event.proto`): wall_time = 1
//! (double), step = 2 (int64), file_version = 3 (string), summary = 5. A
//! `Summary` holds repeated `Value` = 1: tag = 1 (string), simple_value = 2
//! (float), histo = 5 (`HistogramProto`: min 1, max 2, num 3, sum 4,
//! sum_squares 5, packed bucket_limit 6 and bucket 7, all doubles). The
//! first record names the file version ("brain.Event:2"). Pure functions
//! of their inputs (no files, no clock), so the page and the CLI share them.

use crate::engine::StepMetrics;

/// Buckets of a histogram (equal widths between the tensor's min and max).
pub const HISTOGRAM_BUCKETS: usize = 30;

/// The first record of every event file.
pub fn file_version_record(wall_time: f64) -> Vec<u8> {
    let mut event = Vec::new();
    field_double(&mut event, 1, wall_time);
    field_bytes(&mut event, 3, b"brain.Event:2");
    record(&event)
}

/// A step's own scalars, under the tags every Stepscope writer uses: the
/// loss, the gradient norm (and whether it was clipped), the learning rate
/// and the engine's phases (`phase/gpu_ms` where the GPU timed the step).
/// The CLI adds its checkpoint and logging times and steps/s; the page its
/// frame's.
pub fn step_scalars(m: &StepMetrics) -> Vec<(&'static str, f32)> {
    let p = &m.phases;
    let mut values = vec![
        ("loss/train", m.loss),
        ("grad_norm/norm", m.grad_norm),
        ("grad_norm/clipped", f32::from(u8::from(m.clipped))),
        ("learning_rate", m.lr as f32),
        ("phase/data_ms", p.data_ms as f32),
        ("phase/forward_ms", p.forward_ms as f32),
        ("phase/backward_ms", p.backward_ms as f32),
        ("phase/optimizer_ms", p.optimizer_ms as f32),
    ];
    if p.communication_ms > 0.0 {
        // A sharded run's all-reduce and wait for the slowest rank.
        values.push(("phase/communication_ms", p.communication_ms as f32));
    }
    if let Some(gpu) = m.gpu_ms {
        values.push(("phase/gpu_ms", gpu as f32));
    }
    if let Some(z) = m.z_loss {
        values.push(("loss/z_loss", z));
    }
    values
}

/// One record holding `values` (tag, value) as scalars of `step`.
pub fn scalars_record(wall_time: f64, step: u64, values: &[(&str, f32)]) -> Vec<u8> {
    let mut summary = Vec::new();
    for (tag, v) in values {
        let mut value = Vec::new();
        field_bytes(&mut value, 1, tag.as_bytes());
        key(&mut value, 2, 5);
        value.extend_from_slice(&v.to_le_bytes());
        field_bytes(&mut summary, 1, &value);
    }
    event_record(wall_time, step, &summary)
}

/// One record holding a histogram of `values` under `tag` at `step`.
/// Non-finite values are left out of the buckets (and of min, max and the
/// sums), as a histogram of a tensor holding them has no finite range.
pub fn histogram_record(wall_time: f64, step: u64, tag: &str, values: &[f32]) -> Vec<u8> {
    histogram_proto_record(wall_time, step, tag, &Histogram::of(values))
}

/// One record holding `h` under `tag` at `step`.
pub fn histogram_proto_record(wall_time: f64, step: u64, tag: &str, h: &Histogram) -> Vec<u8> {
    let mut histo = Vec::new();
    field_double(&mut histo, 1, h.min);
    field_double(&mut histo, 2, h.max);
    field_double(&mut histo, 3, h.num);
    field_double(&mut histo, 4, h.sum);
    field_double(&mut histo, 5, h.sum_squares);
    packed_doubles(&mut histo, 6, &h.bucket_limit);
    packed_doubles(&mut histo, 7, &h.bucket);
    let mut value = Vec::new();
    field_bytes(&mut value, 1, tag.as_bytes());
    field_bytes(&mut value, 5, &histo);
    let mut summary = Vec::new();
    field_bytes(&mut summary, 1, &value);
    event_record(wall_time, step, &summary)
}

/// A `HistogramProto`'s figures: `bucket[i]` counts the values in
/// (`bucket_limit[i-1]`, `bucket_limit[i]`], the first from `min`.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub min: f64,
    pub max: f64,
    pub num: f64,
    pub sum: f64,
    pub sum_squares: f64,
    pub bucket_limit: Vec<f64>,
    pub bucket: Vec<f64>,
}

impl Histogram {
    /// From the engine's statistics of a tensor (`TensorStats`: its
    /// finite values in `HISTOGRAM_BINS` equal bins over [min, max], which
    /// become the buckets); `sum` and `sum_squares` from its mean and
    /// (population) standard deviation, as exact as those.
    pub fn of_stats(s: &crate::stats::TensorStats) -> Histogram {
        let num = f64::from(s.count());
        if num == 0.0 {
            return Histogram {
                min: 0.0,
                max: 0.0,
                num,
                sum: 0.0,
                sum_squares: 0.0,
                bucket_limit: vec![0.0],
                bucket: vec![0.0],
            };
        }
        let (min, max, mean, std) = (f64::from(s.min), f64::from(s.max), f64::from(s.mean), f64::from(s.std));
        let (sum, sum_squares) = (mean * num, (std * std + mean * mean) * num);
        if max <= min {
            return Histogram { min, max, num, sum, sum_squares, bucket_limit: vec![max], bucket: vec![num] };
        }
        let n = s.histogram.len();
        let width = (max - min) / n as f64;
        let bucket_limit = (1..=n).map(|i| if i == n { max } else { min + width * i as f64 }).collect();
        Histogram {
            min,
            max,
            num,
            sum,
            sum_squares,
            bucket_limit,
            bucket: s.histogram.iter().map(|&c| f64::from(c)).collect(),
        }
    }

    pub fn of(values: &[f32]) -> Histogram {
        let finite = || values.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v));
        let (mut min, mut max, mut num, mut sum, mut sum_squares) = (f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0, 0.0);
        for v in finite() {
            min = min.min(v);
            max = max.max(v);
            num += 1.0;
            sum += v;
            sum_squares += v * v;
        }
        if num == 0.0 {
            return Histogram { min: 0.0, max: 0.0, num, sum, sum_squares, bucket_limit: vec![0.0], bucket: vec![0.0] };
        }
        // A constant tensor is one bucket at its value.
        let n = if max > min { HISTOGRAM_BUCKETS } else { 1 };
        let width = (max - min) / n as f64;
        let bucket_limit: Vec<f64> = (1..=n).map(|i| if i == n { max } else { min + width * i as f64 }).collect();
        let mut bucket = vec![0.0; n];
        for v in finite() {
            let i = if width > 0.0 { (((v - min) / width) as usize).min(n - 1) } else { 0 };
            bucket[i] += 1.0;
        }
        Histogram { min, max, num, sum, sum_squares, bucket_limit, bucket }
    }
}

fn event_record(wall_time: f64, step: u64, summary: &[u8]) -> Vec<u8> {
    let mut event = Vec::new();
    field_double(&mut event, 1, wall_time);
    key(&mut event, 2, 0);
    varint(&mut event, step);
    field_bytes(&mut event, 5, summary);
    record(&event)
}

/// `data` framed as a TFRecord.
pub fn record(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// TFRecord's masked CRC32C (Castagnoli).
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = CRC32C.checksum(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

fn key(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, u64::from(field << 3 | wire));
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field_double(out: &mut Vec<u8>, field: u32, v: f64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn field_bytes(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(out, field, 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn packed_doubles(out: &mut Vec<u8>, field: u32, values: &[f64]) {
    key(out, field, 2);
    varint(out, 8 * values.len() as u64);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a file into its records' data, checking both CRCs.
    fn records(mut file: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !file.is_empty() {
            let len = u64::from_le_bytes(file[..8].try_into().unwrap()) as usize;
            assert_eq!(u32::from_le_bytes(file[8..12].try_into().unwrap()), masked_crc(&file[..8]));
            let data = &file[12..12 + len];
            assert_eq!(u32::from_le_bytes(file[12 + len..16 + len].try_into().unwrap()), masked_crc(data));
            out.push(data.to_vec());
            file = &file[16 + len..];
        }
        out
    }

    #[test]
    fn crc32c_is_castagnoli_and_masked_as_tfrecord() {
        // CRC-32C check value (RFC 3720, "123456789").
        assert_eq!(CRC32C.checksum(b"123456789"), 0xe306_9283);
        // The mask of TensorFlow's `crc32c::Mask`: CRC32C("abc") =
        // 0x364b3fb7, ((c >> 15) | (c << 17)) + 0xa282ead8 worked by hand.
        assert_eq!(CRC32C.checksum(b"abc"), 0x364b_3fb7);
        assert_eq!(masked_crc(b"abc"), 0x21f1_576e);
    }

    #[test]
    fn events_are_framed_and_encoded_field_by_field() {
        let mut file = file_version_record(1.5);
        file.extend(scalars_record(2.0, 300, &[("loss/train", 0.25)]));
        let data = records(&file);
        assert_eq!(data.len(), 2);
        // wall_time (1, fixed64) 1.5, file_version (3) "brain.Event:2".
        let mut expected = vec![0x09];
        expected.extend(1.5f64.to_le_bytes());
        expected.extend([0x1a, 13]);
        expected.extend(b"brain.Event:2");
        assert_eq!(data[0], expected);
        // step 300 as a varint (0xac 0x02), then summary (5) → value (1) →
        // tag (1) and simple_value (2, fixed32).
        let mut value = vec![0x0a, 10];
        value.extend(b"loss/train");
        value.push(0x15);
        value.extend(0.25f32.to_le_bytes());
        let mut expected = vec![0x09];
        expected.extend(2.0f64.to_le_bytes());
        expected.extend([0x10, 0xac, 0x02, 0x2a, value.len() as u8 + 2, 0x0a, value.len() as u8]);
        expected.extend(value);
        assert_eq!(data[1], expected);
    }

    #[test]
    fn a_histogram_counts_every_finite_value_once() {
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).chain([f32::NAN, f32::INFINITY]).collect();
        let h = Histogram::of(&values);
        assert_eq!(h.num, 1000.0);
        assert_eq!(h.bucket.iter().sum::<f64>(), 1000.0);
        assert_eq!(h.bucket_limit.len(), HISTOGRAM_BUCKETS);
        assert_eq!(*h.bucket_limit.last().unwrap(), h.max);
        assert!(h.bucket_limit.windows(2).all(|w| w[0] < w[1]));
        let constant = Histogram::of(&[2.0; 5]);
        assert_eq!((constant.bucket_limit.clone(), constant.bucket.clone()), (vec![2.0], vec![5.0]));
        assert_eq!(Histogram::of(&[]).num, 0.0);
        // Encoded: one record whose data ends with the packed buckets.
        let data = records(&histogram_record(1.0, 7, "weights/layers.0.weight", &values));
        assert_eq!(data.len(), 1);
    }

    /// The engine's statistics of a tensor make the same histogram as its
    /// values, up to the bins (the engine's 32 against 30 here) and the
    /// sums' rounding.
    #[test]
    fn a_histogram_of_the_engines_statistics_counts_the_tensor() {
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).chain([f32::NAN]).collect();
        let (stats, direct) = (crate::stats::tensor_stats(&values), Histogram::of(&values));
        let h = Histogram::of_stats(&stats);
        assert_eq!((h.num, h.min, h.max), (direct.num, direct.min, direct.max));
        assert_eq!(h.bucket.iter().sum::<f64>(), 1000.0);
        assert_eq!(h.bucket.len(), crate::stats::HISTOGRAM_BINS);
        assert_eq!(*h.bucket_limit.last().unwrap(), h.max);
        assert!(
            (h.sum - direct.sum).abs() < 1e-3 && (h.sum_squares - direct.sum_squares).abs() < 1e-2 * direct.sum_squares
        );
        let constant = Histogram::of_stats(&crate::stats::tensor_stats(&[2.0; 5]));
        assert_eq!((constant.bucket_limit, constant.bucket, constant.sum), (vec![2.0], vec![5.0], 10.0));
        assert_eq!(Histogram::of_stats(&crate::stats::tensor_stats(&[])).num, 0.0);
    }
}
