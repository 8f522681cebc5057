//! The AVX-512 path's 8 × 32 block (`block::<8, 32>`) in assembly, for
//! one reason: how the A values reach the multiplies. Compiled from Rust,
//! each A value is broadcast into a register once and used for both
//! halves of the row; on AMD's Zen 4 that broadcast takes a floating-point
//! pipe beside the multiplies and adds, and the block ran at 69–73 GFLOP/s.
//! Here each multiply reads its A value with an embedded broadcast
//! (`{1to16}`), which the load unit does: 97–114 GFLOP/s on the same
//! shapes and machine (bench/gpt.md). Each term is still a multiply then
//! an add (no FMA), in k order from the starting value, so the bits are
//! every other path's (`gemm`'s tests hold them to the reference).

use super::{Lhs, Start};
use std::arch::asm;

/// The starting values of a block started at zero: one row of 32, read
/// for every row (stride 0).
static ZEROS: [f32; 32] = [0.0; 32];

/// C[r0..r0 + 8, j0..j0 + 32] = start + A·B over k = 0..`k` in order.
///
/// # Safety
/// The CPU must have AVX-512F. Every index is checked here first.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block_8x32(
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
    assert!((r0 + 7) * ldc + j0 + 32 <= c.len(), "C holds the block");
    let (init, init_stride) = match start {
        Start::C => (c[r0 * ldc + j0..].as_ptr(), ldc),
        Start::Zero => (ZEROS.as_ptr(), 0),
        Start::Row(row) => (row[j0..j0 + 32].as_ptr(), 0),
    };
    let out = c[r0 * ldc + j0..].as_mut_ptr();
    if k == 0 {
        for r in 0..8 {
            // SAFETY: row r of the start (32 values at r·init_stride: C's
            // block, checked above, or the one row of 32) into C's block.
            unsafe { std::ptr::copy(init.add(r * init_stride), out.add(r * ldc), 32) };
        }
        return;
    }
    assert!((r0 + 7) * a.row_stride + (k - 1) * a.k_stride < a.data.len(), "A holds the block's rows");
    assert!((k - 1) * ldb + j0 + 32 <= b.len(), "B holds the block's columns");
    let a_ptr = a.data[r0 * a.row_stride..].as_ptr();
    let b_ptr = b[j0..].as_ptr();
    // SAFETY: reads A[r0 + r, kk] for r < 8, kk < k, B[kk, j0..j0 + 32]
    // and the start's 8 rows of 32, writes C's 8 rows of 32: all checked
    // above. zmm0–15 hold the sums (row r in zmm2r, zmm2r+1), zmm16–17 a
    // row of B, zmm18–31 the products.
    unsafe {
        asm!(
            "vmovups zmm0, [{init}]", "vmovups zmm1, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm2, [{init}]", "vmovups zmm3, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm4, [{init}]", "vmovups zmm5, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm6, [{init}]", "vmovups zmm7, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm8, [{init}]", "vmovups zmm9, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm10, [{init}]", "vmovups zmm11, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm12, [{init}]", "vmovups zmm13, [{init} + 64]", "add {init}, {ild}",
            "vmovups zmm14, [{init}]", "vmovups zmm15, [{init} + 64]",
            "2:",
            "vmovups zmm16, [{b}]", "vmovups zmm17, [{b} + 64]",
            "mov {t}, {a}",
            "vmulps zmm18, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm19, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm0, zmm0, zmm18", "vaddps zmm1, zmm1, zmm19",
            "vmulps zmm20, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm21, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm2, zmm2, zmm20", "vaddps zmm3, zmm3, zmm21",
            "vmulps zmm22, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm23, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm4, zmm4, zmm22", "vaddps zmm5, zmm5, zmm23",
            "vmulps zmm24, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm25, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm6, zmm6, zmm24", "vaddps zmm7, zmm7, zmm25",
            "vmulps zmm26, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm27, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm8, zmm8, zmm26", "vaddps zmm9, zmm9, zmm27",
            "vmulps zmm28, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm29, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm10, zmm10, zmm28", "vaddps zmm11, zmm11, zmm29",
            "vmulps zmm30, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm31, zmm17, dword ptr [{t}]{{1to16}}",
            "add {t}, {rs}",
            "vaddps zmm12, zmm12, zmm30", "vaddps zmm13, zmm13, zmm31",
            "vmulps zmm18, zmm16, dword ptr [{t}]{{1to16}}", "vmulps zmm19, zmm17, dword ptr [{t}]{{1to16}}",
            "vaddps zmm14, zmm14, zmm18", "vaddps zmm15, zmm15, zmm19",
            "add {a}, {ks}",
            "add {b}, {ldb}",
            "dec {k}",
            "jnz 2b",
            "vmovups [{out}], zmm0", "vmovups [{out} + 64], zmm1", "add {out}, {ldc}",
            "vmovups [{out}], zmm2", "vmovups [{out} + 64], zmm3", "add {out}, {ldc}",
            "vmovups [{out}], zmm4", "vmovups [{out} + 64], zmm5", "add {out}, {ldc}",
            "vmovups [{out}], zmm6", "vmovups [{out} + 64], zmm7", "add {out}, {ldc}",
            "vmovups [{out}], zmm8", "vmovups [{out} + 64], zmm9", "add {out}, {ldc}",
            "vmovups [{out}], zmm10", "vmovups [{out} + 64], zmm11", "add {out}, {ldc}",
            "vmovups [{out}], zmm12", "vmovups [{out} + 64], zmm13", "add {out}, {ldc}",
            "vmovups [{out}], zmm14", "vmovups [{out} + 64], zmm15",
            init = inout(reg) init => _,
            ild = in(reg) init_stride * 4,
            out = inout(reg) out => _,
            ldc = in(reg) ldc * 4,
            a = inout(reg) a_ptr => _,
            rs = in(reg) a.row_stride * 4,
            ks = in(reg) a.k_stride * 4,
            b = inout(reg) b_ptr => _,
            ldb = in(reg) ldb * 4,
            k = inout(reg) k => _,
            t = out(reg) _,
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
            out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
            out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
            out("zmm28") _, out("zmm29") _, out("zmm30") _, out("zmm31") _,
            options(nostack),
        );
    }
}
