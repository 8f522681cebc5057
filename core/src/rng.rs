//! The one seeded random number generator, used for data generation,
//! initialisation and shuffling (STYLE rule 14).
//!
//! xoshiro256** (Blackman & Vigna, <https://prng.di.unimi.it/>), seeded by
//! SplitMix64. It is portable (same numbers on native and wasm32), small,
//! and its whole state is four `u64`s, which checkpoints store so that a
//! resumed run draws exactly the numbers the straight run would have drawn.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// A generator for `seed`; `stream` separates independent uses of one
    /// seed (data, init, shuffling) so that changing one does not shift the
    /// numbers another sees.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        let mut next = || {
            // SplitMix64 step.
            sm = sm.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = sm;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Rng { state: [next(), next(), next(), next()] }
    }

    pub fn from_state(state: [u64; 4]) -> Self {
        Rng { state }
    }

    pub fn state(&self) -> [u64; 4] {
        self.state
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Uniform integer in [0, n), without modulo bias (rejection sampling).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let zone = u64::MAX - (u64::MAX % n);
        loop {
            let x = self.next_u64();
            if x < zone {
                return x % n;
            }
        }
    }

    /// Normal with the given mean and variance, by the Marsaglia polar
    /// method, as TensorFlow Playground's `normalRandom`.
    pub fn normal(&mut self, mean: f64, variance: f64) -> f64 {
        loop {
            let v1 = 2.0 * self.next_f64() - 1.0;
            let v2 = 2.0 * self.next_f64() - 1.0;
            let s = v1 * v1 + v2 * v2;
            if s > 0.0 && s <= 1.0 {
                let result = (-2.0 * s.ln() / s).sqrt() * v1;
                return mean + variance.sqrt() * result;
            }
        }
    }

    /// `normal`, with the `libm` crate's log and sqrt instead of the
    /// platform's, so that the same seed gives the same bits natively and
    /// in the browser (the transformer's initialisation).
    pub fn normal_portable(&mut self, mean: f64, variance: f64) -> f64 {
        loop {
            let v1 = 2.0 * self.next_f64() - 1.0;
            let v2 = 2.0 * self.next_f64() - 1.0;
            let s = v1 * v1 + v2 * v2;
            if s > 0.0 && s <= 1.0 {
                let result = libm::sqrt(-2.0 * libm::log(s) / s) * v1;
                return mean + libm::sqrt(variance) * result;
            }
        }
    }

    /// A uniformly random permutation of 0..n (Fisher–Yates).
    pub fn permutation(&mut self, n: usize) -> Vec<u32> {
        let mut perm: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            let j = self.below(i as u64 + 1) as usize;
            perm.swap(i, j);
        }
        perm
    }
}

/// Streams of one seed. Fixed numbers: changing them changes every run.
pub mod stream {
    pub const DATA: u64 = 1;
    pub const INIT: u64 = 2;
    pub const SHUFFLE: u64 = 3;
    pub const SPLIT: u64 = 4;
    /// Drawing tokens from a trained transformer (`stepscope sample`).
    pub const SAMPLE: u64 = 5;
    /// Augmenting a training image (`data::augment`, one generator a row).
    pub const AUGMENT: u64 = 6;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let mut a = Rng::new(7, stream::DATA);
        let mut b = Rng::new(7, stream::DATA);
        let mut c = Rng::new(7, stream::INIT);
        let xa: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let xb: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        let xc: Vec<u64> = (0..5).map(|_| c.next_u64()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
    }

    #[test]
    fn state_round_trip_continues_the_sequence() {
        let mut a = Rng::new(1, 0);
        a.next_u64();
        let mut b = Rng::from_state(a.state());
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn permutation_is_a_permutation() {
        let mut rng = Rng::new(3, 0);
        let mut p = rng.permutation(100);
        p.sort_unstable();
        assert_eq!(p, (0..100).collect::<Vec<u32>>());
    }

    #[test]
    fn uniform_stays_in_range_and_normal_has_right_moments() {
        let mut rng = Rng::new(9, 0);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| rng.normal(2.0, 4.0)).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.05, "mean {mean}");
        assert!((var - 4.0).abs() < 0.15, "var {var}");
        for _ in 0..1000 {
            let u = rng.uniform(-1.0, 3.0);
            assert!((-1.0..3.0).contains(&u));
        }
    }
}
