"""batched_gemm against NumPy (float64), on odd shapes and strided operands; its wide
(sixteen-lane) and narrow variants against each other, bit for bit."""
import numpy as np
import pytest

from pycaffe_ft.kernels.small_gemm import batched_gemm_narrow, batched_gemm_wide

VARIANTS = pytest.mark.parametrize('product', [batched_gemm_narrow, batched_gemm_wide], ids=['narrow', 'wide'])


def _run(product, a, b, m, k, n, c_fill=7.0):
    """Products of the (m, k) and (k, n) windows at column 1 of a and 2 of b, written at
    column 1 of a (batch, m, n + 1) array (its column 0 must stay untouched)."""
    batch = a.shape[0]
    c = np.full((batch, m, n + 1), c_fill, np.float32)
    product(a.reshape(-1), 1, a[0].size, a.shape[2], 1, b.reshape(-1), 2, b[0].size, b.shape[2],
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


@pytest.mark.parametrize('m,k,n', [(36, 32, 32), (31, 64, 64), (12, 7, 40), (50, 9, 33)])
def test_wide_and_narrow_give_the_same_bits(m, k, n):
    """The sixteen-lane blocks run the same chain per element as the eight-lane ones, so a
    CPU with AVX-512 computes what one without does."""
    rng = np.random.default_rng(k * 7 + n)
    a = rng.standard_normal((2, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((2, k, n + 3)).astype(np.float32)
    assert np.array_equal(_run(batched_gemm_wide, a, b, m, k, n), _run(batched_gemm_narrow, a, b, m, k, n))
