"""batched_gemm against NumPy (float64), on odd shapes and strided operands."""
import numpy as np
import pytest

from pycaffe_ft.kernels.small_gemm import batched_gemm


def _run(a, b, m, k, n, c_fill=7.0):
    """Products of the (m, k) and (k, n) windows at column 1 of a and 2 of b, written at
    column 1 of a (batch, m, n + 1) array (its column 0 must stay untouched)."""
    batch = a.shape[0]
    c = np.full((batch, m, n + 1), c_fill, np.float32)
    batched_gemm(a.reshape(-1), 1, a[0].size, a.shape[2], 1, b.reshape(-1), 2, b[0].size, b.shape[2],
                 c.reshape(-1), 1, c[0].size, n + 1, batch, m, k, n)
    return c


@pytest.mark.parametrize('m,k,n', [(1, 1, 1), (7, 3, 5), (13, 9, 24), (6, 32, 16), (20, 17, 40), (64, 5, 9),
                                   (30, 32, 32)])
def test_matches_numpy_on_strided_windows(m, k, n):
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((3, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((3, k, n + 3)).astype(np.float32)
    c = _run(a, b, m, k, n)
    expected = np.einsum('tik,tkj->tij', a[:, :, 1:k + 1].astype(np.float64), b[:, :, 2:n + 2].astype(np.float64))
    assert np.abs(c[:, :, 1:] - expected).max() <= 1e-6 * max(1.0, np.abs(expected).max())
    assert (c[:, :, 0] == 7.0).all()


def test_rows_give_the_same_bits_however_they_are_split():
    """Each element is one multiply-add chain in k order, in the 6-row blocks and the leftover
    rows alike: splitting the rows (chunks, threads) changes no bit."""
    rng = np.random.default_rng(1)
    m, k, n = 19, 32, 40
    a = rng.standard_normal((1, m, k + 2)).astype(np.float32)
    b = rng.standard_normal((1, k, n + 3)).astype(np.float32)
    whole = _run(a, b, m, k, n)
    for split in (1, 5, 6, 7, 13):
        top, bottom = _run(a[:, :split], b, split, k, n), _run(a[:, split:], b, m - split, k, n)
        assert np.array_equal(np.concatenate([top, bottom], axis=1), whole), split
