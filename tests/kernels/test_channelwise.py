"""The per-channel kernels against the NumPy expressions BatchNorm and Scale computed before
them: the maps bit for bit (in place, through a ReLU, keeping a copy, rows split anywhere, rows
of any length), the float64 sums within float64 rounding of NumPy's."""
import numpy as np
import pytest

from pycaffe_ft.kernels.channelwise import channel_moments, multiply_add, normalized_backward, scale_backward, \
    subtract_multiply


def _arrays(outer, channels, inner, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(outer * channels * inner).astype(np.float32)
    x[:6] = [-0.0, 0.0, np.nan, -np.inf, np.inf, 1e-40][:min(6, x.size)]
    a = rng.standard_normal(channels).astype(np.float32)
    b = rng.standard_normal(channels).astype(np.float32)
    return x, a, b


def _split(rows):
    """Row ranges of uneven sizes covering 0..rows."""
    cuts = sorted({0, rows, rows // 3, rows // 2 + 1} & set(range(rows + 1)))
    return list(zip(cuts[:-1], cuts[1:]))


@pytest.mark.parametrize('inner', [1, 7, 8, 13, 64, 3136])
@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('keeping', [False, True])
@pytest.mark.parametrize('in_place', [False, True])
def test_the_maps_give_numpys_bits(inner, relu, keeping, in_place):
    outer, channels = 3, 5
    x, a, b = _arrays(outer, channels, inner)
    x3 = x.reshape(outer, channels, inner)
    with np.errstate(invalid='ignore', over='ignore'):
        normalized = (x3 - a[None, :, None]) * b[None, :, None]
        affine = x3 * a[None, :, None] + b[None, :, None]
        scaled = x3 * a[None, :, None]
    for kernel, expected, extra in ((subtract_multiply, normalized, ()), (multiply_add, affine, (True,)),
                                    (multiply_add, scaled, (False,))):
        src = x.copy()
        y = src if in_place else np.full_like(x, 7.0)
        keep = np.full_like(x, 7.0)
        for lo, hi in _split(outer * channels):
            kernel(src, y, keep, lo, hi, channels, inner, a, b, *extra, relu, keeping)
        assert y.tobytes() == (np.maximum(expected, 0) if relu else expected).tobytes()
        kept = expected if kernel is subtract_multiply else x3
        assert keep.tobytes() == (kept.tobytes() if keeping else np.full_like(x, 7.0).tobytes())


def test_channel_moments_are_numpys_float64_mean_and_variance():
    outer, channels, inner = 4, 6, 49
    x = np.random.default_rng(1).standard_normal(outer * channels * inner).astype(np.float32) * 3 + 1
    mean, var = np.zeros(channels), np.zeros(channels)
    for lo, hi in _split(channels):
        channel_moments(x, outer, channels, inner, lo, hi, mean, var)
    x64 = x.reshape(outer, channels, inner).astype(np.float64)
    expected_mean = x64.mean(axis=(0, 2))
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-14)
    np.testing.assert_allclose(var, ((x64 - expected_mean[None, :, None]) ** 2).mean(axis=(0, 2)), rtol=1e-13)


def test_normalized_backward_is_the_float64_formula_rounded_once():
    outer, channels, inner = 3, 4, 37
    rng = np.random.default_rng(2)
    dy = rng.standard_normal(outer * channels * inner).astype(np.float32)
    y = rng.standard_normal(dy.size).astype(np.float32)
    inv_std = rng.random(channels).astype(np.float32) + 0.5
    dx = np.empty_like(dy)
    for lo, hi in _split(channels):
        normalized_backward(dy, y, dx, outer, channels, inner, lo, hi, inv_std)
    dy64, y3 = dy.reshape(outer, channels, inner).astype(np.float64), y.reshape(outer, channels, inner)
    expected = ((dy64 - dy64.mean(axis=(0, 2))[None, :, None] - (dy64 * y3).mean(axis=(0, 2))[None, :, None] * y3)
                * inv_std[None, :, None])
    np.testing.assert_allclose(dx, expected.reshape(-1), rtol=1e-6, atol=1e-7)
    in_place = dy.copy()
    normalized_backward(in_place, y, in_place, outer, channels, inner, 0, channels, inv_std)
    assert in_place.tobytes() == dx.tobytes()


@pytest.mark.parametrize('need_scale,need_bias,down', [(True, True, True), (True, False, False),
                                                       (False, True, True), (False, False, True)])
def test_scale_backward_accumulates_the_parameter_gradients_and_scales_the_diff(need_scale, need_bias, down):
    outer, channels, inner = 3, 5, 21
    rng = np.random.default_rng(3)
    dy = rng.standard_normal(outer * channels * inner).astype(np.float32)
    x = rng.standard_normal(dy.size).astype(np.float32)
    scale = rng.standard_normal(channels).astype(np.float32)
    scale_diff, bias_diff = np.full(channels, 0.5, np.float32), np.full(channels, -0.25, np.float32)
    dx = np.full_like(dy, 7.0)
    for lo, hi in _split(channels):
        scale_backward(dy, x, dx, outer, channels, inner, lo, hi, scale, scale_diff, bias_diff, need_scale,
                       need_bias, down)
    dy3, x3 = dy.reshape(outer, channels, inner), x.reshape(outer, channels, inner)
    expected_scale = np.float32(0.5) + (dy3.astype(np.float64) * x3).sum(axis=(0, 2)) if need_scale else 0.5
    expected_bias = np.float32(-0.25) + dy3.sum(axis=(0, 2), dtype=np.float64) if need_bias else -0.25
    np.testing.assert_allclose(scale_diff, np.float32(expected_scale), rtol=1e-6)
    np.testing.assert_allclose(bias_diff, np.float32(expected_bias), rtol=1e-6)
    expected_dx = (dy3 * scale[None, :, None]).reshape(-1) if down else np.full_like(dy, 7.0)
    assert dx.tobytes() == expected_dx.tobytes()
