"""direct_forward against a float64 NumPy correlation (pads, widths that are not a multiple of 8,
output counts that are not a multiple of 4, with and without bias), and the layer's choice."""
import numpy as np
import pytest

from pycaffe_ft.kernels.direct_conv import direct_forward
from pycaffe_ft.kernels.im2col import pad_planes


@pytest.mark.parametrize('num,channels,size,outputs,k,pad', [(2, 1, 28, 20, 5, 0), (3, 3, 13, 7, 5, 2),
                                                             (2, 2, 10, 6, 3, 1), (1, 3, 8, 5, 1, 0)])
def test_matches_a_float64_correlation(num, channels, size, outputs, k, pad):
    rng = np.random.default_rng(size + outputs)
    x = rng.standard_normal((num, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((outputs, channels, k, k)).astype(np.float32)
    bias = rng.standard_normal(outputs).astype(np.float32)
    padded = size + 2 * pad
    xp = np.empty(num * channels * padded * padded, np.float32)
    pad_planes(x.reshape(-1), num * channels, size, size, pad, pad, xp)
    out = padded - k + 1
    xp64 = xp.reshape(num, channels, padded, padded).astype(np.float64)
    expected = sum(np.einsum('ncyx,oc->noyx', xp64[:, :, ky:ky + out, kx:kx + out], w[:, :, ky, kx].astype(np.float64))
                   for ky in range(k) for kx in range(k))
    for use_bias in (False, True):
        y = np.full((num, outputs, out, out), np.nan, np.float32)
        direct_forward(xp, num, channels, padded, padded, w.reshape(-1), outputs, k, k, bias, use_bias, y.reshape(-1))
        want = expected + (bias.reshape(-1, 1, 1) if use_bias else 0)
        assert np.abs(y - want).max() <= 1e-6 * np.abs(want).max()


def test_equal_patches_give_equal_outputs():
    """Every position runs the same multiply-add chain, so a flat image gives one value
    everywhere its windows are full (a later max pooling then sees ties, as with im2col)."""
    x = np.full((1, 3, 12, 20), 0.3, np.float32)
    w = np.random.default_rng(1).standard_normal((5, 3, 5, 5)).astype(np.float32)
    y = np.empty((1, 5, 8, 16), np.float32)
    direct_forward(x.reshape(-1), 1, 3, 12, 20, w.reshape(-1), 5, 5, 5, w.reshape(-1)[:1], False, y.reshape(-1))
    for o in range(5):
        assert np.unique(y[0, o]).size == 1
