"""Winograd tile transforms for stride-1 convolution (Lavin & Gray's F(m x m, r x r)), m = 2.

An image is cut into tiles of 2 x 2 outputs. Each tile's input window (``alpha x alpha``,
alpha = 2 + r - 1: 4 for 3x3 kernels, 6 for 5x5) is transformed, ``B^T @ window @ B``, so
that the convolution becomes ``alpha**2`` independent GEMMs over the channels (one per
transformed position), and each tile's products go back to 2 x 2 outputs by
``A^T @ products @ A``. For the weight gradient, 2 x 2 tiles of the top's diff are transformed
by ``G @ tile @ G^T`` instead. The matrices (Toom-Cook with the points 0, 1, -1 and, for alpha
6, 1/2, -2) are written out below as straight-line code; :mod:`pycaffe_ft.layers.winograd`
derives them exactly and its tests check that they agree.

Layouts (flat, C-contiguous float32): images inside are channels-last and zero-padded,
(N, padded_h, padded_w, C), and transformed tiles (alpha*alpha, N*tiles_h*tiles_w, C), tile
``(n*tiles_h + i)*tiles_w + j``, so that every inner loop runs over the channels (contiguous:
it vectorizes). The kernels never allocate (the caller passes scratch) and release the GIL.
"""
import numpy as np
from numba import njit

from .simd import WIDE, vadd, vfull, vload, vmul, vrelu, vstore, vsub, vtranspose, wfull, wload
from .small_gemm import call_batched_gemm

_at = np.uint64  # unsigned offsets: no negative-index wraparound test, so the loops vectorize

INPUT_6, INPUT_4, DIFF_6, DIFF_4, OUTPUT_6, OUTPUT_4 = range(6)
"""Which 1-D transform :func:`tile_transform` and :func:`tile_inverse` apply: B^T for alpha 6
or 4 (input windows), G for alpha 6 or 4 with a window of 2 (top diff tiles), A^T for
alpha 6 or 4 (products back to 2 outputs)."""

_1_5 = np.float32(1.5)
_2_5 = np.float32(2.5)
_THIRD = np.float32(1.0 / 3.0)
_FIFTEENTH = np.float32(1.0 / 15.0)


@njit(cache=True, nogil=True, inline='always')
def _scalar(src, i):
    return src[_at(i)]


@njit(cache=True, nogil=True, inline='always')
def _vector(src, i):
    return vload(src, i)


@njit(cache=True, nogil=True, inline='always')
def _wide_vector(src, i):
    return wload(src, i)


@njit(cache=True, nogil=True, inline='always')
def _taps2(load, src, s, pair, odd, c):
    """Taps 0 and 1 of channel c (``load``: :func:`_scalar`, or :func:`_vector` /
    :func:`_wide_vector` for channels c .. c+7 / c+15): tap b at s + (b // 2)*pair + (b % 2)*odd."""
    return load(src, s + c), load(src, s + odd + c)


@njit(cache=True, nogil=True, inline='always')
def _taps4(load, src, s, pair, odd, c):
    x0, x1 = _taps2(load, src, s, pair, odd, c)
    x2, x3 = _taps2(load, src, s + pair, pair, odd, c)
    return x0, x1, x2, x3


@njit(cache=True, nogil=True, inline='always')
def _taps6(load, src, s, pair, odd, c):
    x0, x1, x2, x3 = _taps4(load, src, s, pair, odd, c)
    x4, x5 = _taps2(load, src, s + 2 * pair, pair, odd, c)
    return x0, x1, x2, x3, x4, x5


# Each transform on the values of one line (scalars here; NumPy arrays in
# :mod:`.numpy_references`, which runs these functions' Python for the kernels' bits).

@njit(cache=True, nogil=True, inline='always')
def input_6(x0, x1, x2, x3, x4, x5):
    """B^T (alpha 6) times six taps."""
    return (x0 + x4 + _1_5 * (x3 - x1) - np.float32(2.0) * x2,
            x4 - x1 + np.float32(0.5) * x2 + _2_5 * x3,
            x1 + x4 - _2_5 * x2 + np.float32(0.5) * x3,
            x4 - x2 + np.float32(2.0) * (x3 - x1),
            x4 - x2 + np.float32(0.5) * (x1 - x3),
            x1 + x5 + _1_5 * (x4 - x2) - np.float32(2.0) * x3)


@njit(cache=True, nogil=True, inline='always')
def input_4(x0, x1, x2, x3):
    """B^T (alpha 4) times four taps."""
    return x2 - x0, x1 + x2, x2 - x1, x3 - x1


@njit(cache=True, nogil=True, inline='always')
def diff_6(x0, x1):
    """G (alpha 6, a window of 2) times two taps."""
    return (x0, _THIRD * (x0 + x1), _THIRD * (x1 - x0),
            -_FIFTEENTH * (np.float32(16.0) * x0 + np.float32(8.0) * x1),
            _FIFTEENTH * (x0 - np.float32(2.0) * x1), x1)


@njit(cache=True, nogil=True, inline='always')
def diff_4(x0, x1):
    """G (alpha 4, a window of 2) times two taps."""
    return -x0, np.float32(0.5) * (x0 + x1), np.float32(0.5) * (x0 - x1), x1


@njit(cache=True, nogil=True, inline='always')
def output_6(x0, x1, x2, x3, x4, x5):
    """A^T (alpha 6) times six products."""
    return x0 + x1 + x2 + x3 + x4, x1 - x2 + np.float32(0.5) * x3 - np.float32(2.0) * x4 + x5


@njit(cache=True, nogil=True, inline='always')
def output_4(x0, x1, x2, x3):
    """A^T (alpha 4) times four products."""
    return x0 + x1 + x2, x1 - x2 + x3


TRANSFORMS = {INPUT_6: (input_6, 6), INPUT_4: (input_4, 4), DIFF_6: (diff_6, 2), DIFF_4: (diff_4, 2),
              OUTPUT_6: (output_6, 6), OUTPUT_4: (output_4, 4)}
"""Each kind's function on the values of one line, and how many taps it takes."""


@njit(cache=True, nogil=True, inline='always')
def _store(dst, d, ds, c, values):
    for k in range(len(values)):
        dst[_at(d + k * ds + c)] = values[k]


@njit(cache=True, nogil=True, inline='always')
def _input_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, input_6(x0, x1, x2, x3, x4, x5))


@njit(cache=True, nogil=True, inline='always')
def _input_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, input_4(x0, x1, x2, x3))


@njit(cache=True, nogil=True, inline='always')
def _diff_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, diff_6(x0, x1))


@njit(cache=True, nogil=True, inline='always')
def _diff_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, diff_4(x0, x1))


@njit(cache=True, nogil=True, inline='always')
def _output_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, output_6(x0, x1, x2, x3, x4, x5))


@njit(cache=True, nogil=True, inline='always')
def _output_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(_scalar, src, s, pair, odd, c)
    _store(dst, d, ds, c, output_4(x0, x1, x2, x3))


# The same transforms on eight or sixteen channels at once (``load`` and ``full`` of that many
# lanes), each written as the scalar one above (the same operations in the same order, no fused
# multiply-add): the same bits per channel.

@njit(cache=True, nogil=True, inline='always')
def _input_6_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(load, src, s, pair, odd, c)
    vstore(dst, d + c, vsub(vadd(vadd(x0, x4), vmul(full(_1_5), vsub(x3, x1))), vmul(full(np.float32(2.0)), x2)))
    vstore(dst, d + ds + c, vadd(vadd(vsub(x4, x1), vmul(full(np.float32(0.5)), x2)), vmul(full(_2_5), x3)))
    vstore(dst, d + 2 * ds + c, vadd(vsub(vadd(x1, x4), vmul(full(_2_5), x2)), vmul(full(np.float32(0.5)), x3)))
    vstore(dst, d + 3 * ds + c, vadd(vsub(x4, x2), vmul(full(np.float32(2.0)), vsub(x3, x1))))
    vstore(dst, d + 4 * ds + c, vadd(vsub(x4, x2), vmul(full(np.float32(0.5)), vsub(x1, x3))))
    vstore(dst, d + 5 * ds + c,
           vsub(vadd(vadd(x1, x5), vmul(full(_1_5), vsub(x4, x2))), vmul(full(np.float32(2.0)), x3)))


@njit(cache=True, nogil=True, inline='always')
def _input_4_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(load, src, s, pair, odd, c)
    vstore(dst, d + c, vsub(x2, x0))
    vstore(dst, d + ds + c, vadd(x1, x2))
    vstore(dst, d + 2 * ds + c, vsub(x2, x1))
    vstore(dst, d + 3 * ds + c, vsub(x3, x1))


@njit(cache=True, nogil=True, inline='always')
def _diff_6_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(load, src, s, pair, odd, c)
    vstore(dst, d + c, x0)
    vstore(dst, d + ds + c, vmul(full(_THIRD), vadd(x0, x1)))
    vstore(dst, d + 2 * ds + c, vmul(full(_THIRD), vsub(x1, x0)))
    vstore(dst, d + 3 * ds + c, vmul(full(-_FIFTEENTH), vadd(vmul(full(np.float32(16.0)), x0),
                                                             vmul(full(np.float32(8.0)), x1))))
    vstore(dst, d + 4 * ds + c, vmul(full(_FIFTEENTH), vsub(x0, vmul(full(np.float32(2.0)), x1))))
    vstore(dst, d + 5 * ds + c, x1)


@njit(cache=True, nogil=True, inline='always')
def _diff_4_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(load, src, s, pair, odd, c)
    vstore(dst, d + c, vsub(full(np.float32(-0.0)), x0))  # -x0, zeros' signs included
    vstore(dst, d + ds + c, vmul(full(np.float32(0.5)), vadd(x0, x1)))
    vstore(dst, d + 2 * ds + c, vmul(full(np.float32(0.5)), vsub(x0, x1)))
    vstore(dst, d + 3 * ds + c, x1)


@njit(cache=True, nogil=True, inline='always')
def _output_6_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(load, src, s, pair, odd, c)
    vstore(dst, d + c, vadd(vadd(vadd(vadd(x0, x1), x2), x3), x4))
    vstore(dst, d + ds + c, vadd(vsub(vadd(vsub(x1, x2), vmul(full(np.float32(0.5)), x3)),
                                      vmul(full(np.float32(2.0)), x4)), x5))


@njit(cache=True, nogil=True, inline='always')
def _output_4_vector(load, full, src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(load, src, s, pair, odd, c)
    vstore(dst, d + c, vadd(vadd(x0, x1), x2))
    vstore(dst, d + ds + c, vadd(vsub(x1, x2), x3))


@njit(cache=True, nogil=True, inline='always')
def _over_channels(one, one_vector, src, s, pair, odd, dst, d, ds, channels):
    """``one`` for every channel: sixteen at a time as vectors where :data:`~.simd.WIDE` and
    every offset is a multiple of 16 (so that, in the callers' 64-byte aligned scratch, no
    vector crosses a cache line), then eight, the rest one by one (the same operations on every
    lane: the same bits). CIFAR10-quick's conv2 (32 channels, 100 images), one Emerald Rapids
    thread, alternated: the input transform 2.23-2.38 -> 1.44-1.54 ms, the inverse 0.75-0.86
    -> 0.68-0.70 (both slower than eight lanes, 3.6 and 0.95, in arrays 16 or 48 bytes past
    a cache line)."""
    wide = channels - channels % 16 if WIDE and (s | pair | odd | d | ds) % 16 == 0 else 0
    for c0 in range(0, wide, 16):
        one_vector(_wide_vector, wfull, src, s, pair, odd, dst, d, ds, c0)
    full = channels - channels % 8
    for c0 in range(wide, full, 8):
        one_vector(_vector, vfull, src, s, pair, odd, dst, d, ds, c0)
    for c in range(full, channels):
        one(src, s, pair, odd, dst, d, ds, c)


@njit(cache=True, nogil=True)
def _line(kind, src, s, pair, odd, dst, d, ds, channels):
    """dst[d + k*ds + c] = sum_b M[k, b] * src[s + (b // 2)*pair + (b % 2)*odd + c] for every
    channel c, M the transform named by ``kind`` (taps at a step: ``odd`` = step, ``pair`` =
    2 * step; in images split into even and odd columns, ``odd`` is the odd columns' offset).
    Compiled once (not inlined into each transform: that compiled every kind at each call)."""
    if kind == INPUT_6:
        _over_channels(_input_6, _input_6_vector, src, s, pair, odd, dst, d, ds, channels)
    elif kind == INPUT_4:
        _over_channels(_input_4, _input_4_vector, src, s, pair, odd, dst, d, ds, channels)
    elif kind == DIFF_6:
        _over_channels(_diff_6, _diff_6_vector, src, s, pair, odd, dst, d, ds, channels)
    elif kind == DIFF_4:
        _over_channels(_diff_4, _diff_4_vector, src, s, pair, odd, dst, d, ds, channels)
    elif kind == OUTPUT_6:
        _over_channels(_output_6, _output_6_vector, src, s, pair, odd, dst, d, ds, channels)
    else:
        _over_channels(_output_4, _output_4_vector, src, s, pair, odd, dst, d, ds, channels)


@njit(cache=True, nogil=True, inline='always')
def _split_column(row, col, half_w):
    """Where column ``col`` of a row starting at pixel ``row`` is stored when the even
    columns come first, then the odd ones."""
    return row + (col % 2) * half_w + col // 2


@njit(cache=True, nogil=True)
def _zero_border(dst, num, channels, padded_h, padded_w, row_lo, row_hi, col_lo, col_hi):
    """Zero every pixel of dst (N, padded_h, padded_w split, C) outside rows [row_lo, row_hi)
    x columns [col_lo, col_hi): the rest is about to be written."""
    half_w = padded_w // 2
    for n in range(num):
        for y in range(padded_h):
            row = (n * padded_h + y) * padded_w
            if row_lo <= y < row_hi and col_lo < col_hi:
                for col in range(padded_w):
                    if col < col_lo or col >= col_hi:
                        d0 = _split_column(row, col, half_w) * channels
                        for c in range(channels):
                            dst[_at(d0 + c)] = 0.0
            else:
                for i in range(row * channels, (row + padded_w) * channels):
                    dst[_at(i)] = 0.0


@njit(cache=True, nogil=True)
def to_channels_last(src, num, channels, height, width, top, left, padded_h, padded_w, dst):
    """dst = src (N, C, H, W) placed at row ``top``, column ``left`` of a zero image
    (N, padded_h, padded_w, C) whose columns are stored split, the even ones first, then the
    odd ones: dst[n, y, x % 2, x // 2, c] (``padded_w`` even). Parts beyond it are dropped.
    Blocks of 8 channels x 8 columns go through an 8 x 8 vector transpose."""
    plane = height * width
    half_w = padded_w // 2
    vector_channels = channels - channels % 8
    x_lo, x_hi = max(0, -left), min(width, padded_w - left)
    _zero_border(dst, num, channels, padded_h, padded_w, max(0, top), min(padded_h, top + height),
                 x_lo + left, x_hi + left)
    for n in range(num):
        for y in range(max(0, -top), min(height, padded_h - top)):
            row = (n * padded_h + y + top) * padded_w
            for c0 in range(0, vector_channels, 8):
                s0 = (n * channels + c0) * plane + y * width
                x = x_lo
                while x + 8 <= x_hi:
                    w0, w1, w2, w3, w4, w5, w6, w7 = vtranspose(
                        vload(src, s0 + x), vload(src, s0 + plane + x), vload(src, s0 + 2 * plane + x),
                        vload(src, s0 + 3 * plane + x), vload(src, s0 + 4 * plane + x),
                        vload(src, s0 + 5 * plane + x), vload(src, s0 + 6 * plane + x),
                        vload(src, s0 + 7 * plane + x))
                    col = x + left
                    vstore(dst, _split_column(row, col, half_w) * channels + c0, w0)
                    vstore(dst, _split_column(row, col + 1, half_w) * channels + c0, w1)
                    vstore(dst, _split_column(row, col + 2, half_w) * channels + c0, w2)
                    vstore(dst, _split_column(row, col + 3, half_w) * channels + c0, w3)
                    vstore(dst, _split_column(row, col + 4, half_w) * channels + c0, w4)
                    vstore(dst, _split_column(row, col + 5, half_w) * channels + c0, w5)
                    vstore(dst, _split_column(row, col + 6, half_w) * channels + c0, w6)
                    vstore(dst, _split_column(row, col + 7, half_w) * channels + c0, w7)
                    x += 8
                for c in range(c0, c0 + 8):
                    _to_columns(src, (n * channels + c) * plane + y * width, x, x_hi, left, row,
                                half_w, channels, c, dst)
            for c in range(vector_channels, channels):
                _to_columns(src, (n * channels + c) * plane + y * width, x_lo, x_hi, left, row, half_w,
                            channels, c, dst)


@njit(cache=True, nogil=True)
def from_channels_last(src, num, channels, src_h, src_w, height, width, bias, use_bias, relu, dst):
    """dst (N, C, H, W) = the top-left H x W of src (N, src_h, src_w, C) (columns split as
    :func:`to_channels_last` stores them), + bias[c] (0 without ``use_bias``), through a ReLU
    (negative slope 0) with ``relu``. Blocks of 8 columns x 8 channels go through an 8 x 8
    vector transpose."""
    half_w = src_w // 2
    plane = height * width
    vector_channels = channels - channels % 8
    for n in range(num):
        for y in range(height):
            row = (n * src_h + y) * src_w
            for c0 in range(0, vector_channels, 8):
                d0 = ((n * channels + c0) * height + y) * width
                x = 0
                while x + 8 <= width:
                    w0, w1, w2, w3, w4, w5, w6, w7 = vtranspose(
                        vload(src, _split_column(row, x, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 1, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 2, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 3, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 4, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 5, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 6, half_w) * channels + c0),
                        vload(src, _split_column(row, x + 7, half_w) * channels + c0))
                    _store8(dst, d0 + x, vadd(w0, vfull(_bias(bias, use_bias, c0))), relu)
                    _store8(dst, d0 + plane + x, vadd(w1, vfull(_bias(bias, use_bias, c0 + 1))), relu)
                    _store8(dst, d0 + 2 * plane + x, vadd(w2, vfull(_bias(bias, use_bias, c0 + 2))), relu)
                    _store8(dst, d0 + 3 * plane + x, vadd(w3, vfull(_bias(bias, use_bias, c0 + 3))), relu)
                    _store8(dst, d0 + 4 * plane + x, vadd(w4, vfull(_bias(bias, use_bias, c0 + 4))), relu)
                    _store8(dst, d0 + 5 * plane + x, vadd(w5, vfull(_bias(bias, use_bias, c0 + 5))), relu)
                    _store8(dst, d0 + 6 * plane + x, vadd(w6, vfull(_bias(bias, use_bias, c0 + 6))), relu)
                    _store8(dst, d0 + 7 * plane + x, vadd(w7, vfull(_bias(bias, use_bias, c0 + 7))), relu)
                    x += 8
                for c in range(c0, c0 + 8):
                    _from_columns(src, row, half_w, channels, c, x, width, _bias(bias, use_bias, c),
                                  relu, dst, ((n * channels + c) * height + y) * width)
            for c in range(vector_channels, channels):
                _from_columns(src, row, half_w, channels, c, 0, width, _bias(bias, use_bias, c),
                              relu, dst, ((n * channels + c) * height + y) * width)


@njit(cache=True, nogil=True, inline='always')
def _bias(bias, use_bias, c):
    return bias[c] if use_bias else np.float32(0.0)


@njit(cache=True, nogil=True, inline='always')
def _to_columns(src, s0, x_lo, x_hi, left, row, half_w, channels, c, dst):
    """Columns [x_lo, x_hi) of channel c's image row at s0, one by one."""
    for x in range(x_lo, x_hi):
        dst[_at(_split_column(row, x + left, half_w) * channels + c)] = src[_at(s0 + x)]


@njit(cache=True, nogil=True, inline='always')
def _from_columns(src, row, half_w, channels, c, x_lo, width, b, relu, dst, d0):
    for x in range(x_lo, width):
        v = src[_at(_split_column(row, x, half_w) * channels + c)] + b
        dst[_at(d0 + x)] = v if not relu or v > 0 or v != v else np.float32(0.0)


@njit(cache=True, nogil=True, inline='always')
def _store8(dst, d, v, relu):
    vstore(dst, d, vrelu(v) if relu else v)


@njit(cache=True, nogil=True)
def tile_transform(src, num, padded_h, padded_w, channels, kind, alpha, tiles_h, tiles_w, rows, out):
    """out[p*alpha + q, tile, c] = (M @ window @ M.T)[p, q] for every tile's window (rows and
    columns from ``i*2``, ``j*2``) of ``src`` (N, padded_h, padded_w, C), columns split as
    :func:`to_channels_last` stores them; M = ``kind``'s matrix (alpha x alpha for input
    windows, alpha x 2 for top diff tiles). Scratch ``rows`` >= padded_h*alpha*tiles_w*C."""
    tiles = tiles_h * tiles_w
    total = num * tiles
    run = tiles_w * channels  # one tile row of one transformed position: contiguous
    for n in range(num):
        # rows[y, q, j, c] = sum_b M[q, b] * src[n, y, 2j + b, c]
        for y in range(padded_h):
            _line(kind, src, (n * padded_h + y) * padded_w * channels, channels, padded_w // 2 * channels, rows,
                  y * alpha * run, run, run)
        # out[p*alpha + q, (n, i, j), c] = sum_l M[p, l] * rows[2i + l, q, j, c]
        for i in range(tiles_h):
            for q in range(alpha):
                _line(kind, rows, (2 * i * alpha + q) * run, 2 * alpha * run, alpha * run,
                      out, (q * total + n * tiles + i * tiles_w) * channels,
                      alpha * total * channels, run)


@njit(cache=True, nogil=True)
def tile_inverse(prod, num, channels, kind, alpha, tiles_h, tiles_w, half, dst):
    """dst (N, 2*tiles_h, 2*tiles_w, C), columns split as :func:`to_channels_last` stores
    them, = A^T @ products @ A for every tile of ``prod`` (alpha*alpha, N*tiles, C), A^T =
    ``kind``'s (2, alpha) matrix. Scratch ``half`` >=
    2*alpha*tiles_w*C."""
    tiles = tiles_h * tiles_w
    total = num * tiles
    run = tiles_w * channels
    out_w = 2 * tiles_w
    for n in range(num):
        for i in range(tiles_h):
            # half[u, q, j, c] = sum_p A^T[u, p] * prod[p*alpha + q, (n, i, j), c]
            for q in range(alpha):
                _line(kind, prod, (q * total + n * tiles + i * tiles_w) * channels,
                      2 * alpha * total * channels, alpha * total * channels, half, q * run, alpha * run, run)
            # dst[n, 2i + u, v, j, c] = sum_q A^T[v, q] * half[u, q, j, c]
            for u in range(2):
                _line(kind, half, u * alpha * run, 2 * run, run, dst,
                      (n * 2 * tiles_h + 2 * i + u) * out_w * channels, run, run)


@njit(cache=True, nogil=True, inline='always')
def _input_windows(x, lo, n, channels, height, width, top, left, padded_h, padded_w, kind, alpha, tiles_h,
                   tiles_w, image, rows, v):
    """v = the transformed input windows of images lo .. lo + n - 1 of x (flat NCHW), placed at
    row ``top``, column ``left`` of zero (padded_h, padded_w) images (through ``image``)."""
    to_channels_last(x[lo * channels * height * width:], n, channels, height, width, top, left,
                     padded_h, padded_w, image)
    tile_transform(image, n, padded_h, padded_w, channels, kind, alpha, tiles_h, tiles_w, rows, v)


@njit(cache=True, nogil=True)
def convolve_images(x, num, step, channels, height, width, top, left, padded_h, padded_w, in_kind,
                    alpha, tiles_h, tiles_w, u, groups, out_channels, out_kind, out_h, out_w, bias,
                    use_bias, relu, y, image, rows, v, prod, half, result, gemm):
    """y (N, K, out_h, out_w) = the stride-1 convolution of x (N, C, H, W), both flat, placed
    at row ``top``, column ``left`` of a zero (padded_h, padded_w) image, with the transformed
    weights u (alpha^2, groups, C/groups, K/groups), + bias, through a ReLU with ``relu``
    (:func:`from_channels_last`): ``step`` images at a time through :func:`to_channels_last`,
    :func:`tile_transform`, the per-position products
    (:func:`~pycaffe_ft.kernels.small_gemm.batched_gemm`, called through ``gemm``, its
    :func:`~pycaffe_ft.kernels.small_gemm.batched_gemm_function`), :func:`tile_inverse` and
    :func:`from_channels_last`, so that one image's tiles and products stay in the core's
    cache between the steps. Scratch for ``step`` images: ``image``, ``rows``, ``v``,
    ``prod``, ``half``, ``result`` (sizes as those functions ask). Each output's bits do not
    depend on ``step``."""
    ci, co = channels // groups, out_channels // groups
    tiles = tiles_h * tiles_w
    for lo in range(0, num, step):
        n = min(step, num - lo)
        count = n * tiles
        _input_windows(x, lo, n, channels, height, width, top, left, padded_h, padded_w, in_kind, alpha,
                       tiles_h, tiles_w, image, rows, v)
        for gi in range(groups):
            call_batched_gemm(gemm, v, gi * ci, count * channels, channels, 1, u, gi * ci * co, groups * ci * co, co,
                              prod, gi * co, count * out_channels, out_channels, alpha * alpha, count, ci, co)
        tile_inverse(prod, n, out_channels, out_kind, alpha, tiles_h, tiles_w, half, result)
        from_channels_last(result, n, out_channels, 2 * tiles_h, 2 * tiles_w, out_h, out_w, bias, use_bias,
                           relu, y[lo * out_channels * out_h * out_w:])


@njit(cache=True, nogil=True)
def weight_products(x, dy, num, step, channels, height, width, top, left, padded_h, padded_w, in_kind,
                    diff_kind, alpha, tiles_h, tiles_w, out_channels, out_h, out_w, groups, part,
                    image, rows, vx, diff_image, diff_rows, vg, more, gemm):
    """part (alpha^2, groups, K/groups, C/groups) = the products of the weight gradient summed
    over the tiles of the images x (N, C, H, W) and top diffs dy (N, K, out_h, out_w), both
    flat: per position and group, the transformed top-diff tiles (:data:`DIFF_6`/:data:`DIFF_4`
    of 2 x 2 tiles) transposed times the transformed input windows (placed as
    :func:`convolve_images` places them), ``step`` images at a time, each step's products
    (in ``more`` after the first; through ``gemm`` as in :func:`convolve_images`) added to ``part``.
    Scratch for ``step`` images: ``image``,
    ``rows``, ``vx`` (input side), ``diff_image``, ``diff_rows``, ``vg`` (top side), ``more``
    (part's size)."""
    ci, co = channels // groups, out_channels // groups
    tiles = tiles_h * tiles_w
    for lo in range(0, num, step):
        n = min(step, num - lo)
        _input_windows(x, lo, n, channels, height, width, top, left, padded_h, padded_w, in_kind, alpha,
                       tiles_h, tiles_w, image, rows, vx)
        count = n * tiles
        to_channels_last(dy[lo * out_channels * out_h * out_w:], n, out_channels, out_h, out_w, np.intp(0),
                         np.intp(0), 2 * tiles_h, 2 * tiles_w, diff_image)  # run-time zeros: one compiled copy
        tile_transform(diff_image, n, 2 * tiles_h, 2 * tiles_w, out_channels, diff_kind, alpha, tiles_h, tiles_w,
                       diff_rows, vg)
        into = part if lo == 0 else more
        for gi in range(groups):  # into[xi, gi] = vg[xi, :, group gi].T @ vx[xi, :, group gi]
            call_batched_gemm(gemm, vg, gi * co, count * out_channels, 1, out_channels, vx, gi * ci, count * channels,
                              channels, into, gi * co * ci, groups * co * ci, ci, alpha * alpha, co, count, ci)
        if lo > 0:
            for i in range(part.size):
                part[i] += more[i]


@njit(cache=True, nogil=True)
def weight_tiles(w, g_matrix, groups, flip, out, first_pair, last_pair):
    """out[p*alpha + q, group, c, o] = (G w[o, c] G^T)[p, q] in float64, rounded once, for the
    weights w (K, C/groups, r, r) and G = ``g_matrix`` (alpha, r), o within its group; with
    ``flip``, of the rotated weights into out[.., group, o, c] (the bottom diff's
    convolution). out is (alpha*alpha, groups, C/groups, K/groups), or (.., K/groups,
    C/groups) with ``flip``; all C-contiguous (read flat). Every (o, c) pair is its own chain
    of float64 multiply-adds in (a, then b) order; the loops run over the pairs innermost,
    so they vectorize (CIFAR10-quick's 64 x 32 x 5 x 5: 0.47 ms one pair at a time). The pairs
    go in out's order, so that each position is written in one sweep (in w's order, the
    transpose scattered the stores: 256 x 256 x 3 x 3 took 5.9 ms, 128 x 128 1.1 ms); only
    out's pairs first_pair .. last_pair - 1 (in each position) are written."""
    k, c_in, r = w.shape[0], w.shape[1], w.shape[2]
    alpha = g_matrix.shape[0]
    pairs, per_group = k * c_in, k // groups
    flat_w, flat_g, flat_out = w.reshape(-1), g_matrix.reshape(-1), out.reshape(-1)
    block = max(1, min(last_pair - first_pair, _PAIRS))
    taps = np.empty((r * r, block))  # taps[j, pair - first]
    half = np.empty((alpha * r, block))  # G w
    total = np.empty(block)  # one position of (G w) G^T
    source = np.empty(block, np.int64)
    for first in range(first_pair, last_pair, block):
        n = min(block, last_pair - first)
        gi, rest = divmod(first, c_in * per_group)
        c, o = divmod(rest, per_group)
        for i in range(n):  # the pair (gi * per_group + o) * c_in + c that out's element first + i holds
            source[i] = first + i if flip else (gi * per_group + o) * c_in + c
            o += 1
            if o == per_group:
                o, c = 0, c + 1
                if c == c_in:
                    c, gi = 0, gi + 1
        for j in range(r * r):
            tap = r * r - 1 - j if flip else j
            for i in range(n):
                taps[j, i] = flat_w[_at(source[i] * r * r + tap)]
        for p in range(alpha):
            for b in range(r):
                half[p * r + b, :n] = 0.0
                _add_scaled_rows(half[p * r + b, :n], flat_g, p * r, 1, taps, b, r, r)
        for p in range(alpha):
            for q in range(alpha):
                total[:n] = 0.0
                _add_scaled_rows(total[:n], flat_g, q * r, 1, half, p * r, 1, r)
                base = (p * alpha + q) * pairs + first
                for i in range(n):
                    flat_out[_at(base + i)] = total[i]


_PAIRS = 256
"""Weight pairs a step in :func:`weight_tiles`: its float64 scratch stays small (~100 KB),
where whole-layer arrays were fresh pages on every call (0.3-0.7 ms for 64 x 32 pairs)."""


@njit(cache=True, nogil=True, inline='always')
def _add_scaled_rows(acc, coefficients, c0, c_step, rows, r0, r_step, count):
    """acc[i] += coefficients[c0 + t*c_step] * rows[r0 + t*r_step, i] for t = 0 .. count-1 in
    that order (one float64 chain per i, from its value on entry; contiguous rows, so the loop
    over i vectorizes)."""
    for t in range(count):
        g = coefficients[c0 + t * c_step]
        row = rows[r0 + t * r_step]
        for i in range(acc.size):
            acc[i] += g * row[i]


@njit(cache=True, nogil=True)
def weight_gradient_from_tiles(m, a_t, out):
    """out[o, c] = A^T m[:, :, o, c] A in float64, rounded once: the weight gradient (K, C, r, r)
    from the summed products m (alpha, alpha, K, C), A^T = ``a_t`` (r, alpha); all
    C-contiguous (read flat). Each (o, c) pair is one chain per output in (p, then q) order,
    the pairs innermost (vectorized, as :func:`weight_tiles`)."""
    alpha, r = m.shape[0], a_t.shape[0]
    pairs = m.shape[2] * m.shape[3]
    flat_m, flat_a, flat_out = m.reshape(-1), a_t.reshape(-1), out.reshape(-1)
    rows = flat_m.reshape(alpha * alpha, pairs)
    half = np.empty((r * alpha, pairs))  # A^T m, promoted to float64
    for u in range(r):
        for q in range(alpha):
            acc = half[u * alpha + q]
            acc[:] = 0.0
            for p in range(alpha):
                a = flat_a[u * alpha + p]
                row = rows[p * alpha + q]
                for i in range(pairs):
                    acc[i] += a * np.float64(row[i])
    total = np.empty(pairs)
    for u in range(r):  # (A^T m) A
        for v in range(r):
            total[:] = 0.0
            _add_scaled_rows(total, flat_a, v * alpha, 1, half, u * alpha, 1, alpha)
            for i in range(pairs):
                flat_out[_at((i * r + u) * r + v)] = total[i]
