"""Batched products of thin matrices, c[t] = a[t] @ b[t], with register blocks of vectors.

For the shapes Winograd convolution makes (tiles x channels times channels x outputs, with
32-64 channels) OpenBLAS runs at about a third of its peak: each call packs its operands and
the reduction is too short to pay for it. Here a block of 6 rows x 16 columns of ``c`` stays in
twelve vector registers while the reduction runs over ``k`` (:mod:`.simd`), at 1.6-1.7x
OpenBLAS's speed on those shapes. With AVX-512 (:data:`~.simd.WIDE`) blocks of 12, 8 or 6 rows
x 32 columns in sixteen-lane vectors come first (24, 16 or 12 of the 32 zmm registers): on a
Sapphire Rapids core 136-142 against 86-90 GFLOP/s for the forward shapes (3600 x 32 times
32 x 32), 144 against 59-64 for the weight gradient's (32 x 3600 times 3600 x 32).

Every element of ``c`` is one chain over p = 0 .. k-1 in order, whatever block its row falls
in: fused multiply-adds in the vector columns, multiply then add in the last n % 8 columns (a
column's kind depends on the column only), so the result does not depend on how the rows are
split (between chunks or threads). Operands are flat float32 arrays addressed by offset and row stride (``lda``
etc.), so that slices of a larger array (one group's channels) need no copy.
"""
import numpy as np
from numba import carray, njit, types

from .c_functions import FLOATS, c_caller, c_function, floats
from .simd import WIDE, prefetch, store_fence, vadd, vfma, vload, vsplat, vstore, vzero, wload, wsplat, wstore, \
    wstore_past_caches, wzero
from .tiered import await_ahead, c_function_ready, call

__all__ = ['batched_gemm', 'batched_gemm_narrow', 'batched_gemm_wide', 'batched_gemm_reference', 'run_batched_gemm',
           'batched_gemm_function', 'call_batched_gemm', 'batched_gemm_past_caches',
           'batched_gemm_past_caches_reference', 'rows_streamed', 'rows_streamed_reference', 'ROWS_STREAMED_CHUNK']


# The register blocks are written out for each height (6 rows, and 2 for the rows left over):
# Numba keeps a block in registers only as named accumulators. Three 2-row blocks in place of
# one 6-row block ran at 28-48 instead of 49-82 GFLOP/s. Each block is its own function, compiled
# once and called (LLVM inlines it back), not inlined by Numba at each of its call sites:
# batched_gemm 3.2 -> 2.2 s to compile, the same speed.

@njit(cache=True, nogil=True)
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
    _store_6_rows(c, ci, ldc, 8, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, vstore)


@njit(cache=True, nogil=True)
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


@njit(cache=True, nogil=True)
def _block_6x32(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    c00 = c01 = c10 = c11 = c20 = c21 = wzero()
    c30 = c31 = c40 = c41 = c50 = c51 = wzero()
    for p in range(k):
        b0 = wload(b, bj + p * ldb)
        b1 = wload(b, bj + p * ldb + 16)
        a0 = wsplat(a, ai + p * ak)
        c00, c01 = vfma(a0, b0, c00), vfma(a0, b1, c01)
        a1 = wsplat(a, ai + lda + p * ak)
        c10, c11 = vfma(a1, b0, c10), vfma(a1, b1, c11)
        a2 = wsplat(a, ai + 2 * lda + p * ak)
        c20, c21 = vfma(a2, b0, c20), vfma(a2, b1, c21)
        a3 = wsplat(a, ai + 3 * lda + p * ak)
        c30, c31 = vfma(a3, b0, c30), vfma(a3, b1, c31)
        a4 = wsplat(a, ai + 4 * lda + p * ak)
        c40, c41 = vfma(a4, b0, c40), vfma(a4, b1, c41)
        a5 = wsplat(a, ai + 5 * lda + p * ak)
        c50, c51 = vfma(a5, b0, c50), vfma(a5, b1, c51)
    _store_6_rows(c, ci, ldc, 16, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51)


@njit(cache=True, nogil=True, inline='always')
def _store_6_rows(c, ci, ldc, half, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, store=wstore):
    """A block of 6 rows of two vectors each (the second ``half`` floats after the first) into c
    from ci, by ``store``."""
    store(c, ci, c00)
    store(c, ci + half, c01)
    store(c, ci + ldc, c10)
    store(c, ci + ldc + half, c11)
    store(c, ci + 2 * ldc, c20)
    store(c, ci + 2 * ldc + half, c21)
    store(c, ci + 3 * ldc, c30)
    store(c, ci + 3 * ldc + half, c31)
    store(c, ci + 4 * ldc, c40)
    store(c, ci + 4 * ldc + half, c41)
    store(c, ci + 5 * ldc, c50)
    store(c, ci + 5 * ldc + half, c51)


@njit(cache=True, nogil=True)
def _block_8x32(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    _block_8x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, wstore)


@njit(cache=True, nogil=True)
def _block_8x32_added(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    """:func:`_block_8x32` added to c (each element c plus its chain)."""
    _block_8x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, _add_store)


@njit(cache=True, nogil=True, inline='always')
def _add_store(c, ci, v):
    """c[ci:ci + 16] += v."""
    wstore(c, ci, vadd(wload(c, ci), v))


@njit(cache=True, nogil=True, inline='always')
def _block_8x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, store):
    c00 = c01 = c10 = c11 = c20 = c21 = wzero()
    c30 = c31 = c40 = c41 = c50 = c51 = wzero()
    d00 = d01 = d10 = d11 = wzero()
    di = ai + 6 * lda
    for p in range(k):
        b0 = wload(b, bj + p * ldb)
        b1 = wload(b, bj + p * ldb + 16)
        a0 = wsplat(a, ai + p * ak)
        c00, c01 = vfma(a0, b0, c00), vfma(a0, b1, c01)
        a1 = wsplat(a, ai + lda + p * ak)
        c10, c11 = vfma(a1, b0, c10), vfma(a1, b1, c11)
        a2 = wsplat(a, ai + 2 * lda + p * ak)
        c20, c21 = vfma(a2, b0, c20), vfma(a2, b1, c21)
        a3 = wsplat(a, ai + 3 * lda + p * ak)
        c30, c31 = vfma(a3, b0, c30), vfma(a3, b1, c31)
        a4 = wsplat(a, ai + 4 * lda + p * ak)
        c40, c41 = vfma(a4, b0, c40), vfma(a4, b1, c41)
        a5 = wsplat(a, ai + 5 * lda + p * ak)
        c50, c51 = vfma(a5, b0, c50), vfma(a5, b1, c51)
        a0 = wsplat(a, di + p * ak)
        d00, d01 = vfma(a0, b0, d00), vfma(a0, b1, d01)
        a1 = wsplat(a, di + lda + p * ak)
        d10, d11 = vfma(a1, b0, d10), vfma(a1, b1, d11)
    _store_6_rows(c, ci, ldc, 16, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, store)
    e = ci + 6 * ldc
    store(c, e, d00)
    store(c, e + 16, d01)
    store(c, e + ldc, d10)
    store(c, e + ldc + 16, d11)


@njit(cache=True, nogil=True)
def _block_12x32(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    _block_12x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, wstore)


@njit(cache=True, nogil=True)
def _block_12x32_past_caches(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k):
    """:func:`_block_12x32` by non-temporal stores (c's rows from ci on 64-byte boundaries)."""
    _block_12x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, wstore_past_caches)


@njit(cache=True, nogil=True, inline='always')
def _block_12x32_stored(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, store):
    c00 = c01 = c10 = c11 = c20 = c21 = wzero()
    c30 = c31 = c40 = c41 = c50 = c51 = wzero()
    d00 = d01 = d10 = d11 = d20 = d21 = wzero()
    d30 = d31 = d40 = d41 = d50 = d51 = wzero()
    di = ai + 6 * lda
    for p in range(k):
        b0 = wload(b, bj + p * ldb)
        b1 = wload(b, bj + p * ldb + 16)
        a0 = wsplat(a, ai + p * ak)
        c00, c01 = vfma(a0, b0, c00), vfma(a0, b1, c01)
        a1 = wsplat(a, ai + lda + p * ak)
        c10, c11 = vfma(a1, b0, c10), vfma(a1, b1, c11)
        a2 = wsplat(a, ai + 2 * lda + p * ak)
        c20, c21 = vfma(a2, b0, c20), vfma(a2, b1, c21)
        a3 = wsplat(a, ai + 3 * lda + p * ak)
        c30, c31 = vfma(a3, b0, c30), vfma(a3, b1, c31)
        a4 = wsplat(a, ai + 4 * lda + p * ak)
        c40, c41 = vfma(a4, b0, c40), vfma(a4, b1, c41)
        a5 = wsplat(a, ai + 5 * lda + p * ak)
        c50, c51 = vfma(a5, b0, c50), vfma(a5, b1, c51)
        a0 = wsplat(a, di + p * ak)
        d00, d01 = vfma(a0, b0, d00), vfma(a0, b1, d01)
        a1 = wsplat(a, di + lda + p * ak)
        d10, d11 = vfma(a1, b0, d10), vfma(a1, b1, d11)
        a2 = wsplat(a, di + 2 * lda + p * ak)
        d20, d21 = vfma(a2, b0, d20), vfma(a2, b1, d21)
        a3 = wsplat(a, di + 3 * lda + p * ak)
        d30, d31 = vfma(a3, b0, d30), vfma(a3, b1, d31)
        a4 = wsplat(a, di + 4 * lda + p * ak)
        d40, d41 = vfma(a4, b0, d40), vfma(a4, b1, d41)
        a5 = wsplat(a, di + 5 * lda + p * ak)
        d50, d51 = vfma(a5, b0, d50), vfma(a5, b1, d51)
    _store_6_rows(c, ci, ldc, 16, c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, store)
    _store_6_rows(c, ci + 6 * ldc, ldc, 16, d00, d01, d10, d11, d20, d21, d30, d31, d40, d41, d50, d51, store)


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
def _rows(a, ai, lda, ak, b, bj, ldb, c, ci, ldc, k, rows, n, j):
    """``rows`` (6, 2 or 1) rows of c from ai/ci, columns j .. n-1: 16 columns at a time in a
    register block (one row: 8 at a time), then 8, then the last n % 8 one by one."""
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
def batched_gemm_narrow(a, a_off, a_batch, lda, ak, b, b_off, b_batch, ldb, c, c_off, c_batch, ldc,
                        batch, m, k, n):
    """For t < batch: c[t] (m x n) = a[t] (m x k) @ b[t] (k x n), where b[t][p, j] is
    ``b[b_off + t*b_batch + p*ldb + j]`` (c likewise) and a[t][i, p] is
    ``a[a_off + t*a_batch + i*lda + p*ak]`` (ak 1: row-major; a transposed view: lda 1, ak
    its row stride), all flat float32 arrays. Eight-lane vectors only."""
    for t in range(batch):
        at, bt, ct = a_off + t * a_batch, b_off + t * b_batch, c_off + t * c_batch
        i = 0
        while i < m:
            rows = 6 if i + 6 <= m else (2 if i + 2 <= m else 1)
            _rows(a, at + i * lda, lda, ak, b, bt, ldb, c, ct + i * ldc, ldc, k, rows, n, 0)
            i += rows


@njit(cache=True, nogil=True)
def batched_gemm_wide(a, a_off, a_batch, lda, ak, b, b_off, b_batch, ldb, c, c_off, c_batch, ldc,
                      batch, m, k, n):
    """:func:`batched_gemm_narrow` with 12, 8 or 6 x 32 blocks of sixteen-lane vectors first
    (the same bits: the same chain for every element). The columns past the last 32 go by
    :func:`_rows` only where there are such columns: calling it with none left (a no-op) had
    slowed the wide blocks' loop around it, one Emerald Rapids thread, 36 products of 60 x 32
    times 32 x 32, alternated: 101-104 -> 145-156 GFLOP/s. Fewer than 6 rows left (of 6 or
    more) go in a wide block of 8 or 6 shifted back to end at the last row, the rows it shares
    with the block before written again with the same bits (64 x 32 times 32 x 32: its last 4
    rows had gone in eight-lane 2 x 16 blocks, four chains of sums at a time: 36 such products,
    alternated, with the branch above, 61-80 -> 92-148 GFLOP/s)."""
    wide_n = n - n % 32
    for t in range(batch):
        at, bt, ct = a_off + t * a_batch, b_off + t * b_batch, c_off + t * c_batch
        i = 0
        while i < m:
            left = m - i
            if left < 6 and wide_n > 0 and m >= 6:  # the last rows: a wide block shifted back
                left = 8 if m >= 8 else 6
                i = m - left
            rows = 12 if left >= 12 else (8 if left >= 8 else (6 if left >= 6 else (2 if left >= 2 else 1)))
            ai, ci = at + i * lda, ct + i * ldc
            if rows >= 6:
                for j in range(0, wide_n, 32):
                    if rows == 12:
                        _block_12x32(a, ai, lda, ak, b, bt + j, ldb, c, ci + j, ldc, k)
                    elif rows == 8:
                        _block_8x32(a, ai, lda, ak, b, bt + j, ldb, c, ci + j, ldc, k)
                    else:
                        _block_6x32(a, ai, lda, ak, b, bt + j, ldb, c, ci + j, ldc, k)
                if wide_n < n:  # columns past the wide blocks (a branch: see the docstring)
                    _rows(a, ai, lda, ak, b, bt, ldb, c, ci, ldc, k, 6, n, wide_n)
                    if rows == 12:
                        _rows(a, ai + 6 * lda, lda, ak, b, bt, ldb, c, ci + 6 * ldc, ldc, k, 6, n, wide_n)
                    elif rows == 8:
                        _rows(a, ai + 6 * lda, lda, ak, b, bt, ldb, c, ci + 6 * ldc, ldc, k, 2, n, wide_n)
            else:
                _rows(a, ai, lda, ak, b, bt, ldb, c, ci, ldc, k, rows, n, 0)
            i += rows


batched_gemm = batched_gemm_wide if WIDE else batched_gemm_narrow
"""The one to call: wide blocks where the CPU has AVX-512."""


@njit(cache=True, nogil=True)
def batched_gemm_reference(a, a_off, a_batch, lda, ak, b, b_off, b_batch, ldb, c, c_off, c_batch, ldc,
                           batch, m, k, n):
    """:data:`batched_gemm`'s bits (each element of c the same chain over p in order) in blocks of
    4 rows by 16 columns (two vectors), the rows and columns left over one row's vector or
    element at a time: its reference, run while it compiles in the background (:mod:`.tiered`;
    compiles in a fraction of its time)."""
    vector_n, block_n, block_m = n - n % 8, n - n % 16, m - m % 4
    for t in range(batch):
        at, bt, ct = a_off + t * a_batch, b_off + t * b_batch, c_off + t * c_batch
        for i in range(0, block_m, 4):
            ai, ci = at + i * lda, ct + i * ldc
            for j in range(0, block_n, 16):
                c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = vzero()
                for p in range(k):
                    bp, ap = bt + p * ldb + j, ai + p * ak
                    b0, b1 = vload(b, bp), vload(b, bp + 8)
                    s = vsplat(a, ap)
                    c00, c01 = vfma(s, b0, c00), vfma(s, b1, c01)
                    s = vsplat(a, ap + lda)
                    c10, c11 = vfma(s, b0, c10), vfma(s, b1, c11)
                    s = vsplat(a, ap + 2 * lda)
                    c20, c21 = vfma(s, b0, c20), vfma(s, b1, c21)
                    s = vsplat(a, ap + 3 * lda)
                    c30, c31 = vfma(s, b0, c30), vfma(s, b1, c31)
                for r, (first, second) in enumerate(((c00, c01), (c10, c11), (c20, c21), (c30, c31))):
                    vstore(c, ci + r * ldc + j, first)
                    vstore(c, ci + r * ldc + j + 8, second)
        for i in range(m):
            ai, ci = at + i * lda, ct + i * ldc
            for j in range(0 if i >= block_m else block_n, vector_n, 8):
                _row_8(a, ai, ak, b, bt + j, ldb, c, ci + j, k)
            for j in range(vector_n, n):
                _element(a, ai, ak, b, bt + j, ldb, c, ci + j, k)


@njit(cache=True, nogil=True)
def batched_gemm_past_caches(a, a_off, lda, ak, b, b_off, ldb, c, c_off, ldc, m, k, n):
    """:data:`batched_gemm` of one product (c (m x n) = a (m x k) @ b (k x n), a batch of one)
    whose 12 x 32 blocks go to memory by non-temporal stores (AVX-512; c's rows from c_off on
    64-byte boundaries: c[c_off] on one, ldc a multiple of 16), for a c written whole and too
    large for the caches, which it then need not read first; the rest by batched_gemm's own
    blocks, so that the bits are its. Ends with a store fence, so that other threads may read
    c once it returns. Where c's rows are not so placed, batched_gemm's stores throughout."""
    whole_m, whole_n = m - m % 12, n - n % 32
    if (c.ctypes.data + 4 * c_off) % 64 or ldc % 16:
        whole_m = 0
    for i in range(0, whole_m, 12):
        for j in range(0, whole_n, 32):
            _block_12x32_past_caches(a, a_off + i * lda, lda, ak, b, b_off + j, ldb, c, c_off + i * ldc + j, ldc, k)
    store_fence()
    if whole_n < n:
        for i in range(0, whole_m, 12):
            _rows(a, a_off + i * lda, lda, ak, b, b_off, ldb, c, c_off + i * ldc, ldc, k, 6, n, whole_n)
            _rows(a, a_off + (i + 6) * lda, lda, ak, b, b_off, ldb, c, c_off + (i + 6) * ldc, ldc, k, 6, n, whole_n)
    if whole_m < m:
        batched_gemm_wide(a, a_off + whole_m * lda, 0, lda, ak, b, b_off, 0, ldb, c, c_off + whole_m * ldc, 0, ldc,
                          1, m - whole_m, k, n)


@njit(cache=True, nogil=True)
def batched_gemm_past_caches_reference(a, a_off, lda, ak, b, b_off, ldb, c, c_off, ldc, m, k, n):
    """:func:`batched_gemm_past_caches`' bits by :func:`batched_gemm_reference` (plain stores):
    its reference, run while it compiles in the background (:mod:`.tiered`)."""
    batched_gemm_reference(a, a_off, 0, lda, ak, b, b_off, 0, ldb, c, c_off, 0, ldc, 1, m, k, n)


def run_batched_gemm(*args):
    """``batched_gemm(*args)``, or its reference while it compiles in the background."""
    call(batched_gemm, batched_gemm_reference, *args)


def _c_batched_gemm(a, a_size, a_off, a_batch, lda, ak, b, b_size, b_off, b_batch, ldb, c, c_size, c_off, c_batch,
                    ldc, batch, m, k, n):
    batched_gemm(carray(a, a_size), a_off, a_batch, lda, ak, carray(b, b_size), b_off, b_batch, ldb,
                 carray(c, c_size), c_off, c_batch, ldc, batch, m, k, n)


def _c_batched_gemm_reference(a, a_size, a_off, a_batch, lda, ak, b, b_size, b_off, b_batch, ldb, c, c_size, c_off,
                              c_batch, ldc, batch, m, k, n):
    batched_gemm_reference(carray(a, a_size), a_off, a_batch, lda, ak, carray(b, b_size), b_off, b_batch, ldb,
                           carray(c, c_size), c_off, c_batch, ldc, batch, m, k, n)


_I = types.intp
BATCHED_GEMM_SIGNATURE = types.void(FLOATS, _I, _I, _I, _I, _I, FLOATS, _I, _I, _I, _I, FLOATS, _I, _I, _I, _I,
                                    _I, _I, _I, _I)


_call_batched_gemm_at = c_caller(BATCHED_GEMM_SIGNATURE)


def batched_gemm_function():
    """The address of :data:`batched_gemm` as a C function (see :mod:`.c_functions`), for
    :func:`call_batched_gemm`; its reference's while it compiles in the background."""
    if c_function_ready(_c_batched_gemm, BATCHED_GEMM_SIGNATURE):
        return c_function(_c_batched_gemm, BATCHED_GEMM_SIGNATURE).address
    await_ahead(_c_batched_gemm_reference)
    return c_function(_c_batched_gemm_reference, BATCHED_GEMM_SIGNATURE).address


def batched_gemm_function_ahead():
    """The compile :func:`batched_gemm_function` needs first (its reference's), for
    :func:`.tiered.ahead`."""
    return [(_c_batched_gemm_reference, BATCHED_GEMM_SIGNATURE)]


@njit(cache=True, nogil=True, inline='always')
def call_batched_gemm(function, a, a_off, a_batch, lda, ak, b, b_off, b_batch, ldb, c, c_off, c_batch, ldc,
                      batch, m, k, n):
    """:data:`batched_gemm`'s call, at ``function`` (:func:`batched_gemm_function`)."""
    _call_batched_gemm_at(function, (floats(a), a.size, a_off, a_batch, lda, ak, floats(b), b.size, b_off, b_batch,
                                     ldb, floats(c), c.size, c_off, c_batch, ldc, batch, m, k, n))


# A product whose right operand is a tall matrix read once, row by row (InnerProduct's bottom
# gradient, dx = dy @ W: a few items by thousands of weight rows). c's columns [lo, hi) go in
# tiles of 32 (eight rows of a tile in batched_gemm's 8 x 32 block); b's rows in chunks of
# ROWS_STREAMED_CHUNK, each chunk's rows read for every tile in turn (sixteen rows of one
# stretch of columns: a few streams the prefetcher follows), while the tiles of c stay in the
# caches. Each element of c is the sum, in chunk order, of its chunks' chains (fused
# multiply-adds from zero over the chunk's rows in order): it depends neither on [lo, hi) nor
# on the machine's vector width. Tiles reading b's columns as one column panel (all of its
# rows, as batched_gemm reads b) took 2.5 times OpenBLAS's time (AlexNet's fc6 at batch 16:
# 73.5 against 28.7 ms): each row of the panel is another page.
ROWS_STREAMED_CHUNK = 16


@njit(cache=True, nogil=True)
def _streamed_1x32(a, ai, b, bi, ldb, rows, c, ci, first):
    """One row of c's 32 columns from ci: the chains over ``rows`` rows of b from bi (row
    stride ldb) times a's row from ai, stored (``first``) or added."""
    c0 = c1 = wzero()
    for p in range(rows):
        a0 = wsplat(a, ai + p)
        c0, c1 = vfma(a0, wload(b, bi + p * ldb), c0), vfma(a0, wload(b, bi + p * ldb + 16), c1)
    if first:
        wstore(c, ci, c0)
        wstore(c, ci + 16, c1)
    else:
        _add_store(c, ci, c0)
        _add_store(c, ci + 16, c1)


@njit(cache=True, nogil=True)
def rows_streamed(a, b, c, m, k, n, lo, hi):
    """c[:, lo:hi] = a @ b[:, lo:hi] for flat row-major a (m x k), b (k x n) and c (m x n);
    lo and hi - lo multiples of 32 (AVX-512: sixteen-lane vectors)."""
    for p0 in range(0, k, ROWS_STREAMED_CHUNK):
        rows = min(ROWS_STREAMED_CHUNK, k - p0)
        ahead = min(ROWS_STREAMED_CHUNK, k - p0 - rows)
        for j in range(lo, hi, 32):
            for p in range(p0 + rows, p0 + rows + ahead):  # the next chunk's rows of this tile
                prefetch(b, p * n + j)
                prefetch(b, p * n + j + 16)
            i = 0
            while i + 8 <= m:  # batched_gemm's 8 x 32 block, its chains stored or added
                if p0 == 0:
                    _block_8x32(a, i * k + p0, k, 1, b, p0 * n + j, n, c, i * n + j, n, rows)
                else:
                    _block_8x32_added(a, i * k + p0, k, 1, b, p0 * n + j, n, c, i * n + j, n, rows)
                i += 8
            while i < m:
                _streamed_1x32(a, i * k + p0, b, p0 * n + j, n, rows, c, i * n + j, p0 == 0)
                i += 1


@njit(cache=True, nogil=True)
def rows_streamed_reference(a, b, c, m, k, n, lo, hi):
    """:func:`rows_streamed`'s bits, eight columns at a time: its reference, run while it
    compiles in the background (:mod:`.tiered`)."""
    for p0 in range(0, k, ROWS_STREAMED_CHUNK):
        rows = min(ROWS_STREAMED_CHUNK, k - p0)
        for i in range(m):
            for j in range(lo, hi, 8):
                total = vzero()
                for p in range(p0, p0 + rows):
                    total = vfma(vsplat(a, i * k + p), vload(b, p * n + j), total)
                if p0 > 0:
                    total = vadd(vload(c, i * n + j), total)
                vstore(c, i * n + j, total)
