//! `widest!`: a function whose body is compiled three times natively, for
//! AVX-512, for AVX2 and for the baseline, and picked at run time by what
//! the CPU has (in the browser, once, with simd128). The body must be
//! elementwise IEEE arithmetic whose order does not depend on the vector
//! width (no reassociated sums; Rust never fuses a multiply and an add), so
//! every version gives the same bits: the wider ones only do more lanes at
//! once. `gemm` picks its blocking the same way.

macro_rules! widest {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has AVX-512F (checked just above).
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU has AVX2 (checked just above).
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use widest;

widest! {
    /// `*found` = whether `v` holds a NaN or an Inf (its exponent bits all
    /// ones). One pass with no early exit and no float compare, so that it
    /// vectorises: an OR of integer compares.
    fn find_non_finite(v: &[f32], found: &mut bool) {
        let mut any = 0i32;
        for &x in v {
            any |= i32::from((x.to_bits() & 0x7fff_ffff) as i32 > 0x7f7f_ffff);
        }
        *found = any != 0;
    }
}

/// True when no value of `v` is a NaN or an Inf: what the engines check
/// after each layer, as fast as a copy of `v` would be.
pub fn all_finite(v: &[f32]) -> bool {
    let mut found = false;
    find_non_finite(v, &mut found);
    !found
}

#[cfg(test)]
mod tests {
    use super::all_finite;

    #[test]
    fn all_finite_finds_any_nan_or_inf_anywhere() {
        for len in [0usize, 1, 7, 8, 31, 33, 100] {
            let v: Vec<f32> = (0..len).map(|i| (i as f32 - 50.0) * 6e36).collect();
            assert!(all_finite(&v), "len {len}");
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -f32::NAN, f32::from_bits(0x7fc0_0001)] {
                for at in 0..len {
                    let mut w = v.clone();
                    w[at] = bad;
                    assert!(!all_finite(&w), "len {len}, {bad} at {at}");
                }
            }
        }
        let edges = [f32::MAX, f32::MIN, f32::MIN_POSITIVE, -0.0, 1e-45, -1e-45];
        assert!(all_finite(&edges));
    }
}
