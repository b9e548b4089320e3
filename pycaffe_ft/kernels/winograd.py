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
def _taps2(src, s, pair, odd, c):
    """Taps 0 and 1 of channel c: tap b at s + (b // 2)*pair + (b % 2)*odd."""
    return src[_at(s + c)], src[_at(s + odd + c)]


@njit(cache=True, nogil=True, inline='always')
def _taps4(src, s, pair, odd, c):
    x0, x1 = _taps2(src, s, pair, odd, c)
    x2, x3 = _taps2(src, s + pair, pair, odd, c)
    return x0, x1, x2, x3


@njit(cache=True, nogil=True, inline='always')
def _taps6(src, s, pair, odd, c):
    x0, x1, x2, x3 = _taps4(src, s, pair, odd, c)
    x4, x5 = _taps2(src, s + 2 * pair, pair, odd, c)
    return x0, x1, x2, x3, x4, x5


@njit(cache=True, nogil=True, inline='always')
def _input_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(src, s, pair, odd, c)
    dst[_at(d + c)] = x0 + x4 + _1_5 * (x3 - x1) - np.float32(2.0) * x2
    dst[_at(d + ds + c)] = x4 - x1 + np.float32(0.5) * x2 + _2_5 * x3
    dst[_at(d + 2 * ds + c)] = x1 + x4 - _2_5 * x2 + np.float32(0.5) * x3
    dst[_at(d + 3 * ds + c)] = x4 - x2 + np.float32(2.0) * (x3 - x1)
    dst[_at(d + 4 * ds + c)] = x4 - x2 + np.float32(0.5) * (x1 - x3)
    dst[_at(d + 5 * ds + c)] = x1 + x5 + _1_5 * (x4 - x2) - np.float32(2.0) * x3


@njit(cache=True, nogil=True, inline='always')
def _input_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(src, s, pair, odd, c)
    dst[_at(d + c)] = x2 - x0
    dst[_at(d + ds + c)] = x1 + x2
    dst[_at(d + 2 * ds + c)] = x2 - x1
    dst[_at(d + 3 * ds + c)] = x3 - x1


@njit(cache=True, nogil=True, inline='always')
def _diff_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(src, s, pair, odd, c)
    dst[_at(d + c)] = x0
    dst[_at(d + ds + c)] = _THIRD * (x0 + x1)
    dst[_at(d + 2 * ds + c)] = _THIRD * (x1 - x0)
    dst[_at(d + 3 * ds + c)] = -_FIFTEENTH * (np.float32(16.0) * x0 + np.float32(8.0) * x1)
    dst[_at(d + 4 * ds + c)] = _FIFTEENTH * (x0 - np.float32(2.0) * x1)
    dst[_at(d + 5 * ds + c)] = x1


@njit(cache=True, nogil=True, inline='always')
def _diff_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1 = _taps2(src, s, pair, odd, c)
    dst[_at(d + c)] = -x0
    dst[_at(d + ds + c)] = np.float32(0.5) * (x0 + x1)
    dst[_at(d + 2 * ds + c)] = np.float32(0.5) * (x0 - x1)
    dst[_at(d + 3 * ds + c)] = x1


@njit(cache=True, nogil=True, inline='always')
def _output_6(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3, x4, x5 = _taps6(src, s, pair, odd, c)
    dst[_at(d + c)] = x0 + x1 + x2 + x3 + x4
    dst[_at(d + ds + c)] = x1 - x2 + np.float32(0.5) * x3 - np.float32(2.0) * x4 + x5


@njit(cache=True, nogil=True, inline='always')
def _output_4(src, s, pair, odd, dst, d, ds, c):
    x0, x1, x2, x3 = _taps4(src, s, pair, odd, c)
    dst[_at(d + c)] = x0 + x1 + x2
    dst[_at(d + ds + c)] = x1 - x2 + x3


_BLOCK = 16  # channels per unrolled block: a fixed trip count that the compiler turns into vectors


@njit(cache=True, nogil=True, inline='always')
def _over_channels(one, src, s, pair, odd, dst, d, ds, channels):
    full = channels - channels % _BLOCK
    for c0 in range(0, full, _BLOCK):
        for c in range(c0, c0 + _BLOCK):
            one(src, s, pair, odd, dst, d, ds, c)
    for c in range(full, channels):
        one(src, s, pair, odd, dst, d, ds, c)


@njit(cache=True, nogil=True, inline='always')
def _line(kind, src, s, ss, dst, d, ds, channels, odd=-1):
    """dst[d + k*ds + c] = sum_b M[k, b] * src[s + b*ss + c] for every channel c, M the
    transform named by ``kind``; with ``odd`` >= 0, tap b is read at
    s + (b // 2)*ss + (b % 2)*odd instead (images split into even and odd columns)."""
    if odd < 0:
        odd = ss
        ss = 2 * ss
    if kind == INPUT_6:
        _over_channels(_input_6, src, s, ss, odd, dst, d, ds, channels)
    elif kind == INPUT_4:
        _over_channels(_input_4, src, s, ss, odd, dst, d, ds, channels)
    elif kind == DIFF_6:
        _over_channels(_diff_6, src, s, ss, odd, dst, d, ds, channels)
    elif kind == DIFF_4:
        _over_channels(_diff_4, src, s, ss, odd, dst, d, ds, channels)
    elif kind == OUTPUT_6:
        _over_channels(_output_6, src, s, ss, odd, dst, d, ds, channels)
    else:
        _over_channels(_output_4, src, s, ss, odd, dst, d, ds, channels)


@njit(cache=True, nogil=True)
def to_channels_last(src, num, channels, height, width, top, left, padded_h, padded_w, dst):
    """dst = src (N, C, H, W) placed at row ``top``, column ``left`` of a zero image
    (N, padded_h, padded_w, C) whose columns are stored split, the even ones first, then the
    odd ones: dst[n, y, x % 2, x // 2, c] (``padded_w`` even). Parts beyond it are dropped."""
    plane = height * width
    half_w = padded_w // 2
    for i in range(num * padded_h * padded_w * channels):
        dst[_at(i)] = 0.0
    for n in range(num):
        for y in range(max(0, -top), min(height, padded_h - top)):
            row = (n * padded_h + y + top) * padded_w
            for x in range(max(0, -left), min(width, padded_w - left)):
                col = x + left
                d0 = (row + (col % 2) * half_w + col // 2) * channels
                s0 = n * channels * plane + y * width + x
                for c in range(channels):
                    dst[_at(d0 + c)] = src[_at(s0 + c * plane)]


@njit(cache=True, nogil=True)
def from_channels_last(src, num, channels, src_h, src_w, height, width, bias, use_bias, dst):
    """dst (N, C, H, W) = the top-left H x W of src (N, src_h, src_w, C) (columns split as
    :func:`to_channels_last` stores them), + bias[c]."""
    half_w = src_w // 2
    for n in range(num):
        for c in range(channels):
            b = bias[c] if use_bias else np.float32(0.0)
            for y in range(height):
                d0 = ((n * channels + c) * height + y) * width
                s0 = (n * src_h + y) * src_w * channels + c
                for x in range(0, width - 1, 2):
                    dst[_at(d0 + x)] = src[_at(s0 + x // 2 * channels)] + b
                    dst[_at(d0 + x + 1)] = src[_at(s0 + (half_w + x // 2) * channels)] + b
                if width % 2:
                    dst[_at(d0 + width - 1)] = src[_at(s0 + (width - 1) // 2 * channels)] + b


@njit(cache=True, nogil=True)
def tile_transform(src, num, padded_h, padded_w, channels, kind, alpha, window, tiles_h,
                   tiles_w, rows, out):
    """out[p*alpha + q, tile, c] = (M @ window @ M.T)[p, q] for every tile's window (rows and
    columns from ``i*2``, ``j*2``) of ``src`` (N, padded_h, padded_w, C), columns split as
    :func:`to_channels_last` stores them; M = ``kind``'s (alpha, window) matrix. Scratch
    ``rows`` >= padded_h*alpha*tiles_w*C."""
    tiles = tiles_h * tiles_w
    total = num * tiles
    run = tiles_w * channels  # one tile row of one transformed position: contiguous
    for n in range(num):
        # rows[y, q, j, c] = sum_b M[q, b] * src[n, y, 2j + b, c]
        for y in range(padded_h):
            _line(kind, src, (n * padded_h + y) * padded_w * channels, channels, rows,
                  y * alpha * run, run, run, padded_w // 2 * channels)
        # out[p*alpha + q, (n, i, j), c] = sum_l M[p, l] * rows[2i + l, q, j, c]
        for i in range(tiles_h):
            for q in range(alpha):
                _line(kind, rows, (2 * i * alpha + q) * run, alpha * run,
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
                      alpha * total * channels, half, q * run, alpha * run, run)
            # dst[n, 2i + u, v, j, c] = sum_q A^T[v, q] * half[u, q, j, c]
            for u in range(2):
                _line(kind, half, u * alpha * run, run, dst,
                      (n * 2 * tiles_h + 2 * i + u) * out_w * channels, run, run)
