//! The one matrix product under every dense layer of both model kinds:
//!
//!   C[r, j] ← C[r, j] + Σ_k A[r, k]·B[k, j],   k = 0, 1, 2, … in order,
//!
//! each term a multiply then an add (never fused), onto C's value as it
//! stands. That is the summation order of a plain dot product started from
//! C, so the result is the same bits whatever the vector width: the scalar
//! loop, WebAssembly's simd128, and the AVX2 or AVX-512 build picked at run
//! time on x86-64 all agree (tested against `gemm_reference`). Callers pick
//! C's starting value (`Start`): the bias (forward), zero (∂x), the
//! gradient so far (∂W).
//!
//! Speed comes from register blocking, not from reordering: a block of R
//! rows × W columns of C stays in registers while k runs, so each B row
//! loaded serves R rows and each A value W columns. On AVX-512 the whole
//! 8 × 32 blocks are `avx512::block_8x32`: the same sums, in assembly.

#[cfg(target_arch = "x86_64")]
mod avx512;

/// A, read as A[r, k] = data[r·row_stride + k·k_stride]: a row-major
/// matrix (k_stride 1) or the transpose of one (row_stride 1).
#[derive(Clone, Copy)]
pub struct Lhs<'a> {
    pub data: &'a [f32],
    pub row_stride: usize,
    pub k_stride: usize,
}

impl Lhs<'_> {
    #[inline(always)]
    fn at(&self, r: usize, k: usize) -> f32 {
        self.data[r * self.row_stride + k * self.k_stride]
    }
}

/// Where each sum starts: C's value as it stands, zero, or a row (the
/// bias) alike for every row of C. The same bits as filling C with that
/// value first, without the pass over C that filling costs.
#[derive(Clone, Copy)]
pub enum Start<'a> {
    C,
    Zero,
    Row(&'a [f32]),
}

impl Start<'_> {
    /// C[r, j..j + w]'s starting values into `acc`.
    #[inline(always)]
    fn load(self, acc: &mut [f32], c: &[f32], ldc: usize, r: usize, j: usize) {
        match self {
            Start::C => acc.copy_from_slice(&c[r * ldc + j..][..acc.len()]),
            Start::Zero => acc.fill(0.0),
            Start::Row(row) => acc.copy_from_slice(&row[j..][..acc.len()]),
        }
    }
}

/// C (m, n) with row stride `ldc` += A (m, k) · B (k, n) with row stride
/// `ldb`, in the order above.
#[allow(clippy::too_many_arguments)]
pub fn gemm(c: &mut [f32], ldc: usize, a: Lhs<'_>, b: &[f32], ldb: usize, m: usize, n: usize, k: usize) {
    gemm_from(Start::C, c, ldc, a, b, ldb, m, n, k);
}

/// C (m, n) = `start` + A (m, k) · B (k, n), in the order above.
#[allow(clippy::too_many_arguments)]
pub fn gemm_from(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked just above).
            return unsafe { gemm_avx512(start, c, ldc, a, b, ldb, m, n, k) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 (checked just above).
            return unsafe { gemm_avx2(start, c, ldc, a, b, ldb, m, n, k) };
        }
    }
    blocked::<4, 16>(start, c, ldc, a, b, ldb, m, n, k, None);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_avx512(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
) {
    blocked::<8, 32>(start, c, ldc, a, b, ldb, m, n, k, Some(avx512::block_8x32));
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_avx2(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
) {
    blocked::<4, 24>(start, c, ldc, a, b, ldb, m, n, k, None);
}

/// Blocks of R rows × W columns held in registers, then the columns left
/// in blocks of W/2 and W/4 (a head of 32 under a block of 64), 8 and 4,
/// then the last few one column at a time (still R rows at once); rows past the
/// last R as single rows. Every path sums in the same order.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn blocked<const R: usize, const W: usize>(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    m: usize,
    n: usize,
    k: usize,
    kernel: Option<Kernel>,
) {
    let mut j = columns::<R, W>(start, c, ldc, a, b, ldb, m, 0, n, k, kernel);
    if W >= 32 {
        j = columns::<R, 32>(start, c, ldc, a, b, ldb, m, j, n, k, None);
    }
    if W >= 16 {
        j = columns::<R, 16>(start, c, ldc, a, b, ldb, m, j, n, k, None);
    }
    j = columns::<R, 8>(start, c, ldc, a, b, ldb, m, j, n, k, None);
    j = columns::<R, 4>(start, c, ldc, a, b, ldb, m, j, n, k, None);
    columns::<R, 1>(start, c, ldc, a, b, ldb, m, j, n, k, None);
}

/// A hand-written R × W block (`avx512::block_8x32`): the same result as
/// `block::<R, W>`, with the same arguments. Unsafe: it needs the CPU
/// features its path was picked for.
type Kernel = unsafe fn(Start<'_>, &mut [f32], usize, Lhs<'_>, &[f32], usize, usize, usize, usize);

/// The whole blocks of W columns from `j0` on, over every row: returns
/// the first column left.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn columns<const R: usize, const W: usize>(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    m: usize,
    j0: usize,
    n: usize,
    k: usize,
    kernel: Option<Kernel>,
) -> usize {
    let end = j0 + (n - j0) / W * W;
    let full_rows = m - m % R;
    for j in (j0..end).step_by(W) {
        for r0 in (0..full_rows).step_by(R) {
            match kernel {
                // SAFETY: a kernel is passed only by the path whose CPU
                // features it needs (`gemm_avx512`).
                Some(kernel) => unsafe { kernel(start, c, ldc, a, b, ldb, r0, j, k) },
                None if W == 8 && R == 8 => block_8x8_paired(start, c, ldc, a, b, ldb, r0, j, k),
                None => block::<R, W>(start, c, ldc, a, b, ldb, r0, j, k),
            }
        }
        for r in full_rows..m {
            block::<1, W>(start, c, ldc, a, b, ldb, r, j, k);
        }
    }
    end
}

/// C[r0..r0+R, j0..j0+W] in registers over every k.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block<const R: usize, const W: usize>(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    r0: usize,
    j0: usize,
    k: usize,
) {
    let mut acc = [[0.0f32; W]; R];
    for (r, row) in acc.iter_mut().enumerate() {
        start.load(row, c, ldc, r0 + r, j0);
    }
    for kk in 0..k {
        let b_row: &[f32; W] = b[kk * ldb + j0..][..W].try_into().expect("W columns");
        for (r, row) in acc.iter_mut().enumerate() {
            let x = a.at(r0 + r, kk);
            for (cv, &bv) in row.iter_mut().zip(b_row) {
                *cv += x * bv;
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        c[(r0 + r) * ldc + j0..][..W].copy_from_slice(row);
    }
}

/// `block::<8, 8>` with two rows in each 16-lane register: row 2p in lanes
/// 0..8, row 2p + 1 in lanes 8..16, B's row of 8 in both halves. A block
/// of 8 columns (a narrow C, as a conv layer's ∂W with its 8 filters) then
/// fills AVX-512's vectors instead of half of each; every lane does what
/// `block` does for its element, so the bits are the same.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block_8x8_paired(
    start: Start<'_>,
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    b: &[f32],
    ldb: usize,
    r0: usize,
    j0: usize,
    k: usize,
) {
    let mut acc = [[0.0f32; 16]; 4];
    for (p, pair) in acc.iter_mut().enumerate() {
        let (top, bottom) = pair.split_at_mut(8);
        start.load(top, c, ldc, r0 + 2 * p, j0);
        start.load(bottom, c, ldc, r0 + 2 * p + 1, j0);
    }
    for kk in 0..k {
        let b_row: &[f32; 8] = b[kk * ldb + j0..][..8].try_into().expect("8 columns");
        let b2: [f32; 16] = std::array::from_fn(|i| b_row[i % 8]);
        for (p, pair) in acc.iter_mut().enumerate() {
            let (x0, x1) = (a.at(r0 + 2 * p, kk), a.at(r0 + 2 * p + 1, kk));
            let x: [f32; 16] = std::array::from_fn(|i| if i < 8 { x0 } else { x1 });
            for ((cv, &xv), &bv) in pair.iter_mut().zip(&x).zip(&b2) {
                *cv += xv * bv;
            }
        }
    }
    for (p, pair) in acc.iter().enumerate() {
        c[(r0 + 2 * p) * ldc + j0..][..8].copy_from_slice(&pair[..8]);
        c[(r0 + 2 * p + 1) * ldc + j0..][..8].copy_from_slice(&pair[8..]);
    }
}

/// `gemm` as one dot product per element: the order every build keeps.
#[allow(clippy::too_many_arguments)]
pub fn gemm_reference(c: &mut [f32], ldc: usize, a: Lhs<'_>, b: &[f32], ldb: usize, m: usize, n: usize, k: usize) {
    for r in 0..m {
        for j in 0..n {
            let mut sum = c[r * ldc + j];
            for kk in 0..k {
                sum += a.at(r, kk) * b[kk * ldb + j];
            }
            c[r * ldc + j] = sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Gemm = fn(Start<'_>, &mut [f32], usize, Lhs<'_>, &[f32], usize, usize, usize, usize);

    /// Every path (the blocks, the edges, whatever width this CPU picks)
    /// gives the reference's bits, for A plain and transposed, at sizes
    /// that leave edges in both directions.
    #[test]
    fn gemm_equals_the_reference_bit_for_bit() {
        let mut rng = crate::rng::Rng::new(11, 0);
        for (m, n, k) in [
            (1, 1, 1),
            (3, 5, 2),
            (6, 64, 7),
            (13, 130, 33),
            (7, 200, 65),
            (24, 24, 1),
            (5, 0, 3),
            (16, 64, 0),
            (17, 96, 130),
            (9, 13, 5),
            (16, 196, 25),
            // A conv layer's ∂W (8 filters: the paired 8-column block).
            (25, 8, 784),
            (16, 8, 3),
        ] {
            let mut values = |len: usize| (0..len).map(|_| rng.uniform(-2.0, 2.0) as f32).collect::<Vec<f32>>();
            let (a, b, c0) = (values(m * k), values(k * n), values(m * n));
            for lhs in [Lhs { data: &a, row_stride: k, k_stride: 1 }, Lhs { data: &a, row_stride: 1, k_stride: m }] {
                let mut want = c0.clone();
                gemm_reference(&mut want, n, lhs, &b, n, m, n, k);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                // What this CPU runs, and each blocking's generic code.
                let paths: [(&str, Gemm); 4] = [
                    ("gemm", gemm_from),
                    ("4x16", |s, c, ldc, a, b, ldb, m, n, k| blocked::<4, 16>(s, c, ldc, a, b, ldb, m, n, k, None)),
                    ("4x24", |s, c, ldc, a, b, ldb, m, n, k| blocked::<4, 24>(s, c, ldc, a, b, ldb, m, n, k, None)),
                    ("8x32", |s, c, ldc, a, b, ldb, m, n, k| blocked::<8, 32>(s, c, ldc, a, b, ldb, m, n, k, None)),
                ];
                for (name, path) in paths {
                    let mut got = c0.clone();
                    path(Start::C, &mut got, n, lhs, &b, n, m, n, k);
                    assert_eq!(bits(&got), bits(&want), "{name}: m={m} n={n} k={k}");
                    // From zero and from a bias row: as if C were filled first.
                    let row: Vec<f32> = c0.iter().take(n).copied().collect();
                    for (start, fill) in [(Start::Zero, vec![0.0; n]), (Start::Row(&row), row.clone())] {
                        let mut want = fill.repeat(m);
                        gemm_reference(&mut want, n, lhs, &b, n, m, n, k);
                        let mut got = vec![f32::NAN; m * n];
                        path(start, &mut got, n, lhs, &b, n, m, n, k);
                        assert_eq!(bits(&got), bits(&want), "{name} from a fill: m={m} n={n} k={k}");
                    }
                }
            }
        }
    }
}
