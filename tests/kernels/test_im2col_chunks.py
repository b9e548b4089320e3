"""forward_chunk and backward_chunk (im2col with batched_gemm products, one call a chunk)
against a float64 convolution: pads, strides, dilation, rows that are not a multiple of 8,
output counts up to the 64 a chunk takes; and equal patches giving equal outputs."""
import numpy as np
import pytest

from pycaffe_ft.kernels.im2col_chunks import backward_chunk, forward_chunk
from tests.layers.test_convolution import _reference

CASES = [  # (N, C, H, W, O, kernel, stride, pad, dilation)
    (3, 20, 12, 12, 50, 5, 1, 0, 1),  # LeNet's conv2
    (2, 3, 8, 8, 16, 3, 1, 1, 1),
    (2, 4, 17, 17, 10, 3, 2, 1, 1),  # stride 2: 9 x 9 outputs
    (1, 2, 12, 12, 7, 3, 1, 2, 2),  # dilated
    (2, 5, 10, 10, 64, 3, 1, 1, 1)]


def _case(n, c, h, w, o, r, stride, pad, dilation):
    rng = np.random.default_rng(n * c * h + o)
    out = [(size + 2 * pad - dilation * (r - 1) - 1) // stride + 1 for size in (h, w)]
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weights = (rng.standard_normal((o, c, r, r)) / np.sqrt(c * r * r)).astype(np.float32)
    bias = rng.standard_normal(o).astype(np.float32)
    dy = rng.standard_normal((n, o) + tuple(out)).astype(np.float32)
    geometry = (c, h, w, r, r, pad, pad, stride, stride, dilation, dilation) + tuple(out)
    scratch = {'padded': np.empty(n * c * (h + 2 * pad) * (w + 2 * pad), np.float32),
               'cols': np.empty(c * r * r * n * out[0] * out[1], np.float32)}
    return x, weights, bias, dy, geometry, scratch, _reference(x, weights, bias, dy.astype(np.float64), (pad, pad),
                                                               (stride, stride), (dilation, dilation), 1)


@pytest.mark.parametrize('case', CASES)
def test_forward_matches_a_float64_convolution(case):
    x, weights, bias, dy, geometry, scratch, (y_ref, _, _, _) = _case(*case)
    n, o = x.shape[0], weights.shape[0]
    product = np.empty(o * dy[0, 0].size * n, np.float32)
    for use_bias in (False, True):
        for relu in (False, True):
            ys = []
            for step in (n, 1):  # all images at once, or one at a time: the same bits
                ys.append(np.full(dy.shape, np.nan, np.float32))
                forward_chunk(x.reshape(-1), n, *geometry, weights.reshape(-1), o, bias, use_bias, relu, step,
                              scratch['padded'], scratch['cols'], product, ys[-1].reshape(-1))
            want = y_ref - (0 if use_bias else bias.reshape(1, -1, 1, 1))
            want = np.maximum(want, 0) if relu else want
            assert np.abs(ys[0] - want).max() <= 1e-6 * np.abs(want).max()
            if dy[0, 0].size % 8 == 0:  # every position in vector lanes, however many images at once
                assert ys[0].tobytes() == ys[1].tobytes()


@pytest.mark.parametrize('case', CASES)
def test_backward_matches_a_float64_convolution(case):
    x, weights, bias, dy, geometry, scratch, (_, dw_ref, db_ref, dx_ref) = _case(*case)
    n, o, k = x.shape[0], weights.shape[0], weights[0].size
    positions = dy[0, 0].size * n
    lanes = -(-o // 16) * 16
    w_part, bias_part = np.full((k, lanes), np.nan, np.float32), np.full(o, np.nan, np.float32)
    dx = np.full(x.shape, np.nan, np.float32)
    backward_chunk(x.reshape(-1), dy.reshape(-1), n, *geometry, weights.reshape(-1), o, True, lanes,
                   w_part.reshape(-1), True, bias_part, True, dx.reshape(-1), scratch['padded'], scratch['cols'],
                   np.empty(positions * lanes, np.float32), np.empty(o * positions, np.float32))
    assert np.abs(w_part[:, :o].T.reshape(weights.shape) - dw_ref).max() <= 1e-6 * np.abs(dw_ref).max()
    assert not w_part[:, o:].any()  # the padding lanes' sums stay zero
    assert np.abs(bias_part - db_ref).max() <= 1e-6 * np.abs(db_ref).max()
    assert np.abs(dx - dx_ref).max() <= 1e-6 * np.abs(dx_ref).max()
    alone = np.full(x.shape, np.nan, np.float32)  # the bottom diff alone: the same bits
    backward_chunk(x.reshape(-1), dy.reshape(-1), n, *geometry, weights.reshape(-1), o, False, lanes,
                   w_part.reshape(-1), False, bias_part, True, alone.reshape(-1), scratch['padded'], scratch['cols'],
                   np.empty(1, np.float32), np.empty(o * positions, np.float32))
    assert alone.tobytes() == dx.tobytes()


def test_equal_patches_give_equal_outputs():
    """One chain of fused multiply-adds per output, at every position alike (8 x 8 planes): a
    flat image gives one value per output channel, ties for a later max pooling as im2col's."""
    n, c, o = 2, 20, 50
    x = np.full((n, c, 12, 12), 0.3, np.float32)
    weights = np.random.default_rng(1).standard_normal((o, c * 25)).astype(np.float32)
    y = np.empty((n, o, 8, 8), np.float32)
    forward_chunk(x.reshape(-1), n, c, 12, 12, 5, 5, 0, 0, 1, 1, 1, 1, 8, 8, weights.reshape(-1), o,
                  np.zeros(o, np.float32), True, False, n, np.empty(1, np.float32),
                  np.empty(c * 25 * n * 64, np.float32), np.empty(o * n * 64, np.float32), y.reshape(-1))
    for channel in range(o):
        assert np.unique(y[:, channel]).size == 1
