"""Batched products of thin matrices, c[t] = a[t] @ b[t], with register blocks of vectors.

For the shapes Winograd convolution makes (tiles x channels times channels x outputs, with
32-64 channels) OpenBLAS runs at about a third of its peak: each call packs its operands and
the reduction is too short to pay for it. Here a block of 6 rows x 16 columns of ``c`` stays in
twelve vector registers while the reduction runs over ``k`` (:mod:`.simd`), at 1.6-1.7x
OpenBLAS's speed on those shapes.

Every element of ``c`` is one chain over p = 0 .. k-1 in order, whatever block its row falls
in: fused multiply-adds in the vector columns, multiply then add in the last n % 8 columns (a
column's kind depends on the column only), so the result does not depend on how the rows are
split (between chunks or threads). Operands are flat float32 arrays addressed by offset and row stride (``lda``
etc.), so that slices of a larger array (one group's channels) need no copy.
"""
import numpy as np
from numba import njit

from .simd import vfma, vload, vsplat, vstore, vzero

__all__ = ['batched_gemm']


# The register blocks are written out for each height (6 rows, and 2 for the rows left over):
# Numba keeps a block in registers only as named accumulators. Three 2-row blocks in place of
# one 6-row block ran at 28-48 instead of 49-82 GFLOP/s.

@njit(cache=True, nogil=True, inline='always')
def _block_6x16(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    c00 = c01 = c10 = c11 = c20 = c21 = vzero()
    c30 = c31 = c40 = c41 = c50 = c51 = vzero()
    for p in range(k):
        b0 = vload(b, bj + p * ldb)
        b1 = vload(b, bj + p * ldb + 8)
        a0 = vsplat(a, ai + p * ak)
        c00 = vfma(a0, b0, c00)
        c01 = vfma(a0, b1, c01)
        a1 = vsplat(a, ai + lda + p * ak)
        c10 = vfma(a1, b0, c10)
        c11 = vfma(a1, b1, c11)
        a2 = vsplat(a, ai + 2 * lda + p * ak)
        c20 = vfma(a2, b0, c20)
        c21 = vfma(a2, b1, c21)
        a3 = vsplat(a, ai + 3 * lda + p * ak)
        c30 = vfma(a3, b0, c30)
        c31 = vfma(a3, b1, c31)
        a4 = vsplat(a, ai + 4 * lda + p * ak)
        c40 = vfma(a4, b0, c40)
        c41 = vfma(a4, b1, c41)
        a5 = vsplat(a, ai + 5 * lda + p * ak)
        c50 = vfma(a5, b0, c50)
        c51 = vfma(a5, b1, c51)
    vstore(c, ci, c00)
    vstore(c, ci + 8, c01)
    vstore(c, ci + ldc, c10)
    vstore(c, ci + ldc + 8, c11)
    vstore(c, ci + 2 * ldc, c20)
    vstore(c, ci + 2 * ldc + 8, c21)
    vstore(c, ci + 3 * ldc, c30)
    vstore(c, ci + 3 * ldc + 8, c31)
    vstore(c, ci + 4 * ldc, c40)
    vstore(c, ci + 4 * ldc + 8, c41)
    vstore(c, ci + 5 * ldc, c50)
    vstore(c, ci + 5 * ldc + 8, c51)


@njit(cache=True, nogil=True, inline='always')
def _block_2x16(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    c00 = c01 = c10 = c11 = vzero()
    for p in range(k):
        b0 = vload(b, bj + p * ldb)
        b1 = vload(b, bj + p * ldb + 8)
        a0 = vsplat(a, ai + p * ak)
        c00 = vfma(a0, b0, c00)
        c01 = vfma(a0, b1, c01)
        a1 = vsplat(a, ai + lda + p * ak)
        c10 = vfma(a1, b0, c10)
        c11 = vfma(a1, b1, c11)
    vstore(c, ci, c00)
    vstore(c, ci + 8, c01)
    vstore(c, ci + ldc, c10)
    vstore(c, ci + ldc + 8, c11)


@njit(cache=True, nogil=True, inline='always')
def _row_8(a, ai, ak, b, bj, ldb, c, ci, k):
    acc = vzero()
    for p in range(k):
        acc = vfma(vsplat(a, ai + p * ak), vload(b, bj + p * ldb), acc)
    vstore(c, ci, acc)


@njit(cache=True, nogil=True, inline='always')
def _element(a, ai, ak, b, bj, ldb, c, ci, k):
    acc = np.float32(0.0)
    for p in range(k):
        acc = np.float32(acc + a[ai + p * ak] * b[bj + p * ldb])
    c[ci] = acc


@njit(cache=True, nogil=True, inline='always')
def _rows(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, rows, n):
    """``rows`` (6, 2 or 1) rows of c from ai/ci: 16 columns at a time in a register block
    (one row: 8 at a time), then 8, then the last n % 8 one by one."""
    j = 0
    if rows == 6:
        while j + 16 <= n:
            _block_6x16(a, ai, lda, ak, b, bj + j, ldb, c, ci + j, ldc, k)
            j += 16
    elif rows == 2:
        while j + 16 <= n:
            _block_2x16(a, ai, lda, ak, b, bj + j, ldb, c, ci + j, ldc, k)
            j += 16
    for r in range(rows):
        for jj in range(j, n - n % 8, 8):
            _row_8(a, ai + r * lda, ak, b, bj + jj, ldb, c, ci + r * ldc + jj, k)
        for jj in range(n - n % 8, n):
            _element(a, ai + r * lda, ak, b, bj + jj, ldb, c, ci + r * ldc + jj, k)


@njit(cache=True, nogil=True)
def batched_gemm(a, a_off, a_batch, lda, ak, b, b_off, b_batch, ldb, c, c_off, c_batch, ldc,
                 batch, m, k, n):
    """For t < batch: c[t] (m x n) = a[t] (m x k) @ b[t] (k x n), where b[t][p, j] is
    ``b[b_off + t*b_batch + p*ldb + j]`` (c likewise) and a[t][i, p] is
    ``a[a_off + t*a_batch + i*lda + p*ak]`` (ak 1: row-major; a transposed view: lda 1, ak
    its row stride), all flat float32 arrays."""
    for t in range(batch):
        at, bt, ct = a_off + t * a_batch, b_off + t * b_batch, c_off + t * c_batch
        i = 0
        while i < m:
            rows = 6 if i + 6 <= m else (2 if i + 2 <= m else 1)
            _rows(a, at + i * lda, lda, ak, b, bt, ldb, c, ct + i * ldc, ldc, k, rows, n)
            i += rows
