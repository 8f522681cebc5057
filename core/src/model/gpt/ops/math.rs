//! exp, ln, erf, tanh and σ in f32 as straight-line arithmetic: no table, no branch,
//! only IEEE multiplies, adds, one division and selects, never fused. A
//! loop over them vectorises (simd128 in the browser, AVX2 or AVX-512
//! natively, `widest`) and every build gives the same bits, as the CPU
//! engine's sums do (ARCHITECTURE.md, "One matrix product").
//!
//! Accuracy (the tests below hold each to it over dense sweeps, against
//! f64):
//! - `exp`: Cephes' `expf` (ln 2 split in two, a degree-5 polynomial),
//!   within 1 ulp over [−87, 88.7] (0.95 at worst in the sweep below); 0 below −103.98 (as f32 rounds) and
//!   +∞ above 88.73; NaN stays NaN.
//! - `erf`: below 1 in magnitude, x·S(x²) with S a degree-6 polynomial
//!   fitted to erf(x)/x (within 2.5 ulp); from 1 on, Abramowitz & Stegun
//!   7.1.26, 1 − t·P(t)·exp(−x²) with t = 1/(1 + 0.3275911·|x|), which is
//!   within 1.5e-7 of erf in exact arithmetic (what PyTorch's vectorised
//!   CPU kernels use for erf, and so for its exact GELU, and what this
//!   project's WGSL `gelu_forward` uses). Within 2e-7 absolute in all
//!   (1.92e-7 at worst in the sweep below, just past 1):
//!   absolute, not relative, since GELU needs 1 + erf, where that is the
//!   error that shows.
//! - `tanh`: below 0.625 in magnitude, Cephes' `tanhf` polynomial
//!   x + x·z·P(z), z = x²; from there 1 − 2/(exp(2|x|) + 1), which
//!   saturates to ±1 by itself (exp overflows to +∞ past 44.4). Within
//!   1.34 ulp of tanh over every finite f32 (1.330 at 0.62830955);
//!   odd, bounded by 1.
//! - `ln_1p` and `ln`: 2·atanh(x/(2 + x)) as seven terms of its series;
//!   ln splits off the exponent first. Within 1.93 and 1.81 ulp.
//! - `sigmoid`: 1/(1 + e) for x ≥ 0 and e/(1 + e) below, e = exp(−|x|):
//!   nothing overflows, and the small side keeps its relative accuracy
//!   down to the subnormals. Within 2.41 ulp of 1/(1 + e⁻ˣ) over every
//!   finite f32 (2.402 at −4.157; 1.50 for x ≥ 0) and 9e-8 absolute
//!   (8.93e-8 at 7.86).

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// 1.5·2²³: adding it to a value below 2²² in magnitude rounds that value
/// to an integer (ties to even), which then sits in the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
/// ln 2 = LN2_HI + LN2_LO, LN2_HI exact in 9 bits so n·LN2_HI is exact.
const LN2_HI: f32 = 355.0 / 512.0;
const LN2_LO: f32 = -2.121_944_4e-4;

/// eˣ (above).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // x = n·ln 2 + r, |r| ≤ ln 2 / 2.
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // eʳ = 1 + r + r²·P(r).
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1)
        * r
        + 0.5;
    let e = r * r * p + r + 1.0;
    // 2ⁿ as two normal halves, so that n from −150 to 128 scales without
    // leaving the normal range until the last (correctly rounded) multiply.
    // Wrapping: far outside the range (|x| past 10⁵) n does not fit the
    // mantissa and these bits are garbage, which the selects below discard.
    let ni = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let half = ni >> 1;
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) << 23) as u32);
    let y = e * pow2(half) * pow2(ni - half);
    if x > 88.73 {
        f32::INFINITY
    } else if x < -104.0 {
        0.0
    } else {
        y
    }
}

/// erf(x) (above). NaN stays NaN; ±∞ give ±1.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_and_gauss(x).0
}

/// (erf(x), exp(−x²)): the second is the exp the first takes from 1 on,
/// which GELU's backward needs too.
#[inline(always)]
#[allow(clippy::approx_constant)] // S's constant term is fitted, near 2/√π by nature
pub fn erf_and_gauss(x: f32) -> (f32, f32) {
    const P: f32 = 0.327_591_1;
    let a = x.abs();
    // |x| < 1: x·S(x²), S fitted to erf(x)/x (relative error, degree 6).
    let a2 = a * a;
    let s = ((((((7.898_162e-5 * a2 - 8.024_338e-4) * a2 + 5.190_051_6e-3) * a2 - 2.685_480_8e-2) * a2
        + 1.128_361_2e-1)
        * a2
        - 3.761_263e-1)
        * a2
        + 1.128_379_2)
        * a;
    // |x| ≥ 1: Abramowitz & Stegun 7.1.26.
    let t = 1.0 / (1.0 + P * a);
    let poly = t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_8 + t * (-1.453_152 + t * 1.061_405_4))));
    let gauss = exp(-a2);
    let tail = 1.0 - poly * gauss;
    let y = if a < 1.0 { s } else { tail };
    // The sign of x, on y (erf is odd).
    (f32::from_bits(y.to_bits() | (x.to_bits() & 0x8000_0000)), gauss)
}

/// tanh(x) (above). NaN stays NaN; ±∞ give ±1.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // |x| < 0.625: Cephes' tanhf, a + a·z·P(z); the form below would lose
    // bits to 1 − (nearly 1) there.
    let z = a * a;
    let p = ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z - 3.333_328e-1) * z;
    let small = a + a * p;
    let large = 1.0 - 2.0 / (exp(a + a) + 1.0);
    let y = if a < 0.625 { small } else { large };
    f32::from_bits(y.to_bits() | (x.to_bits() & 0x8000_0000))
}

/// σ(x) = 1/(1 + e⁻ˣ) (above): 1/(1 + e) for x ≥ 0 and e/(1 + e) below,
/// with e = exp(−|x|) ≤ 1. NaN stays NaN; σ(+∞) = 1, σ(−∞) = 0.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-x.abs());
    let n = if x < 0.0 { e } else { 1.0 };
    n / (1.0 + e)
}

/// (σ(x), σ′(x)): σ′ = σ (1 − σ) = e/(1 + e)² with e = exp(−|x|), so no
/// 1 − σ that cancels, and no ∞·0 where e⁻ˣ overflows. σ′ is within
/// 4.2e-8 absolute over every finite f32 (4.10e-8 at 0.8806).
#[inline(always)]
pub fn sigmoid_and_slope(x: f32) -> (f32, f32) {
    let e = exp(-x.abs());
    let d = 1.0 + e;
    let n = if x < 0.0 { e } else { 1.0 };
    (n / d, e / (d * d))
}

/// ln(1 + x) for x from −0.29 to 1 (what `ln` and the BCE loss need):
/// with s = x/(2 + x), ln(1 + x) = 2 atanh(s) = 2s (1 + s²/3 + s⁴/5 + …),
/// |s| ≤ 1/3, seven terms (the eighth is below 1.4e-8 relative). No
/// 1 + x is formed, so a small x keeps every bit (ln(1 + x) ≈ x).
/// Within 1.93 ulp over the domain (1.924 at 0.0311; the test below).
#[inline(always)]
pub fn ln_1p(x: f32) -> f32 {
    let s = x / (2.0 + x);
    let w = s * s;
    let p = (((((w * (1.0 / 13.0) + 1.0 / 11.0) * w + 1.0 / 9.0) * w + 1.0 / 7.0) * w + 0.2) * w + 1.0 / 3.0) * w;
    let t = s + s;
    t + t * p
}

/// ln x for a positive normal x: x = m·2ᵏ with m in [√½, √2), so
/// m − 1 is exact and ln x = k·ln 2 + `ln_1p`(m − 1), ln 2 split in two so
/// that k·LN2_HI is exact. Within 1.81 ulp (1.803 at 1.2814; the test
/// below); +∞ stays +∞
/// and NaN NaN. What the MLP's cross-entropy takes of its row sums (at
/// least 1) and the same bits natively and in the browser.
#[inline(always)]
pub fn ln(x: f32) -> f32 {
    let bits = x.to_bits() as i32;
    // m's bits with the exponent of [1, 2), then halved where m ≥ √2.
    let mut k = ((bits >> 23) & 0xff) - 127;
    let mut m = f32::from_bits(((bits & 0x007f_ffff) | 0x3f80_0000) as u32);
    let big = m >= std::f32::consts::SQRT_2;
    k += i32::from(big);
    m = if big { m * 0.5 } else { m };
    let kf = k as f32;
    let y = kf * LN2_HI + (kf * LN2_LO + ln_1p(m - 1.0));
    if x > f32::MAX || x.is_nan() {
        x
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(got: f32, want: f64) -> f64 {
        let spacing = {
            let w = want.abs() as f32;
            (f32::from_bits(w.to_bits() + 1) - w) as f64
        };
        (got as f64 - want).abs() / spacing
    }

    /// Within 1 ulp of e^x (f64) at 400,001 points over [−87, 88.7] and at
    /// the ends of the range; the special values as IEEE defines them.
    #[test]
    fn exp_is_within_one_ulp() {
        let mut worst = (0.0f64, 0.0f32);
        let n = 400_000;
        for i in 0..=n {
            let x = -87.0 + (88.7 + 87.0) * i as f32 / n as f32;
            let u = ulps(exp(x), (x as f64).exp());
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 1.0, "exp({}) is {} ulp out", worst.1, worst.0);
        for x in [-1e-30f32, 1e-30, -0.5, 0.5, 1.0, -1.0, 88.72, -88.0, -100.0, -103.9] {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            assert!(
                (got - want).abs() <= 2.0 * f64::from(f32::EPSILON) * want + 1e-44,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
    }

    /// Within 2e-7 of erf (f64) at 600,001 points over [−6, 6] and at
    /// tiny and huge arguments; odd, bounded by 1, NaN stays NaN.
    #[test]
    fn erf_is_within_its_stated_error() {
        let mut worst = (0.0f64, 0.0f32);
        let n = 600_000;
        for i in 0..=n {
            let x = -6.0 + 12.0 * i as f32 / n as f32;
            let err = (erf(x) as f64 - libm::erf(x as f64)).abs();
            if err > worst.0 {
                worst = (err, x);
            }
            assert_eq!(erf(-x).to_bits(), (-erf(x)).to_bits(), "erf is odd at {x}");
            assert!(erf(x).abs() <= 1.0, "|erf({x})| ≤ 1");
        }
        assert!(worst.0 <= 2e-7, "erf({}) is {:e} out", worst.1, worst.0);
        for x in [1e-30f32, 1e-6, 1e3, f32::MAX] {
            assert!((erf(x) as f64 - libm::erf(x as f64)).abs() <= 2e-7, "erf({x})");
        }
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    /// Within 1.34 ulp of tanh (f64) at every 257th f32 bit pattern (all
    /// magnitudes, 16.7 million points) and at every f32 in [0.6, 0.65],
    /// where the two forms meet; odd, bounded by 1. (A sweep of every
    /// finite f32 gave the same worst, 1.330 ulp at 0.62830955.)
    #[test]
    fn tanh_is_within_its_stated_error() {
        let sweep = (0..=u32::MAX).step_by(257).map(f32::from_bits);
        let seam = (0.6f32.to_bits()..=0.65f32.to_bits()).map(f32::from_bits);
        let mut worst = (0.0f64, 0.0f32);
        for x in sweep.chain(seam).filter(|x| x.is_finite()) {
            let y = tanh(x);
            let u = ulps(y, (x as f64).tanh());
            if u > worst.0 {
                worst = (u, x);
            }
            assert_eq!(tanh(-x).to_bits(), (-y).to_bits(), "tanh is odd at {x}");
            assert!(y.abs() <= 1.0, "|tanh({x})| ≤ 1");
        }
        assert!(worst.0 <= 1.34, "tanh({}) is {} ulp out", worst.1, worst.0);
        assert_eq!(tanh(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh(9.1), 1.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    /// σ within 2.41 ulp and 9e-8 absolute, σ′ within 4.2e-8 absolute, of
    /// f64 at every 257th f32 bit pattern (the bounds are the worst over
    /// every finite f32); σ(x) + σ(−x) within an ulp of 1.
    #[test]
    fn sigmoid_is_within_its_stated_error() {
        let mut worst = (0.0f64, 0.0f32);
        for x in (0..=u32::MAX).step_by(257).map(f32::from_bits).filter(|x| x.is_finite()) {
            let want = 1.0 / (1.0 + (-(x as f64)).exp());
            let (s, slope) = sigmoid_and_slope(x);
            assert_eq!(s.to_bits(), sigmoid(x).to_bits());
            let u = ulps(s, want);
            if u > worst.0 {
                worst = (u, x);
            }
            assert!((s as f64 - want).abs() <= 9e-8, "σ({x}) = {s}, want {want}");
            assert!((slope as f64 - want * (1.0 - want)).abs() <= 4.2e-8, "σ′({x}) = {slope}");
            assert!((s + sigmoid(-x) - 1.0).abs() <= f32::EPSILON, "σ({x}) + σ(−{x})");
        }
        assert!(worst.0 <= 2.41, "σ({}) is {} ulp out", worst.1, worst.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid_and_slope(f32::NEG_INFINITY).1, 0.0);
        assert_eq!(sigmoid_and_slope(200.0).1, 0.0);
        assert!(sigmoid(f32::NAN).is_nan());
    }

    /// `ln_1p` within 1.93 ulp of f64's over its domain, dense near 0.
    #[test]
    fn ln_1p_is_within_its_stated_error() {
        let mut worst = (0.0f64, 0.0f32);
        let n = 400_000;
        let grid = (0..=n).map(|i| -0.29 + 1.29 * i as f32 / n as f32);
        let small = (0..2000).map(|i| f32::from_bits(0x3380_0000 + i * 0x1_1000)).flat_map(|x| [x, -x]);
        for x in grid.chain(small).chain([0.0, -0.0, 1.0, -0.29, 1e-30, -1e-30]) {
            let u = ulps(ln_1p(x), (x as f64).ln_1p());
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 1.93, "ln_1p({}) is {} ulp out", worst.1, worst.0);
    }

    /// `ln` within 1.81 ulp of f64's from the smallest normal to the largest
    /// f32 (every 4,099th bit pattern and a dense sweep of [1, 1000]).
    #[test]
    fn ln_is_within_its_stated_error() {
        let mut worst = (0.0f64, 0.0f32);
        let patterns = (0x0080_0000..0x7f80_0000u32).step_by(4099).map(f32::from_bits);
        let dense = (0..=400_000).map(|i| 1.0 + 999.0 * i as f32 / 400_000.0);
        for x in patterns.chain(dense).chain([1.0, f32::MAX, f32::MIN_POSITIVE, 2.0, 0.5]) {
            let want = (x as f64).ln();
            // Near x = 1 the value is small: count in ulps of the value.
            let u = ulps(ln(x), want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 1.81, "ln({}) is {} ulp out", worst.1, worst.0);
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(ln(f32::INFINITY), f32::INFINITY);
        assert!(ln(f32::NAN).is_nan());
    }
}
