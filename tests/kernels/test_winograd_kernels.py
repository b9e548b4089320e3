"""The Winograd kernels' vector paths (sixteen and eight channels at a time) against their scalar
paths and NumPy: the same bits per channel."""
import numpy as np
import pytest

from pycaffe_ft.kernels import winograd as kernels

KINDS = [(kernels.INPUT_6, 6, 6), (kernels.INPUT_4, 4, 4), (kernels.DIFF_6, 2, 6), (kernels.DIFF_4, 2, 4),
         (kernels.OUTPUT_6, 6, 2), (kernels.OUTPUT_4, 4, 2)]


def _values(rng, shape):
    """Random values with signed zeros and wide exponents among them."""
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    x.flat[::7] = 0.0
    x.flat[3::11] = -0.0
    return x


@pytest.mark.parametrize('stride', [27, 32], ids=['offsets-not-16', 'offsets-of-16'])
@pytest.mark.parametrize('kind,taps,outputs', KINDS)
def test_channels_at_once_give_each_channels_scalar_bits(kind, taps, outputs, stride):
    """27 channels, each tap and output ``stride`` floats apart: with offsets that are multiples
    of 16 (and AVX-512) a sixteen-lane block, an eight-lane one and three channels one by one;
    else three eight-lane blocks and three one by one."""
    channels = 27
    src = _values(np.random.default_rng(kind), (taps, stride))
    dst = np.full((outputs, stride), np.nan, np.float32)
    kernels._line(kind, src.reshape(-1), 0, 2 * stride, stride, dst.reshape(-1), 0, stride, channels)
    for c in range(channels):
        one = np.empty(outputs, np.float32)
        kernels._line(kind, np.ascontiguousarray(src[:, c]), 0, 2, 1, one, 0, 1, 1)
        assert one.tobytes() == np.ascontiguousarray(dst[:, c]).tobytes(), c
    assert np.isnan(dst[:, channels:]).all()


def _split_columns(image):
    """(N, H, W, C) -> the even columns, then the odd ones (the kernels' storage)."""
    return np.concatenate([image[:, :, 0::2], image[:, :, 1::2]], axis=2)


@pytest.mark.parametrize('channels,width', [(8, 16), (19, 21), (3, 9), (16, 7)])
def test_channels_last_copies_match_numpy(channels, width):
    rng = np.random.default_rng(channels * width)
    n, height, top, left = 2, 5, 2, 1
    padded_h, padded_w = height + 4, width + 3 + (width + 3) % 2
    x = _values(rng, (n, channels, height, width))
    x.flat[::13] = np.nan  # kept by the fused ReLU below, as by the ReLU layer's own pass
    out = np.full(n * padded_h * padded_w * channels, np.nan, np.float32)
    kernels.to_channels_last(x.reshape(-1), n, channels, height, width, top, left, padded_h, padded_w, out)
    expected = np.zeros((n, padded_h, padded_w, channels), np.float32)
    expected[:, top:top + height, left:left + width] = x.transpose(0, 2, 3, 1)
    assert out.tobytes() == _split_columns(expected).tobytes()
    bias = _values(rng, (channels,))
    for use_bias, relu in ((True, False), (False, False), (True, True), (False, True)):
        back = np.empty((n, channels, height, width), np.float32)
        kernels.from_channels_last(out, n, channels, padded_h, padded_w, height, width, bias, use_bias, relu,
                                   back.reshape(-1))
        added = bias.reshape(-1, 1, 1) if use_bias else np.float32(0.0)  # + 0 turns -0 into 0, as Caffe's
        want = (expected[:, :height, :width].transpose(0, 3, 1, 2) + added).astype(np.float32)
        if relu:
            want = np.maximum(want, np.float32(0.0))
        assert back.tobytes() == want.tobytes()
