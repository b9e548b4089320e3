"""The pooling kernels' ways through the planes that the layer tests do not pick out: max
pooling by single rows and by wide rows by window rows (AVX-512) and by blocks by window rows
(eight lanes), average pooling by blocks (eight lanes), the ReLU the small-plane kernels apply
as they store, the 2 x 2 and 3 x 3 (stride 2) max pooling's backward by gathering, average
pooling's backward by output rows, one plane a vector and by parity (AVX-512) and by plane
lanes, and the backward of the ReLU below that every pooling backward applies. (Every way
against Caffe's definition: tests/layers/test_vision.py; against the NumPy references, NaN
included: test_numpy_references.py.)"""
import numpy as np
import pytest

from pycaffe_ft.kernels import numpy_references as references
from pycaffe_ft.kernels import pooling
from pycaffe_ft.kernels.relu import relu_forward

from .test_numpy_references import POOLS, _Bits, _both, _pool_case, _values

SINGLE_ROWS = [(24, 24, 2, 0, 2), (32, 32, 3, 0, 2), (12, 17, 2, 0, 1), (9, 29, 5, 2, 2), (11, 26, 3, 2, 3)]
"""(H, W, kernel, pad, stride): window rows shared by stride kh - 1 or not, windows clipped by
pads and strides; all in POOLS, so that the references test them."""


@pytest.mark.skipif(not pooling.WIDE, reason='single rows by window rows: AVX-512 only')
@pytest.mark.parametrize('geometry', SINGLE_ROWS)
def test_max_pooling_of_rows_up_to_sixteen_goes_by_window_rows(geometry):
    assert geometry in POOLS
    planes, x, args = _pool_case(geometry, 0)
    y = np.empty(planes * args[-2] * args[-1], np.float32)
    kernel, _ = pooling._small_planes(x, planes, *args, pooling.window_taps(*args), y, y.copy(), False, False)
    assert kernel in pooling._SINGLE_ROWS


WIDE_ROWS = [(55, 55, 3, 0, 2), (35, 42, 3, 1, 2), (34, 33, 3, 0, 2), (40, 42, 3, 0, 2), (9, 71, 3, 2, 2)]
"""(H, W, kernel, pad, stride) of planes wider than 32 under 3 x 3 windows at stride 2: AlexNet's
pool1, pads at every edge, a last window past the image's right edge and bottom (ceil rounding),
the narrowest (16 outputs: one block), rows of several blocks, the last overlapping the one
before."""


@pytest.mark.skipif(not pooling.WIDE, reason='wide rows by window rows: AVX-512 only')
@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('geometry', WIDE_ROWS)
def test_max_pooling_of_wide_rows_goes_by_window_rows_with_caffes_bits(geometry, relu):
    """Against Caffe's loops in NumPy, NaN, infinities, signed zeros and a plane of -inf
    included, the fused ReLU too."""
    mine, theirs = _small_planes_against_caffe(geometry, relu, False, lambda k: k is pooling._max_pool_wide_rows_3x3)
    assert mine == theirs


def _small_planes_against_caffe(geometry, relu, average, takes):
    """The kernel :func:`~pycaffe_ft.kernels.pooling._small_planes` picks for this geometry
    (``takes(kernel)`` must hold) and Caffe's loops in NumPy, then the ReLU where ``relu``, as
    :class:`_Bits`: NaN, infinities, signed zeros and a plane of -inf in x."""
    planes, x, args = _pool_case(geometry, sum(geometry) + relu)
    size = planes * args[-2] * args[-1]
    outputs = [size] if average else [size, size]

    def ours(*a):
        y, mask = a[-len(outputs)], a[-1]
        kernel, arguments = pooling._small_planes(x, planes, *args, pooling.window_taps(*args), y, mask, average, relu)
        assert takes(kernel)
        kernel(*arguments)

    def reference(*a):
        (references.ave_pool_caffe if average else references.max_pool_caffe)(*a)
        if relu:
            relu_forward(a[-len(outputs)], a[-len(outputs)])
    return _both(ours, reference, outputs, lambda *y: (x, planes, *args, *y))


BLOCKS = [g for g in POOLS if pooling._by_blocks(g[0], g[1], g[2], g[2], g[3], g[3], g[4], g[4],
                                                -(-(g[0] + 2 * g[3] - g[2]) // g[4]) + 1,
                                                -(-(g[1] + 2 * g[3] - g[2]) // g[4]) + 1)]
"""The geometries of POOLS that go by blocks without AVX-512 (max pooling by window rows):
stride 2 (a row shared) and 1 (two), pads, a last block overlapping the one before, a last
window row and column past the image."""


def test_blocks_by_window_rows_take_these_geometries():
    assert BLOCKS == [(16, 16, 3, 1, 2), (7, 9, 3, 1, 1), (32, 32, 3, 0, 2)]


@pytest.mark.skipif(pooling.WIDE, reason='blocks by window rows: CPUs without AVX-512')
@pytest.mark.parametrize('geometry', BLOCKS)
def test_max_pooling_of_small_planes_goes_by_blocks_by_window_rows(geometry):
    planes, x, args = _pool_case(geometry, 0)
    y = np.empty(planes * args[-2] * args[-1], np.float32)
    kernel, _ = pooling._small_planes(x, planes, *args, pooling.window_taps(*args), y, y.copy(), False, False)
    assert kernel is pooling._max_pool_blocks_3x3


@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('geometry', BLOCKS)
def test_blocks_by_window_rows_give_caffes_bits(geometry, relu):
    """On every CPU (the layer tests take them only where there is no AVX-512): against Caffe's
    loops in NumPy, NaN, infinities, signed zeros and a plane of -inf included; the first and
    last planes, whose reads would leave x, through the scratch plane."""
    planes, x, args = _pool_case(geometry, sum(geometry) + relu)
    height, width, kh, kw, ph, pw, sh, sw, out_h, out_w = args
    size = planes * out_h * out_w

    def reference(*a):
        references.max_pool_caffe(*a)
        if relu:
            relu_forward(a[-2], a[-2])
    ours, theirs = _both(lambda *a: pooling._max_pool_blocks_3x3(*a[:4], ph, pw, sh, sw, out_h, out_w, *a[-2:], 64,
                                                                 relu),
                         reference, [size, size], lambda y, mask: (x, planes, *args, y, mask))
    assert ours == theirs


def _ave_block_kernel(sw):
    return (pooling._ave_pool_blocks_3x3_stride_1, pooling._ave_pool_blocks_3x3_stride_2)[sw - 1]


@pytest.mark.skipif(pooling.WIDE, reason='blocks: CPUs without AVX-512')
@pytest.mark.parametrize('geometry', BLOCKS)
def test_average_pooling_of_small_planes_goes_by_blocks(geometry):
    planes, x, args = _pool_case(geometry, 0)
    y = np.empty(planes * args[-2] * args[-1], np.float32)
    kernel, _ = pooling._small_planes(x, planes, *args, pooling.window_taps(*args), y, y, True, False)
    assert kernel is _ave_block_kernel(args[7])


def _ave_blocks_against_caffe(planes, x, args, relu, ahead=64):
    """The average blocks kernel of this geometry and Caffe's loops in NumPy (then the ReLU),
    as :class:`_Bits`."""
    height, width, kh, kw, ph, pw, sh, sw, out_h, out_w = args
    kernel, table = _ave_block_kernel(sw), pooling._ave_block_table(height, width, ph, pw, sh, sw, out_h, out_w)

    def reference(*a):
        references.ave_pool_caffe(*a)
        if relu:
            relu_forward(a[-1], a[-1])
    return _both(lambda *a: kernel(x, planes, height, width, ph, pw, sh, out_h, out_w, table, a[-1], ahead, relu),
                 reference, [planes * out_h * out_w], lambda y: (x, planes, *args, y))


@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('geometry', BLOCKS)
def test_average_blocks_give_caffes_bits(geometry, relu):
    """On every CPU (the layer tests take them only where there is no AVX-512): against Caffe's
    loops in NumPy, NaN, infinities and signed zeros included; the first and last planes,
    whose reads would leave x, through the scratch plane."""
    planes, x, args = _pool_case(geometry, sum(geometry) + relu)
    ours, theirs = _ave_blocks_against_caffe(planes, x, args, relu)
    assert ours == theirs


def test_average_blocks_give_caffes_bits_for_every_small_geometry():
    """Every 3 x 3 geometry the blocks take with planes up to 20 x 20 (and the widest, 32), pads
    0 to 2: the clipped windows at every edge, the divisors' padded rows and columns, one block
    a row or more, the table's block and row layout."""
    rng = np.random.default_rng(5)
    taken = 0
    for height in (3, 4, 5, 6, 7, 8, 9, 11, 14, 17, 20, 32):
        for width in (6, 7, 8, 9, 10, 15, 16, 17, 20, 32):
            for pad in (0, 1, 2):
                for stride in (1, 2):
                    planes, _, args = _pool_case((height, width, 3, pad, stride), 0)
                    if not pooling._by_blocks(*args):
                        continue  # (which leaves out a last window wholly in the pad, as Caffe does)
                    x = _values(rng, planes * height * width)
                    ours, theirs = _ave_blocks_against_caffe(planes, x, args, False)
                    assert ours == theirs, (height, width, pad, stride)
                    taken += 1
    assert taken > 150


@pytest.mark.parametrize('method', ['MAX', 'AVE'])
@pytest.mark.parametrize('geometry', POOLS)
def test_a_fused_relu_gives_the_bits_of_its_own_pass(geometry, method):
    """``relu=True``: y as the pooling and then :func:`relu_forward` give it (NaN kept, every
    value not above 0 and -FLT_MAX made +0), the argmax mask unchanged; whichever way the
    geometry takes (small planes apply it as they store, the others after)."""
    planes, x, args = _pool_case(geometry, 1)
    taps = pooling.window_taps(*args)
    size = planes * args[-2] * args[-1]
    results = []
    for relu in (False, True):
        y, mask = np.full(size, np.float32(-1.25e-38)), np.full(size, np.float32(-1.25e-38))
        if method == 'MAX':
            pooling.max_pool_forward(x, planes, *args, taps, y, mask, relu)
        else:
            pooling.ave_pool_forward(x, planes, *args, taps, y, relu)
        results.append((y, mask))
    (plain, plain_mask), (fused, fused_mask) = results
    relu_forward(plain, plain)
    assert (plain <= 0).any() and _Bits(fused) == _Bits(plain) and _Bits(fused_mask) == _Bits(plain_mask)


GATHERED = ([g for g in POOLS if g[2:] == (2, 0, 2) and g[1] >= 8]
            + [(9, 11, 2, 0, 2), (7, 8, 2, 0, 2), (10, 13, 2, 0, 2)])
"""(H, W, kernel, pad, stride) whose max pooling backward gathers: planes whose rows are one
block, three blocks, blocks and a last one shifted back (13), a column left over (9, 11), odd
heights (a last input row of its own)."""


@pytest.mark.parametrize('floor', [False, True])
@pytest.mark.parametrize('geometry', GATHERED)
def test_max_pooling_backward_by_gathering_gives_caffes_bits(geometry, floor):
    """Against Caffe's scatter in NumPy (NaN, infinities and signed zeros in dy; a plane whose
    masks are all -1), through max_pool_backward, which picks the gathering kernel; ``floor``:
    round_mode FLOOR's outputs, which leave an odd last row and column under no window (+0)."""
    planes, x, args = _pool_case(geometry, 11 + floor)
    height, width, kh, kw, ph, pw, sh, sw, out_h, out_w = args
    if floor:
        out_h, out_w = (height - 2) // 2 + 1, (width - 2) // 2 + 1
        args = args[:-2] + (out_h, out_w)
    size = planes * out_h * out_w
    y, mask = np.empty(size, np.float32), np.empty(size, np.float32)
    references.max_pool_caffe(x, planes, *args, y, mask)
    dy = _values(np.random.default_rng(5), size)
    for below in (None, x):  # and with the ReLU below
        ours, theirs = _both(lambda dx: pooling.max_pool_backward(dy, mask, planes, *args, dx, below),
                             lambda dx: references.max_pool_backward(dy, mask, planes, height * width, out_h * out_w,
                                                                     dx, below),
                             [planes * height * width], lambda dx: (dx,))
        assert ours == theirs
        gathered, _ = _both(pooling._max_pool_gather, references.max_pool_backward, [planes * height * width],
                            lambda dx: (dy, mask, planes, height * width, out_h * out_w, dx, below, width, out_w))
        assert gathered == theirs
        vectors = pooling._gather_vectors(height, width, out_h, out_w)
        if vectors is not None:  # on every CPU here; max_pool_backward takes it with AVX-512
            by_vectors, _ = _both(pooling._max_pool_gather_vectors, references.max_pool_backward,
                                  [planes * height * width],
                                  lambda dx: (dy, mask, planes, height * width, out_h * out_w, dx, below, *vectors))
            assert by_vectors == theirs


GATHERED_3X3 = [(32, 32, 3, 0, 2), (13, 13, 3, 0, 2), (27, 27, 3, 0, 2), (55, 55, 3, 0, 2), (9, 33, 3, 0, 2),
                (6, 66, 3, 0, 2), (17, 20, 3, 0, 2), (3, 3, 3, 0, 2)]
"""(H, W, kernel, pad, stride) of 3 x 3 windows at stride 2 whose max pooling backward can
gather: one block a row, a last block part full (55), a block with no output of its own (33:
only the last output's third column), three blocks (66), planes narrower than
:data:`~pycaffe_ft.kernels.pooling.GATHER_3X3_FROM`, two a vector (13, 3); every width through
scratch and into dx as rows are made."""


@pytest.mark.skipif(not pooling.WIDE, reason='3 x 3 max pooling backward by gathering: AVX-512 only')
@pytest.mark.parametrize('floor', [False, True])
@pytest.mark.parametrize('geometry', GATHERED_3X3)
def test_max_pooling_backward_3x3_by_gathering_gives_caffes_bits(geometry, floor):
    """Against Caffe's scatter in NumPy (NaN, infinities and signed zeros in dy and x, ties, a
    plane whose masks are all -1), with and without the ReLU below, each gather called directly
    and max_pool_backward (which picks one by the width); ``floor``: round_mode
    FLOOR's outputs, which leave an even last row and column under no window (+0), where CEIL's
    last windows are clipped."""
    planes, x, args = _pool_case(geometry, 13 + floor)
    height, width = args[:2]
    if floor:
        args = args[:-2] + ((height - 3) // 2 + 1, (width - 3) // 2 + 1)
    out_h, out_w = args[-2:]
    size = planes * out_h * out_w
    y, mask = np.empty(size, np.float32), np.empty(size, np.float32)
    references.max_pool_caffe(x, planes, *args, y, mask)
    dy = _values(np.random.default_rng(7), size)
    kernels = [(pooling._max_pool_gather_3x3, planes), (pooling._max_pool_gather_3x3_scratch, planes)]
    if width <= 16:  # two planes a vector: an odd count (the last plane scattered) and an even one
        kernels += [(pooling._max_pool_gather_3x3_pairs, planes), (pooling._max_pool_gather_3x3_pairs, planes - 1)]
    for below in (None, x):
        for kernel, count in kernels:
            gathered, theirs = _both(kernel, references.max_pool_backward, [count * height * width],
                                     lambda dx: (dy, mask, count, height * width, out_h * out_w, dx, below, height,
                                                 width, out_h, out_w))
            assert gathered == theirs
        ours, theirs = _both(lambda *a: pooling.max_pool_backward(dy, mask, planes, *args, a[5], below),
                             references.max_pool_backward, [planes * height * width],
                             lambda dx: (dy, mask, planes, height * width, out_h * out_w, dx, below))
        assert ours == theirs
        calls = pooling.max_pool_backward_calls(dy, mask, planes, *args, np.empty(planes * height * width, np.float32),
                                                below)
        assert calls[0][0] is (pooling._max_pool_gather_3x3_pairs if width < pooling.GATHER_3X3_FROM else
                               pooling._max_pool_gather_3x3_scratch if width <= pooling.GATHER_3X3_SCRATCH_UP_TO else
                               pooling._max_pool_gather_3x3)


def test_gather_vectors_take_planes_whose_vectors_read_sixteen_outputs():
    """LeNet's two pools (24 x 24 and 8 x 8) and the gathered geometries with a table; none for
    planes under 16 outputs or over the size limit."""
    assert pooling._gather_vectors(24, 24, 12, 12) is not None and pooling._gather_vectors(8, 8, 4, 4) is not None
    assert pooling._gather_vectors(6, 6, 3, 3) is None  # 9 outputs
    assert pooling._gather_vectors(64, 64, 32, 32) is None  # over GATHER_VECTORS_UP_TO
    bases, picks, positions = pooling._gather_vectors(24, 24, 12, 12)
    assert bases.size == 36 and picks.max() <= 15 and (positions >= 0).all()


BY_OUTPUT_ROWS = [(16, 16, 3, 0, 2), (8, 9, 3, 0, 2), (15, 15, 3, 1, 2), (9, 12, 3, 0, 2), (11, 16, 3, 1, 2),
                  (16, 13, 3, 2, 2), (13, 13, 2, 0, 2), (12, 10, 2, 0, 2), (17, 15, 2, 1, 2), (3, 9, 3, 0, 2)]
"""(H, W, kernel, pad, stride) whose average pooling backward can go by output rows: rows that
two windows hold and rows that one holds, windows over the padding, a pad as large as the
stride, odd and even sizes, one window over a three-row plane; widths 9 to 16."""

BY_PLANE_VECTORS = [(8, 8, 3, 0, 2), (7, 7, 3, 1, 2), (6, 6, 2, 0, 2), (4, 4, 3, 1, 1), (6, 9, 3, 0, 2),
                    (3, 9, 3, 0, 2), (5, 3, 5, 2, 3)]
"""(H, W, kernel, pad, stride) whose average pooling backward can go one plane a vector (at most
64 inputs and 16 outputs): inputs under 4, 1 and 9 outputs, planes of four vectors and of parts
of one."""


BY_PARITY = [(8, 8, 3, 0, 2), (6, 6, 3, 0, 2), (4, 4, 3, 0, 2), (4, 8, 3, 0, 2), (8, 6, 3, 0, 2), (6, 4, 3, 0, 2)]
"""(H, W, kernel, pad, stride) whose average pooling backward can go one plane a vector by
parity (CEIL's outputs): CIFAR10-quick's pool3 (four vectors), planes of parts of vectors,
windows clipped by the image at the bottom and right."""


def _average_backward_ways():
    return ([('output-rows', g) for g in BY_OUTPUT_ROWS] + [('plane-vectors', g) for g in BY_PLANE_VECTORS]
            + [('parity', g) for g in BY_PARITY] + [('plane-lanes', g) for g in BY_OUTPUT_ROWS + BY_PLANE_VECTORS])


@pytest.mark.parametrize('floor', [False, True])
@pytest.mark.parametrize('way,geometry', _average_backward_ways())
def test_average_pooling_backward_ways_give_caffes_bits(way, geometry, floor, monkeypatch):
    """Each way average pooling's backward goes (the others turned off: one plane a vector, by
    parity and by output rows, AVX-512 only, and plane lanes) against Caffe's scatter in NumPy (NaN,
    infinities and signed zeros in dy); with the ReLU below (x with NaN and signed zeros too) as
    relu_backward gives it after the plain backward; 21 planes, the last through scratch.
    ``floor``: round_mode FLOOR's outputs, which can leave the last rows and columns under no
    window (+0)."""
    if way != 'plane-lanes' and not pooling.WIDE:
        pytest.skip('one plane a vector and by output rows: AVX-512 only')
    monkeypatch.setattr(pooling, 'PLANE_VECTORS', way in ('plane-vectors', 'parity'))
    monkeypatch.setattr(pooling, 'BACKWARD_PARITY', way == 'parity')
    monkeypatch.setattr(pooling, 'BACKWARD_ROWS', way == 'output-rows')
    planes, x, args = _pool_case(geometry, 13 + floor)
    height, width, kh, kw, ph, pw, sh, sw, out_h, out_w = args
    if floor:
        out_h, out_w = (height + 2 * ph - kh) // sh + 1, (width + 2 * pw - kw) // sw + 1
        args = args[:-2] + (out_h, out_w)
    taps = pooling.window_taps(*args)
    # by parity: CEIL's outputs only (FLOOR's leave an even last row and column under the last
    # output's third window row alone); those planes go one plane a vector
    assert (taps[{'output-rows': 7, 'plane-vectors': 8, 'parity': 11}.get(way, 3)] is not None) == \
        (way != 'parity' or not floor)
    dy = _values(np.random.default_rng(17), planes * out_h * out_w)
    for below in (None, x):
        ours, theirs = _both(lambda dx: pooling.ave_pool_backward(dy, planes, taps, dx, below),
                             lambda dx: references.ave_pool_backward(dy, planes, taps[2], taps[3], dx, below),
                             [planes * height * width], lambda dx: (dx,))
        assert ours == theirs


def test_backward_by_parity_takes_3x3_windows_at_stride_2_whose_inputs_all_have_an_output():
    """Tables for CEIL's even planes up to 64 inputs; none where an input row or column has no
    output at half its index (FLOOR's 8 x 8, 7 x 7), for padding, other windows or strides, and
    larger planes."""
    assert pooling._backward_parity_picks(8, 8, 3, 3, 0, 0, 2, 2, 4, 4) is not None
    shifts, phases = pooling._backward_parity_picks(4, 6, 3, 3, 0, 0, 2, 2, 2, 3)
    np.testing.assert_array_equal(shifts[:16], [16, 0, 1, 16, 3, 4] + [16] * 10)  # to the left
    np.testing.assert_array_equal(shifts[16:32], [16, 16, 16, 0, 1, 2] + [16] * 10)  # above
    np.testing.assert_array_equal(shifts[32:], [16, 16, 16, 16, 0, 1] + [16] * 10)  # above-left
    np.testing.assert_array_equal(phases[:12], [0, 16, 1, 17, 2, 18, 32, 48, 33, 49, 34, 50])  # rows 0 and 1
    for geometry in ((8, 8, 3, 3, 0, 0, 2, 2, 3, 3), (7, 7, 3, 3, 0, 0, 2, 2, 3, 3), (8, 8, 3, 3, 1, 1, 2, 2, 4, 4),
                     (8, 8, 2, 2, 0, 0, 2, 2, 4, 4), (10, 10, 3, 3, 0, 0, 2, 2, 5, 5)):
        assert pooling._backward_parity_picks(*geometry) is None


PARITY = [(8, 8, 3, 0, 2), (7, 7, 3, 1, 2), (6, 6, 2, 0, 2), (6, 9, 3, 0, 2), (3, 9, 3, 0, 2), (5, 3, 5, 2, 2),
          (4, 4, 3, 1, 2), (6, 8, 3, 0, 2), (8, 8, 2, 0, 2)]
"""(H, W, kernel, pad, stride) whose average pooling goes one plane a vector by row parity:
CIFAR10-quick's pool3, a pad that makes a window's first row odd, 2 x 2, 3 x 3 and any window,
parities of 32 floats and of fewer, windows clipped by the pad and the image; planes 8 wide
(their rows of a parity loaded two a vector), with fewer rows too."""


@pytest.mark.skipif(not pooling.WIDE, reason='one plane a vector by row parity: AVX-512 only')
@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('geometry', PARITY)
def test_average_pooling_by_row_parity_gives_caffes_bits(geometry, relu):
    """Against Caffe's loops in NumPy (NaN, infinities and signed zeros; a plane of -inf), the
    fused ReLU too; the kernel is the one for this window."""
    mine, theirs = _small_planes_against_caffe(geometry, relu, True,
                                               lambda k: k in pooling._AVE_PARITY_PLANE_VECTORS)
    assert mine == theirs


def test_row_parity_needs_stride_two_and_parities_of_32_floats():
    assert pooling._parity_picks(7, 9, 3, 3, 0, 0, 2, 2, 3, 4) is None  # even rows: 4 x 9 floats
    assert pooling._parity_picks(8, 8, 3, 3, 1, 1, 1, 1, 8, 8) is None  # stride 1
    assert pooling._parity_picks(8, 8, 3, 3, 0, 0, 2, 2, 4, 4).size == 64 + 9 * 16


BY_OFFSETS = [(13, 13, 3, 0, 2), (14, 14, 2, 0, 2), (14, 14, 3, 0, 2), (16, 16, 3, 0, 2), (12, 9, 3, 0, 1),
              (11, 16, 5, 0, 3), (13, 10, 4, 0, 2)]
"""(H, W, kernel, pad, stride) whose max pooling goes by row pairs by tap offsets: AlexNet's
pool5, 2 x 2 windows, windows clipped at the right and bottom (ceil rounding), stride 1, an
odd output count (a last chunk of one row), any window."""


@pytest.mark.skipif(not pooling.WIDE, reason='row pairs: AVX-512 only')
@pytest.mark.parametrize('relu', [False, True])
@pytest.mark.parametrize('geometry', BY_OFFSETS)
def test_max_pooling_by_row_pairs_by_tap_offsets_gives_caffes_bits(geometry, relu):
    """Against Caffe's loops in NumPy (NaN, infinities and signed zeros; a plane of -inf, whose
    argmaxes stay -1), the fused ReLU too; the kernel is the one for this window."""
    mine, theirs = _small_planes_against_caffe(geometry, relu, False,
                                               lambda k: k in pooling._MAX_ROW_PAIRS_BY_OFFSETS)
    assert mine == theirs


def test_tap_offsets_take_unpadded_windows_whose_picks_repeat_in_every_row():
    """A padded window's first taps lie outside the image: it keeps the positions table. Where
    offsets serve, every chunk's and window row's picks are tap kx's; the row starts are those
    of each chunk's two output rows' window row ky, clamped into the image (the last chunk's
    second row, past the outputs, too); and the window starts are the positions of each chunk's
    first tap."""
    assert pooling._pair_picks(13, 13, 3, 3, 1, 1, 2, 2, 7, 7, np.ones(49, np.float32))[5] is None
    height, width, kh, kw, ph, pw, sh, sw, out_h, out_w = 14, 14, 3, 3, 0, 0, 2, 2, 7, 7
    _, positions, _, _, repeats, (picks, bases) = pooling._pair_picks(height, width, kh, kw, ph, pw, sh, sw, out_h,
                                                                       out_w, np.ones(49, np.float32))
    repeats, positions = repeats.reshape(-1, kh * kw, 16), positions.reshape(-1, kh * kw, 16)
    columns, starts = picks[:16 * kw].reshape(kw, 16), picks[16 * kw:].reshape(-1, kh, 2)
    assert np.array_equal(repeats, np.broadcast_to(np.tile(columns, (kh, 1)), repeats.shape))
    rows = [[[min((2 * c + i) * sh + ky, height - 1) * width for i in (0, 1)] for ky in range(kh)]
            for c in range(4)]
    assert np.array_equal(starts, rows)
    assert np.array_equal(bases.reshape(-1, 16), positions[:, 0])
