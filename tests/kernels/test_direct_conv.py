"""direct_forward and direct_weight_gradient against a float64 NumPy correlation (pads, widths
that are not a multiple of 8, odd row counts, output counts that are not a multiple of 3, 4 or 6,
few and many terms per output, odd and even kernel widths, with and without bias, the bias
gradient computed with the weight gradient)."""
import numpy as np
import pytest

from pycaffe_ft.kernels import direct_conv
from pycaffe_ft.kernels.direct_conv import SIX_CHANNEL_TAPS, direct_forward, direct_weight_gradient, forward_reference, \
    weight_gradient_reference
from pycaffe_ft.kernels.im2col import pad_planes
from pycaffe_ft.kernels.simd import WIDE

CASES = [  # (num, channels, height, width, outputs, k, pad)
    (2, 1, 28, 28, 20, 5, 0), (3, 3, 13, 13, 7, 5, 2), (2, 2, 10, 10, 6, 3, 1), (1, 3, 8, 8, 5, 1, 0),
    (2, 20, 12, 12, 50, 5, 0), (2, 20, 9, 14, 9, 3, 0), (2, 4, 5, 12, 4, 2, 0), (1, 2, 8, 8, 3, 3, 1),
    (2, 30, 7, 11, 13, 5, 2), (1, 2, 1, 9, 5, 1, 0), (2, 3, 9, 35, 8, 5, 2), (1, 2, 6, 18, 6, 2, 0),
    (2, 3, 7, 32, 9, 5, 2), (1, 2, 5, 48, 5, 3, 1), (2, 5, 9, 10, 6, 3, 0), (1, 4, 4, 8, 4, 1, 0)]
PAIRED = [case for case in CASES  # rows eight wide, blocks of four rows and four channels
          if case[3] + 2 * case[6] - case[5] + 1 == 8 and case[2] + 2 * case[6] - case[5] + 1 >= 4 and case[4] >= 4]


def _case(num, channels, height, width, outputs, k, pad):
    rng = np.random.default_rng(height * width + outputs)
    x = rng.standard_normal((num, channels, height, width)).astype(np.float32)
    w = rng.standard_normal((outputs, channels, k, k)).astype(np.float32)
    hp, wp = height + 2 * pad, width + 2 * pad
    xp = np.empty(num * channels * hp * wp, np.float32)
    pad_planes(x.reshape(-1), num * channels, height, width, pad, pad, xp)
    return rng, xp, w, (hp, wp), (hp - k + 1, wp - k + 1)


def _windows(xp, shape, k, out_hw):
    """(ky, kx) -> the float64 input window each output position sees at that tap."""
    x64 = xp.reshape(shape).astype(np.float64)
    return {(a, b): x64[:, :, a:a + out_hw[0], b:b + out_hw[1]] for a in range(k) for b in range(k)}


@pytest.mark.parametrize('case', CASES)
def test_forward_matches_a_float64_correlation(case):
    num, channels, _, _, outputs, k, _ = case
    rng, xp, w, (hp, wp), out_hw = _case(*case)
    bias = rng.standard_normal(outputs).astype(np.float32)
    windows = _windows(xp, (num, channels, hp, wp), k, out_hw)
    expected = sum(np.einsum('ncyx,oc->noyx', windows[a, b], w[:, :, a, b].astype(np.float64)) for a, b in windows)
    for use_bias in (False, True):
        y = {}
        for wide in (False, True):  # eight or (rows of 16 or more) sixteen columns a vector
            y[wide] = np.full((num, outputs) + out_hw, np.nan, np.float32)
            direct_forward(xp, num, channels, hp, wp, w.reshape(-1), outputs, k, k, bias, use_bias,
                           y[wide].reshape(-1), wide=wide)
        want = expected + (bias.reshape(-1, 1, 1) if use_bias else 0)
        assert np.abs(y[False] - want).max() <= 1e-6 * np.abs(want).max()
        assert y[True].tobytes() == y[False].tobytes()  # the same chain per output either way
        for relu in (False, True):  # the reference the blocked kernels run as while they compile: the same bits
            fast, reference = (np.full((num, outputs) + out_hw, np.nan, np.float32) for _ in range(2))
            direct_forward(xp, num, channels, hp, wp, w.reshape(-1), outputs, k, k, bias, use_bias, fast.reshape(-1),
                           relu=relu)
            forward_reference(xp, num, channels, hp, wp, w.reshape(-1), outputs, k, k, bias, use_bias,
                              reference.reshape(-1), relu)
            assert reference.tobytes() == fast.tobytes()
            assert not relu or fast.tobytes() == np.maximum(y[False], 0).tobytes()


@pytest.mark.skipif(not WIDE, reason='two rows a vector needs AVX-512')
@pytest.mark.parametrize('case', PAIRED)
def test_forward_by_row_pairs_gives_the_reference_bits(case):
    """The kernels that put two rows eight wide in a sixteen-lane vector (which direct_forward
    takes on CPUs that run sixteen lanes at full rate) give the reference's bits, every kernel
    width, with and without bias and ReLU."""
    num, channels, _, _, outputs, k, _ = case
    rng, xp, w, (hp, wp), out_hw = _case(*case)
    bias = rng.standard_normal(outputs).astype(np.float32)
    assert len(PAIRED) >= 3
    assert direct_conv._row_pairs(True, out_hw[1], out_hw[0], outputs) == (not direct_conv.WIDE_AT_HALF_RATE)
    for use_bias in (False, True):
        for relu in (False, True):
            paired, reference = (np.full((num, outputs) + out_hw, np.nan, np.float32) for _ in range(2))
            forward_reference(xp, num, channels, hp, wp, w.reshape(-1), outputs, k, k, bias, use_bias,
                              reference.reshape(-1), relu)
            common = (xp, num, channels, hp, wp, w.reshape(-1), outputs, k)
            if k in direct_conv._PAIRS_FORWARD:
                direct_conv._PAIRS_FORWARD[k](*common, bias, use_bias, paired.reshape(-1), relu)
            else:
                direct_conv._PAIRS_FORWARD[None](*common, k, bias, use_bias, paired.reshape(-1), relu)
            assert paired.tobytes() == reference.tobytes()


@pytest.mark.parametrize('case', [c for c in CASES if c[4] >= 3 and c[1] * c[5] * c[5] >= 3])
def test_weight_gradient_matches_a_float64_correlation(case):
    num, channels, _, _, outputs, k, _ = case
    rng, xp, w, (hp, wp), out_hw = _case(*case)
    dy = rng.standard_normal((num, outputs) + out_hw).astype(np.float32)
    windows = _windows(xp, (num, channels, hp, wp), k, out_hw)
    expected = np.stack([np.einsum('noyx,ncyx->oc', dy.astype(np.float64), windows[a, b]) for a, b in windows],
                        -1).reshape(w.shape)
    bias = dy.astype(np.float64).sum(axis=(0, 2, 3))
    for wide in (False, True):  # eight or (rows of 16 or more) sixteen lane sums
        dw, db = np.full(w.size, np.nan, np.float32), np.full(outputs, np.nan, np.float32)
        direct_weight_gradient(xp, num, channels, hp, wp, dy.reshape(-1), outputs, k, k, dw, db, wide=wide)
        assert np.abs(dw.reshape(w.shape) - expected).max() <= 1e-6 * np.abs(expected).max()
        assert np.abs(db - bias).max() <= 1e-6 * np.abs(bias).max()
        again = np.full(w.size, np.nan, np.float32)
        direct_weight_gradient(xp, num, channels, hp, wp, dy.reshape(-1), outputs, k, k, again,
                               np.empty(0, np.float32), wide=wide)
        assert again.tobytes() == dw.tobytes()
        reference = np.full((2, w.size), np.nan, np.float32)  # run while the kernels compile: the same bits
        reference_db = np.full(outputs, np.nan, np.float32)
        weight_gradient_reference(xp, num, channels, hp, wp, dy.reshape(-1), outputs, k, k, reference[0], reference_db,
                                  wide=wide)
        weight_gradient_reference(xp, num, channels, hp, wp, dy.reshape(-1), outputs, k, k, reference[1],
                                  np.empty(0, np.float32), wide=wide)
        assert reference[0].tobytes() == reference[1].tobytes() == dw.tobytes()
        assert reference_db.tobytes() == db.tobytes()


@pytest.mark.parametrize('channels', [3, 30])
def test_equal_patches_give_equal_outputs(channels):
    """Every position runs the same multiply-add chain (in blocks of four output channels and,
    above SIX_CHANNEL_TAPS terms, of six), so a flat image gives one value everywhere its
    windows are full (a later max pooling then sees ties, as with im2col)."""
    assert (channels * 25 > SIX_CHANNEL_TAPS) == (channels == 30)
    x = np.full((1, channels, 12, 21), 0.3, np.float32)
    w = np.random.default_rng(1).standard_normal((7, channels, 5, 5)).astype(np.float32)
    y = np.empty((1, 7, 8, 17), np.float32)
    direct_forward(x.reshape(-1), 1, channels, 12, 21, w.reshape(-1), 7, 5, 5, w.reshape(-1)[:1], False,
                   y.reshape(-1))
    for o in range(7):
        assert np.unique(y[0, o]).size == 1
