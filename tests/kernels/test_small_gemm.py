"""batched_gemm against NumPy (float64), on odd shapes and strided operands; its wide
(sixteen-lane) and narrow variants, its non-temporal one and its references against each other,
bit for bit; rows_streamed and its reference likewise."""
import numpy as np
import pytest

from pycaffe_ft.aligned import aligned_empty
from pycaffe_ft.kernels.simd import WIDE
from pycaffe_ft.kernels.small_gemm import batched_gemm_narrow, batched_gemm_past_caches, \
    batched_gemm_past_caches_reference, batched_gemm_reference, batched_gemm_wide, rows_streamed, rows_streamed_reference

VARIANTS = pytest.mark.parametrize('product', [batched_gemm_narrow, batched_gemm_wide, batched_gemm_reference],
                                   ids=['narrow', 'wide', 'reference'])


def _run(product, a, b, m, k, n, c_fill=7.0, transposed=False):
    """Products of the (m, k) and (k, n) windows at column 1 of a and 2 of b, written at
    column 1 of a (batch, m, n + 1) array (its column 0 must stay untouched). With
    ``transposed``, a is (batch, k, m + 2) and its window's transpose is multiplied."""
    batch = a.shape[0]
    c = np.full((batch, m, n + 1), c_fill, np.float32)
    lda, ak = (1, a.shape[2]) if transposed else (a.shape[2], 1)
    product(a.reshape(-1), 1, a[0].size, lda, ak, b.reshape(-1), 2, b[0].size, b.shape[2],
            c.reshape(-1), 1, c[0].size, n + 1, batch, m, k, n)
    return c


@VARIANTS
@pytest.mark.parametrize('m,k,n', [(1, 1, 1), (7, 3, 5), (13, 9, 24), (6, 32, 16), (20, 17, 40), (64, 5, 9),
                                   (30, 32, 32), (25, 11, 72)])
def test_matches_numpy_on_strided_windows(product, m, k, n):
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((3, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((3, k, n + 3)).astype(np.float32)
    c = _run(product, a, b, m, k, n)
    expected = np.einsum('tik,tkj->tij', a[:, :, 1:k + 1].astype(np.float64), b[:, :, 2:n + 2].astype(np.float64))
    assert np.abs(c[:, :, 1:] - expected).max() <= 1e-6 * max(1.0, np.abs(expected).max())
    assert (c[:, :, 0] == 7.0).all()


@VARIANTS
def test_rows_give_the_same_bits_however_they_are_split(product):
    """Each element is one multiply-add chain in k order, in the 12- and 6-row blocks and the
    leftover rows alike: splitting the rows (chunks, threads) changes no bit."""
    rng = np.random.default_rng(1)
    m, k, n = 31, 32, 72
    a = rng.standard_normal((1, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((1, k, n + 3)).astype(np.float32)
    whole = _run(product, a, b, m, k, n)
    for split in (1, 5, 6, 7, 12, 13, 19):
        top, bottom = _run(product, a[:, :split], b, split, k, n), _run(product, a[:, split:], b, m - split, k, n)
        assert np.array_equal(np.concatenate([top, bottom], axis=1), whole), split


@pytest.mark.parametrize('other', [batched_gemm_narrow, batched_gemm_reference], ids=['narrow', 'reference'])
@pytest.mark.parametrize('transposed', [False, True], ids=['row-major', 'transposed'])
@pytest.mark.parametrize('m,k,n', [(36, 32, 32), (31, 64, 64), (12, 7, 40), (50, 9, 33), (500, 50, 64), (64, 32, 32),
                                   (7, 8, 32)])
def test_wide_narrow_and_reference_give_the_same_bits(other, transposed, m, k, n):
    """The sixteen-lane blocks run the same chain per element as the eight-lane ones, so a
    CPU with AVX-512 computes what one without does; the reference (run while they compile in
    the background) too. Rows left past the last whole block (31, 50, 64, 7) go in a wide block
    shifted back over rows already written: the same bits again."""
    rng = np.random.default_rng(k * 7 + n)
    a = rng.standard_normal((2, k, m + 2) if transposed else (2, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((2, k, n + 3)).astype(np.float32)
    assert np.array_equal(_run(batched_gemm_wide, a, b, m, k, n, transposed=transposed),
                          _run(other, a, b, m, k, n, transposed=transposed))


@pytest.mark.parametrize('m,k,n,lo,hi', [(16, 40, 64, 0, 64), (13, 37, 96, 32, 96), (8, 16, 32, 0, 32),
                                         (3, 100, 128, 64, 128), (21, 5, 32, 0, 32)])
def test_rows_streamed_matches_numpy_and_its_reference_bit_for_bit(m, k, n, lo, hi):
    """c[:, lo:hi] = a @ b[:, lo:hi] (NumPy's float64 product as the oracle), the columns outside
    untouched; chunks of b's rows not a multiple of 16, items past the blocks of eight; the
    kernel (AVX-512) and its reference give the same bits, whole or in blocks of columns."""
    rng = np.random.default_rng(m + k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    expected = a.astype(np.float64) @ b[:, lo:hi].astype(np.float64)
    kernels = [rows_streamed_reference] + ([rows_streamed] if WIDE else [])
    results = []
    for kernel in kernels:
        for blocks in ([(lo, hi)], [(j, j + 32) for j in range(lo, hi, 32)]):
            c = np.full((m, n), 7.0, np.float32)
            for first, last in blocks:
                kernel(a.reshape(-1), b.reshape(-1), c.reshape(-1), m, k, n, first, last)
            assert (c[:, :lo] == 7.0).all() and (c[:, hi:] == 7.0).all()
            results.append(c[:, lo:hi])
    assert np.abs(results[0] - expected).max() <= 1e-5 * max(1.0, np.abs(expected).max())
    for other in results[1:]:
        assert np.array_equal(other, results[0])


@pytest.mark.parametrize('m,k,n,ldc', [(24, 16, 64, 64), (30, 7, 80, 80), (5, 16, 48, 48), (12, 3, 112, 112),
                                       (24, 5, 64, 72)])
def test_past_caches_gives_batched_gemms_bits(m, k, n, ldc):
    """batched_gemm_past_caches (non-temporal stores for the 12 x 32 blocks, AVX-512) and its
    reference against batched_gemm bit for bit, into a c whose rows lie on 64-byte boundaries
    (and one whose rows do not: plain stores there): rows and columns past the whole blocks,
    the transposed a of InnerProduct's weight gradient."""
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((k, m)).astype(np.float32)  # read transposed: lda 1, ak m
    b = rng.standard_normal((k, n)).astype(np.float32)
    expected = np.empty((m, n), np.float32)
    batched_gemm_wide(a.reshape(-1), 0, 0, 1, m, b.reshape(-1), 0, 0, n, expected.reshape(-1), 0, 0, n, 1, m, k, n)
    kernels = [batched_gemm_past_caches_reference] + ([batched_gemm_past_caches] if WIDE else [])
    for kernel in kernels:
        c = aligned_empty(m * ldc).reshape(m, ldc)
        c[...] = np.nan
        kernel(a.reshape(-1), 0, 1, m, b.reshape(-1), 0, n, c.reshape(-1), 0, ldc, m, k, n)
        assert np.array_equal(c[:, :n], expected) and np.isnan(c[:, n:]).all()
