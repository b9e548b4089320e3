"""The NumPy references against their kernels, bit for bit (NaN for NaN): values with signed
zeros, NaN, infinities and wide exponents; every Winograd transform kind; pooling geometries
that take each way through the planes, and whose inputs are covered by one, four or more
outputs. (tests/layers/test_winograd.py runs whole passes through the references.)"""
import numpy as np
import pytest

pytestmark = pytest.mark.filterwarnings('error::RuntimeWarning')  # as the kernels, NumPy's references warn of nothing

from pycaffe_ft.kernels import im2col, lrn, numpy_references as references, pooling, softmax, winograd as kernels

KINDS = [(kernels.INPUT_6, 6), (kernels.INPUT_4, 4), (kernels.DIFF_6, 6), (kernels.DIFF_4, 4)]


def _values(rng, size, specials=True):
    x = (rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)).astype(np.float32)
    x[::7] = 0.0
    x[3::11] = -0.0
    if specials:
        x[5::17] = np.nan
        x[6::19] = np.inf
        x[9::23] = -np.inf
    return x


class _Bits:
    """An output's bits, compared as equal where both hold a NaN (whose sign and payload
    depend on which operand the CPU met first, which neither NumPy nor LLVM keeps), and bit
    for bit everywhere else (zeros' signs included)."""

    def __init__(self, values):
        self.nan = np.isnan(values)
        self.bits = np.where(self.nan, np.float32(0.0), values).view(np.uint32)

    def __eq__(self, other):
        return np.array_equal(self.nan, other.nan) and np.array_equal(self.bits, other.bits)


def _both(kernel, reference, outputs, args):
    """Run kernel and reference with the same arguments, into outputs prefilled with a
    sentinel (so that an element one of them leaves unwritten shows); return both outputs'
    :class:`_Bits`."""
    results = []
    for function in (kernel, reference):
        out = [np.full(size, np.float32(-1.25e-38)) for size in outputs]
        function(*args(*out))
        results.append(_Bits(np.concatenate(out)))
    return results


@pytest.mark.parametrize('channels,height,width,top,left', [(8, 5, 16, 2, 1), (19, 7, 21, 0, 0), (3, 4, 9, -1, 2),
                                                             (16, 6, 7, 1, -2)])
def test_channels_last_copies(channels, height, width, top, left):
    rng = np.random.default_rng(channels * width)
    n, padded_h, padded_w = 2, height + 3, width + 3 + (width + 3) % 2
    x = _values(rng, n * channels * height * width)
    size = n * padded_h * padded_w * channels
    ours, theirs = _both(kernels.to_channels_last, references.to_channels_last, [size],
                         lambda out: (x, n, channels, height, width, top, left, padded_h, padded_w, out))
    assert ours == theirs
    image = _values(rng, size)
    bias = _values(rng, channels)
    for use_bias in (True, False):
        for relu in (True, False):
            ours, theirs = _both(kernels.from_channels_last, references.from_channels_last,
                                 [n * channels * height * width],
                                 lambda out: (image, n, channels, padded_h, padded_w, height, width, bias,
                                              use_bias, relu, out))
            assert ours == theirs, (use_bias, relu)


@pytest.mark.parametrize('kind,alpha', KINDS)
@pytest.mark.parametrize('channels', [8, 19])
def test_tile_transforms(kind, alpha, channels):
    rng = np.random.default_rng(kind * 31 + channels)
    n, tiles_h, tiles_w = 2, 3, 4
    diff = kind in (kernels.DIFF_6, kernels.DIFF_4)
    padded_h, padded_w = (2 * tiles_h, 2 * tiles_w) if diff else (2 * tiles_h + alpha - 2, 2 * tiles_w + alpha - 2)
    src = _values(rng, n * padded_h * padded_w * channels)
    rows = np.empty(padded_h * alpha * tiles_w * channels, np.float32)
    ours, theirs = _both(kernels.tile_transform, references.tile_transform,
                         [alpha * alpha * n * tiles_h * tiles_w * channels],
                         lambda out: (src, n, padded_h, padded_w, channels, kind, alpha, tiles_h, tiles_w, rows, out))
    assert ours == theirs


@pytest.mark.parametrize('kind,alpha', [(kernels.OUTPUT_6, 6), (kernels.OUTPUT_4, 4)])
@pytest.mark.parametrize('channels', [8, 19])
def test_tile_inverses(kind, alpha, channels):
    rng = np.random.default_rng(kind * 31 + channels)
    n, tiles_h, tiles_w = 2, 3, 5
    prod = _values(rng, alpha * alpha * n * tiles_h * tiles_w * channels)
    half = np.empty(2 * alpha * tiles_w * channels, np.float32)
    ours, theirs = _both(kernels.tile_inverse, references.tile_inverse, [n * 4 * tiles_h * tiles_w * channels],
                         lambda out: (prod, n, channels, kind, alpha, tiles_h, tiles_w, half, out))
    assert ours == theirs


@pytest.mark.parametrize('flip', [False, True])
@pytest.mark.parametrize('r,groups', [(3, 1), (5, 2)])
def test_weight_transforms(r, groups, flip):
    from pycaffe_ft.layers.winograd import Winograd
    rng = np.random.default_rng(r + groups + flip)
    plan = Winograd(r, (1, 1), groups)
    k, c = 24, 16
    w = _values(rng, k * (c // groups) * r * r, specials=False).reshape(k, c // groups, r, r)
    shape = (plan.alpha ** 2, groups) + ((k // groups, c // groups) if flip else (c // groups, k // groups))
    for first, last in ((0, k * c // groups), (37, 150)):  # a part: the rest stays unwritten
        ours, theirs = _both(kernels.weight_tiles, references.weight_tiles, [int(np.prod(shape))],
                             lambda out: (w, plan.g, groups, flip, out.reshape(shape), first, last))
        assert ours == theirs
    m = _values(rng, plan.alpha ** 2 * k * c, specials=False).reshape(plan.alpha, plan.alpha, k, c)
    ours, theirs = _both(kernels.weight_gradient_from_tiles, references.weight_gradient_from_tiles,
                         [k * c * r * r], lambda out: (m, plan.weight_a_t, out.reshape(k, c, r, r)))
    assert ours == theirs


@pytest.mark.parametrize('relu', [False, True], ids=['plain', 'relu-below'])
@pytest.mark.parametrize('lanes', [None, 16, 8], ids=['default', 'plane-lanes', 'eight-plane-lanes'])
@pytest.mark.parametrize('geometry', [  # (H, W, kernel, pad, stride): inputs under 4, 1, 9 outputs
    (16, 16, 3, 1, 2), (8, 8, 2, 0, 2), (7, 9, 3, 1, 1), (13, 13, 3, 0, 2)])
def test_average_pooling_backward(geometry, lanes, relu, monkeypatch):
    """The way each geometry takes (one plane a vector or by output rows on AVX-512 where they
    suit), and by plane lanes, sixteen planes a vector (AVX-512) and eight (the kernels of CPUs
    without it); with the backward of a ReLU below (x with NaN, infinities and signed zeros)
    applied as dx is stored."""
    if lanes == 16 and not pooling.WIDE:
        pytest.skip('sixteen plane lanes: AVX-512 only')
    height, width, k, pad, stride = geometry
    out_h = -(-(height + 2 * pad - k) // stride) + 1
    out_w = -(-(width + 2 * pad - k) // stride) + 1
    if lanes:
        monkeypatch.setattr(pooling, 'BACKWARD_ROWS', False)
        monkeypatch.setattr(pooling, 'PLANE_VECTORS', False)
        monkeypatch.setattr(pooling, 'PLANE_LANES', lanes)
    taps = pooling.window_taps(height, width, k, k, pad, pad, stride, stride, out_h, out_w)
    planes = 21  # one group of sixteen planes and five left over
    rng = np.random.default_rng(height * k)
    dy = _values(rng, planes * out_h * out_w)
    x = _values(rng, planes * height * width)
    ours, theirs = _both(lambda dx: pooling.ave_pool_backward(dy, planes, taps, dx, x if relu else None),
                         lambda dx: references.ave_pool_backward(dy, planes, taps[2], taps[3], dx, x if relu else None),
                         [planes * height * width], lambda dx: (dx,))
    assert ours == theirs


POOLS = [  # (H, W, kernel, pad, stride)
    (16, 16, 3, 1, 2), (8, 8, 2, 0, 2), (7, 9, 3, 1, 1), (13, 13, 3, 0, 2), (24, 24, 2, 0, 2), (9, 6, 5, 2, 3),
    (32, 32, 3, 0, 2), (12, 17, 2, 0, 1), (9, 29, 5, 2, 2), (11, 26, 3, 2, 3), (8, 8, 3, 0, 2), (9, 7, 3, 1, 2)]


def _pool_case(geometry, seed):
    height, width, k, pad, stride = geometry
    out_h = -(-(height + 2 * pad - k) // stride) + 1
    out_w = -(-(width + 2 * pad - k) // stride) + 1
    planes = 21
    x = _values(np.random.default_rng(seed), planes * height * width)
    x[10 * height * width:11 * height * width] = -np.inf  # a plane with no value above -FLT_MAX
    return planes, x, (height, width, k, k, pad, pad, stride, stride, out_h, out_w)


@pytest.mark.parametrize('geometry', POOLS)
def test_pooling_forwards(geometry):
    """The vector kernels (each geometry's) against Caffe's loops in NumPy."""
    planes, x, args = _pool_case(geometry, sum(geometry))
    taps = pooling.window_taps(*args)
    size = planes * args[-2] * args[-1]
    ours, theirs = _both(lambda *a: pooling.max_pool_forward(*a[:-2], taps, *a[-2:]), references.max_pool_caffe,
                         [size, size], lambda y, mask: (x, planes, *args, y, mask))
    assert ours == theirs
    ours, theirs = _both(lambda *a: pooling.ave_pool_forward(*a[:-1], taps, a[-1]), references.ave_pool_caffe,
                         [size], lambda y: (x, planes, *args, y))
    assert ours == theirs


@pytest.mark.parametrize('relu', [False, True], ids=['plain', 'relu-below'])
@pytest.mark.parametrize('geometry', POOLS)
def test_max_pooling_backward(geometry, relu):
    """The scatter, and the way max_pool_backward takes for each geometry; with the backward of
    a ReLU below."""
    planes, x, args = _pool_case(geometry, 7)
    out_plane = args[-2] * args[-1]
    y, mask = np.empty(planes * out_plane, np.float32), np.empty(planes * out_plane, np.float32)
    references.max_pool_caffe(x, planes, *args, y, mask)
    dy = _values(np.random.default_rng(3), planes * out_plane)
    below = x if relu else None
    ours, theirs = _both(pooling._max_pool_backward, references.max_pool_backward, [planes * args[0] * args[1]],
                         lambda dx: (dy, mask, planes, args[0] * args[1], out_plane, dx, below))
    assert ours == theirs
    ours, _ = _both(lambda dx: pooling.max_pool_backward(dy, mask, planes, *args, dx, below), lambda dx: None,
                    [planes * args[0] * args[1]], lambda dx: (dx,))
    assert ours == theirs


def test_padding():
    x = _values(np.random.default_rng(5), 6 * 7 * 9)
    for ph, pw in ((0, 2), (3, 1), (2, 0)):
        ours, theirs = _both(im2col._pad_planes, references.pad_planes, [6 * (7 + 2 * ph) * (9 + 2 * pw)],
                             lambda dst: (x, 6, 7, 9, ph, pw, dst))
        assert ours == theirs


@pytest.mark.parametrize('geometry', [  # (C, H, W, kernel, stride, dilation): 8-wide rows, others, strides, dilations
    (3, 9, 10, 3, 1, 1), (4, 10, 11, 5, 1, 1), (2, 13, 13, 3, 2, 1), (3, 12, 12, 3, 1, 2), (2, 11, 15, 11, 4, 1)])
def test_columns(geometry):
    channels, height, width, k, stride, dilation = geometry
    reach = dilation * (k - 1) + 1
    out_h, out_w = (height - reach) // stride + 1, (width - reach) // stride + 1
    n, extra = 3, 5  # columns of a wider buffer, as a chunk of images writes them
    ncols = n * out_h * out_w + extra
    images = _values(np.random.default_rng(sum(geometry)), n * channels * height * width, specials=False)
    args = (n, channels, height, width, k, k, stride, stride, dilation, dilation, out_h, out_w)
    ours, theirs = _both(im2col.columns, references.columns, [channels * k * k * ncols],
                         lambda cols: (images, *args, cols, ncols, True))
    assert ours == theirs
    if out_h >= 4:  # output rows 2 and 3 alone, as im2col in bands lowers them
        band = args[:-2] + (2, out_w)
        ours, theirs = _both(im2col.columns, references.columns, [channels * k * k * ncols],
                             lambda cols: (images[2 * stride * width:], *band, cols, ncols, True))
        assert ours == theirs
    cols = _values(np.random.default_rng(1), channels * k * k * ncols, specials=False)
    ours, theirs = _both(im2col.columns, references.columns, [images.size],
                         lambda back: (back, *args, cols, ncols, False))
    assert ours == theirs


@pytest.mark.parametrize('beta', lrn.ROOT_BETAS)
@pytest.mark.parametrize('size,channels', [(5, 16), (3, 7), (5, 2)])
@pytest.mark.parametrize('k', [1.0, 0.0])
def test_lrn_across_channels(beta, size, channels, k):
    """With k 0 an image of zeros has zero scales: inf and NaN as in Caffe (no error)."""
    rng = np.random.default_rng(size * channels)
    n, plane = 3, 13
    alpha, beta, k = np.float32(1e-3), np.float32(beta), np.float32(k)
    count = n * channels * plane
    x = _values(rng, count, specials=False)
    if k == 0:
        x[:channels * plane] = 0.0
    ours, theirs = _both(lrn._lrn_across_forward, references.lrn_across_forward, [count, count],
                         lambda scale, y: (x, n, channels, plane, size, alpha, beta, k, scale, y))
    assert ours == theirs
    scale, y = np.empty(count, np.float32), np.empty(count, np.float32)
    lrn._lrn_across_forward(x, n, channels, plane, size, alpha, beta, k, scale, y)
    dy = _values(rng, count, specials=False)
    ratio_value = np.float32(2.0 * float(alpha) * float(beta) / size)
    ours, theirs = _both(lrn._lrn_across_backward, references.lrn_across_backward, [count],
                         lambda dx: (x, y, scale, dy, n, channels, plane, size, beta, ratio_value, dx,
                                     np.empty(channels * plane, np.float32), np.empty(plane, np.float32)))
    assert ours == theirs


@pytest.mark.parametrize('has_ignore', [False, True])
def test_softmax_loss_backward(has_ignore):
    """Scaled in float64 and stored as float32, the label's term taken off the same way, the
    ignored positions' channels zeroed (labels 2 where ``has_ignore``)."""
    rng = np.random.default_rng(3)
    outer, channels, inner = 4, 5, 6
    prob = _values(rng, outer * channels * inner).reshape(outer, channels, inner)
    label = rng.integers(0, channels, (outer, inner)).astype(np.float32)
    label[1, ::2] = 2.0
    ours, theirs = _both(softmax.softmax_loss_backward_kernel, references.softmax_loss_backward, [prob.size],
                         lambda out: (prob, label, has_ignore, 2, 1.0 / 7.3, out.reshape(prob.shape)))
    assert ours == theirs
