"""backward_chunk (the im2col backward with batched_gemm products, one call a chunk) against a
float64 convolution: pads, strides, dilation, rows that are not a multiple of 8, output counts
up to the 64 it takes, kernels wider than the eight-lane copies of the patch rows."""
import numpy as np
import pytest

from pycaffe_ft.kernels.im2col import columns_function
from pycaffe_ft.kernels.im2col_chunks import backward_chunk, patch_row_length
from pycaffe_ft.kernels.c_functions import c_function
from pycaffe_ft.kernels.small_gemm import BATCHED_GEMM_SIGNATURE, _c_batched_gemm_reference, batched_gemm_function
from tests.layers.test_convolution import _reference

CASES = [  # (N, C, H, W, O, kernel, stride, pad, dilation)
    (3, 20, 12, 12, 50, 5, 1, 0, 1),  # LeNet's conv2
    (2, 3, 8, 8, 16, 3, 1, 1, 1),
    (2, 4, 17, 17, 10, 3, 2, 1, 1),  # stride 2: 9 x 9 outputs
    (1, 2, 12, 12, 7, 3, 1, 2, 2),  # dilated
    (2, 5, 10, 10, 64, 3, 1, 1, 1),
    (2, 2, 12, 12, 5, 9, 1, 0, 1)]  # kernel rows wider than a vector: copied value by value


def _case(n, c, h, w, o, r, stride, pad, dilation):
    rng = np.random.default_rng(n * c * h + o)
    out = [(size + 2 * pad - dilation * (r - 1) - 1) // stride + 1 for size in (h, w)]
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weights = (rng.standard_normal((o, c, r, r)) / np.sqrt(c * r * r)).astype(np.float32)
    dy = rng.standard_normal((n, o) + tuple(out)).astype(np.float32)
    bordered = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))  # the kernel takes padded images
    geometry = (c, h + 2 * pad, w + 2 * pad, r, r, stride, stride, dilation, dilation) + tuple(out)
    reference = _reference(x, weights, np.zeros(o), dy.astype(np.float64), (pad, pad), (stride, stride),
                           (dilation, dilation), 1)
    return bordered, weights, dy, geometry, pad, reference


def _backward(bordered, weights, dy, geometry, need_w, need_b, gemm=None):
    """(w_part, bias_part, dx with its border) from one backward_chunk call (its products by
    the C function at address ``gemm``, batched_gemm's by default)."""
    n, o, k = bordered.shape[0], weights.shape[0], weights[0].size
    positions, row_length = dy[0, 0].size * n, patch_row_length(k, weights.shape[3])
    w_part, bias_part = np.full((o, row_length), np.nan, np.float32), np.full(o, np.nan, np.float32)
    dx = np.full(bordered.shape, np.nan, np.float32)
    backward_chunk(bordered.reshape(-1), dy.reshape(-1), n, *geometry, weights.reshape(-1), o, need_w, row_length,
                   w_part.reshape(-1), need_b, bias_part, True, dx.reshape(-1),
                   np.empty(k * positions, np.float32), np.empty(positions * row_length, np.float32),
                   np.empty(o * positions, np.float32), gemm or batched_gemm_function(),
                   columns_function(geometry[6], geometry[10]))
    return w_part[:, :k], bias_part, dx


@pytest.mark.parametrize('case', CASES)
def test_backward_matches_a_float64_convolution(case):
    bordered, weights, dy, geometry, pad, (_, dw_ref, db_ref, dx_ref) = _case(*case)
    o = weights.shape[0]
    w_part, bias_part, dx = _backward(bordered, weights, dy, geometry, True, True)
    assert np.abs(w_part.reshape(weights.shape) - dw_ref).max() <= 1e-6 * np.abs(dw_ref).max()
    assert np.abs(bias_part - db_ref).max() <= 1e-6 * np.abs(db_ref).max()
    # each output's bias one float64 chain over images then positions (np.cumsum adds in order)
    chains = np.cumsum(dy.transpose(1, 0, 2, 3).reshape(o, -1).astype(np.float64), axis=1)[:, -1]
    assert bias_part.tobytes() == chains.astype(np.float32).tobytes()
    inside = dx[:, :, pad:dx.shape[2] - pad, pad:dx.shape[3] - pad]
    assert np.abs(inside - dx_ref).max() <= 1e-6 * np.abs(dx_ref).max()
    alone = _backward(bordered, weights, dy, geometry, False, False)[2]  # the bottom diff alone: the same bits
    assert alone.tobytes() == dx.tobytes()


@pytest.mark.parametrize('case', CASES[:3])
def test_backward_with_the_reference_products_gives_the_same_bits(case):
    """While batched_gemm compiles in the background its reference's C function is passed
    (:mod:`pycaffe_ft.kernels.tiered`): the same bits."""
    bordered, weights, dy, geometry = _case(*case)[:4]
    fast = _backward(bordered, weights, dy, geometry, True, True)
    reference = _backward(bordered, weights, dy, geometry, True, True,
                          c_function(_c_batched_gemm_reference, BATCHED_GEMM_SIGNATURE).address)
    for a, b in zip(fast, reference):
        assert a.tobytes() == b.tobytes()
