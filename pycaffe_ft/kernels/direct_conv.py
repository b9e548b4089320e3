"""Direct stride-1 convolution for layers with few input channels: the forward pass, and the
weight gradient of layers with few input values per output (LeNet's and CIFAR10-quick's conv1).

Forward: eight output columns are the lanes of a vector (:mod:`.simd`); a block of two output
rows of four output channels (six where each output sums many terms) is kept in registers, so
each input load feeds four to six fused multiply-adds and eight to twelve independent chains
hide the FMA latency. Every output is one multiply-add chain over (c, ky, kx) in that order,
the same at every position: equal input patches give equal sums, as with im2col (a later max
pooling breaks their ties as in Caffe). The outputs are written in place in NCHW with the
bias added, where im2col's GEMM result had to be copied into the top and the bias added in two
more passes. The last block of columns, rows or channels is shifted back to end at the edge:
the outputs it shares with the block before are written again with the same bits. With
AVX-512 at full rate, rows of 16 or more go sixteen columns a vector, and rows exactly eight
wide two rows a vector (:func:`_row_pairs`).

Weight gradient: dw[o, c, ky, kx] = sum over images and positions of dy[o] * x[c] shifted by
(ky, kx); lanes run along output rows, a block of three output channels by three taps is nine
vector sums (six loads feed nine fused multiply-adds; four channels by two taps, eight sums from
six loads, ran 4-10% slower on CIFAR10-quick's conv1 and as fast on LeNet's), each image's sums
added into a per-lane total, the lanes summed at the end. Every (channel, tap) is its own chain,
so the blocking does not change the bits. It reads dy in NCHW where im2col needed it copied to
(C, N*P) and a column buffer written. (Four outputs by three taps, 12 sums, ran out of AVX2's
registers: 1.7x slower; with AVX-512's 32 the wide path takes them, see
:func:`direct_weight_gradient`.) Each block's dy comes from memory once (one plane per channel, too
short for the hardware's stream prefetch to warm up), so the block before prefetches it, a
share per group of taps: one thread, alternated, CIFAR10-quick's conv1 58 -> 64% of the GEMM
peak (faster in 12 of 12 rounds), LeNet's 45 -> 55%, the same bits.

Images are the zero-padded planes (n, C, H + 2 ph, W + 2 pw) made by
:func:`~pycaffe_ft.kernels.im2col.pad_planes`; all arrays are flat float32.
"""
import numpy as np
from numba import njit

from .simd import WIDE, WIDE_AT_HALF_RATE, prefetch, vadd, vfma, vfull, vload, vramp, vrelu, vsplat, vstore, \
    vwhere_gt, vzero, wfull, wload, wload_rows, wramp, wsplat, wzero
from .tiered import await_ahead, ready

__all__ = ['direct_forward', 'forward_reference', 'direct_weight_gradient', 'weight_gradient_reference',
           'weight_gradient_reference_ahead', 'SIX_CHANNEL_TAPS']

SIX_CHANNEL_TAPS = 75
"""Above this many terms per output the forward keeps six output channels in a block, else
four (one thread: LeNet's conv2, 20 x 5 x 5 terms, 3.4 -> 2.8 ms per 64 images; its conv1, 25
terms, and CIFAR10-quick's, 75, ran 3-15% slower with six)."""


@njit(cache=True, nogil=True, inline='always')
def _store(full, y, d, acc, bias, use_bias, o, relu):
    """y[d:d + lanes] = acc (+ bias[o]: the sum first, then the bias, as Caffe adds it; then,
    with ``relu``, the ReLU that follows in place, as its own pass would apply it)."""
    out = vadd(acc, full(bias[o])) if use_bias else acc
    vstore(y, d, vrelu(out) if relu else out)


# The block functions take the vector operations (zero, load, splat, full) as arguments: eight
# lanes (vzero, vload, vsplat, vfull) or sixteen (wzero, wload, wsplat, wfull), the same chains.

@njit(cache=True, nogil=True, inline='always')
def _four_by_two(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w, wk0, taps, bias,
                 use_bias, y, d, out_plane, below, out_below, o, relu):
    """Outputs (o .. o+3) x (two vectors of rows) x (one vector of columns); src0/wk0/d: their
    first input, weight and output; the second vector's input and output ``below`` and
    ``out_below`` after the first's (a row: width_p and out_w; a pair of rows, see
    :func:`_load_pair`: twice those)."""
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = zero()
    for c in range(channels):
        for ky in range(kh):
            src = src0 + c * plane_p + ky * width_p
            wk = wk0 + (c * kh + ky) * kw
            for kx in range(kw):
                v, u = load(x, src + kx, width_p), load(x, src + below + kx, width_p)
                s = splat(w, wk + kx)
                a0, b0 = vfma(s, v, a0), vfma(s, u, b0)
                s = splat(w, wk + taps + kx)
                a1, b1 = vfma(s, v, a1), vfma(s, u, b1)
                s = splat(w, wk + 2 * taps + kx)
                a2, b2 = vfma(s, v, a2), vfma(s, u, b2)
                s = splat(w, wk + 3 * taps + kx)
                a3, b3 = vfma(s, v, a3), vfma(s, u, b3)
    for i, (first, second) in enumerate(((a0, b0), (a1, b1), (a2, b2), (a3, b3))):
        _store(full, y, d + i * out_plane, first, bias, use_bias, o + i, relu)
        _store(full, y, d + i * out_plane + out_below, second, bias, use_bias, o + i, relu)


@njit(cache=True, nogil=True, inline='always')
def _six_by_two(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w, wk0, taps, bias,
                use_bias, y, d, out_plane, below, out_below, o, relu):
    """:func:`_four_by_two` with six output channels (12 chains: as many as AVX2's 16 registers
    hold beside the two inputs and a weight). Written out apart because the accumulators are
    registers: Numba cannot vary their number; six in overlapping blocks for every layer was
    3-15% slower on 25-75 terms per output (see SIX_CHANNEL_TAPS)."""
    a0 = a1 = a2 = a3 = a4 = a5 = b0 = b1 = b2 = b3 = b4 = b5 = zero()
    for c in range(channels):
        for ky in range(kh):
            src = src0 + c * plane_p + ky * width_p
            wk = wk0 + (c * kh + ky) * kw
            for kx in range(kw):
                v, u = load(x, src + kx, width_p), load(x, src + below + kx, width_p)
                s = splat(w, wk + kx)
                a0, b0 = vfma(s, v, a0), vfma(s, u, b0)
                s = splat(w, wk + taps + kx)
                a1, b1 = vfma(s, v, a1), vfma(s, u, b1)
                s = splat(w, wk + 2 * taps + kx)
                a2, b2 = vfma(s, v, a2), vfma(s, u, b2)
                s = splat(w, wk + 3 * taps + kx)
                a3, b3 = vfma(s, v, a3), vfma(s, u, b3)
                s = splat(w, wk + 4 * taps + kx)
                a4, b4 = vfma(s, v, a4), vfma(s, u, b4)
                s = splat(w, wk + 5 * taps + kx)
                a5, b5 = vfma(s, v, a5), vfma(s, u, b5)
    for i, (first, second) in enumerate(((a0, b0), (a1, b1), (a2, b2), (a3, b3), (a4, b4), (a5, b5))):
        _store(full, y, d + i * out_plane, first, bias, use_bias, o + i, relu)
        _store(full, y, d + i * out_plane + out_below, second, bias, use_bias, o + i, relu)


@njit(cache=True, nogil=True, inline='always')
def _one_by_one(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w, wk0, bias, use_bias,
                y, d, o, relu):
    """One output channel, one row, one vector of columns (layers with fewer than 4 outputs
    or 2 rows)."""
    acc = zero()
    for c in range(channels):
        for ky in range(kh):
            src = src0 + c * plane_p + ky * width_p
            wk = wk0 + (c * kh + ky) * kw
            for kx in range(kw):
                acc = vfma(splat(w, wk + kx), load(x, src + kx, width_p), acc)
    _store(full, y, d, acc, bias, use_bias, o, relu)


def direct_forward(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, wide=WIDE,
                   relu=False):
    """y (num, outputs, height_p - kh + 1, width_p - kw + 1) = the correlation of the padded
    images x (num, channels, height_p, width_p) with w (outputs, channels, kh, kw), + bias[o]
    with ``use_bias``, through a ReLU (negative slope 0) with ``relu``. Needs
    width_p - kw + 1 >= 8.

    Kernel widths 5 and 3 run a version compiled with the width as a constant, so that the kx
    loop unrolls (one thread: LeNet's conv1 0.59 -> 0.45 ms, CIFAR10-quick's 7.3 -> 5.6 ms);
    each version compiles on its first call only. With ``wide`` (AVX-512) and output rows of
    16 or more, vectors of sixteen columns, the last one of a row shifted back to end at its
    edge (the same bits; one Sapphire Rapids core, alternated: CIFAR10-quick's conv1 5.3 -> 3.7
    ms). LeNet's conv1 (24 columns) took the narrow kernel while compiling the wide one beside
    the narrow one its conv2 needs cost 1.5 s of its cold start; since the worker compiles them
    (:mod:`.tiered`) it takes the wide one (Zen 5, one thread, in-net, alternated: 0.47-0.48 ->
    0.36-0.39 ms), but where sixteen lanes run at eight lanes' rate (:func:`_wide_rows`). Rows
    eight wide go two a sixteen-lane vector there (:func:`_row_pairs`)."""
    out_w = width_p - kw + 1
    if _row_pairs(wide, out_w, height_p - kh + 1, outputs):
        kernels = _PAIRS_FORWARD
    else:
        kernels = _WIDE_FORWARD if _wide_rows(wide, out_w) else _FORWARD
    if kw in kernels:
        kernel, args = kernels[kw], (x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu)
    else:
        kernel, args = kernels[None], (x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu)
    if ready(kernel, args):
        kernel(*args)
    else:
        forward_reference(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu)


def _wide_rows(wide, out_w):
    """Whether :func:`direct_forward` runs rows ``out_w`` wide in sixteen-lane vectors: with
    ``wide``, rows of at least 16, unless the CPU runs sixteen lanes at eight lanes' rate
    (:data:`~.simd.WIDE_AT_HALF_RATE`) and eight-lane vectors leave fewer lanes idle (the
    same bits: every lane is the same chain). LeNet's conv1 (24 columns, 64 images), one Zen 4
    thread: 468-472 us in sixteen lanes (the last vector shifted back by 8 columns), 397-399 in
    eight, and its conv2 runs that kernel already: one compile less at the cold start."""
    if not wide or out_w < 16:
        return False
    return not (WIDE_AT_HALF_RATE and -(-out_w // 8) * 8 < -(-out_w // 16) * 16)


def _row_pairs(wide, out_w, out_h, outputs):
    """Whether :func:`direct_forward` runs its rows two a sixteen-lane vector (:func:`_load_pair`):
    with ``wide`` at full rate (not :data:`~.simd.WIDE_AT_HALF_RATE`), rows exactly eight wide
    (two of them lie side by side in the output), blocks of four rows and four or more output
    channels (the same bits: every lane is the same chain). LeNet's conv2 (8 x 8 outputs, 50
    channels from 20, 64 images), one Emerald Rapids thread, alternated, with the max pooling
    after it: 2.67-2.76 ms in eight-lane rows, 1.62-1.67 ms in pairs."""
    return wide and not WIDE_AT_HALF_RATE and out_w == 8 and out_h >= 4 and outputs >= 4


@njit(cache=True, nogil=True)
def forward_reference(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu):
    """:func:`direct_forward` one output row's vector of eight columns at a time, each lane the
    same multiply-add chain (so the same bits): the reference of its blocked kernels, run while
    they compile in the background (:mod:`.tiered`; compiles in a fraction of their time)."""
    out_h, out_w = height_p - kh + 1, width_p - kw + 1
    plane_p, out_plane = height_p * width_p, out_h * out_w
    for n in range(num):
        for o in range(outputs):
            for r in range(out_h):
                x0 = 0
                while x0 < out_w:
                    start = min(x0, out_w - 8)
                    _one_by_one(vzero, _load8, vsplat, vfull, x, n * channels * plane_p + r * width_p + start, plane_p,
                                width_p, channels, kh, kw, w, o * channels * kh * kw, bias, use_bias, y,
                                (n * outputs + o) * out_plane + r * out_w + start, o, relu)
                    x0 = start + 8


@njit(cache=True, nogil=True, inline='always')
def _load8(x, i, width_p):
    """Eight columns of one row (the row stride unused)."""
    return vload(x, i)


@njit(cache=True, nogil=True, inline='always')
def _load16(x, i, width_p):
    """Sixteen columns of one row (the row stride unused)."""
    return wload(x, i)


@njit(cache=True, nogil=True, inline='always')
def _load_pair(x, i, width_p):
    """Eight columns of two rows, one under the other: the rows of an output vector that holds
    two rows eight wide (:func:`_row_pairs`)."""
    return wload_rows(x, i, width_p)


@njit(cache=True, nogil=True)
def _forward_width_5(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, vzero, _load8, vsplat, vfull, 8, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, 5, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_width_3(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, vzero, _load8, vsplat, vfull, 8, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, 3, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_any_width(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, vzero, _load8, vsplat, vfull, 8, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_width_5_wide(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load16, wsplat, wfull, 16, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, 5, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_width_3_wide(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load16, wsplat, wfull, 16, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, 3, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_any_width_wide(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load16, wsplat, wfull, 16, 1,
             x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_width_5_pairs(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load_pair, wsplat, wfull, 8, 2,
             x, num, channels, height_p, width_p, w, outputs, kh, 5, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_width_3_pairs(x, num, channels, height_p, width_p, w, outputs, kh, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load_pair, wsplat, wfull, 8, 2,
             x, num, channels, height_p, width_p, w, outputs, kh, 3, bias, use_bias, y, relu)


@njit(cache=True, nogil=True)
def _forward_any_width_pairs(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu):
    _forward(_six_by_two, _four_by_two, _one_by_one, wzero, _load_pair, wsplat, wfull, 8, 2,
             x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y, relu)


_FORWARD = {5: _forward_width_5, 3: _forward_width_3, None: _forward_any_width}
_WIDE_FORWARD = {5: _forward_width_5_wide, 3: _forward_width_3_wide, None: _forward_any_width_wide}
_PAIRS_FORWARD = {5: _forward_width_5_pairs, 3: _forward_width_3_pairs, None: _forward_any_width_pairs}


@njit(cache=True, nogil=True, inline='always')
def _forward(six_by_two, four_by_two, one_by_one, zero, load, splat, full, columns, pair, x, num, channels, height_p,
             width_p, w, outputs, kh, kw, bias, use_bias, y, relu):
    """The forward pass in blocks of :func:`_six_by_two`, :func:`_four_by_two` or
    :func:`_one_by_one`, taken as arguments (``six_by_two`` ...) so that Numba inlines them into
    each kernel rather than into this body first (see :mod:`pycaffe_ft.kernels`: LeNet's conv1
    forward kernel 1.66 -> 1.31 s to compile, the same machine code). A vector holds ``columns``
    columns of ``pair`` rows (1, or 2 for rows eight wide: ``load`` then :func:`_load_pair`);
    a block two such vectors of rows."""
    out_h, out_w = height_p - kh + 1, width_p - kw + 1
    plane_p, out_plane = height_p * width_p, out_h * out_w
    taps = channels * kh * kw
    block = 6 if taps > SIX_CHANNEL_TAPS and outputs >= 6 else 4
    blocked = outputs >= 4 and out_h >= 2 * pair
    rows = 2 * pair if blocked else pair
    below, out_below = pair * width_p, pair * out_w
    for n in range(num):
        image, out_base = n * channels * plane_p, n * outputs * out_plane
        row = 0
        while row < out_h:
            r = min(row, out_h - rows)
            x0 = 0
            while x0 < out_w:
                start = min(x0, out_w - columns)
                src0 = image + r * width_p + start
                o = 0
                while o < outputs:
                    if blocked:
                        oo = min(o, outputs - block)
                        d = out_base + oo * out_plane + r * out_w + start
                        if block == 6:
                            six_by_two(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w,
                                       oo * taps, taps, bias, use_bias, y, d, out_plane, below, out_below, oo, relu)
                        else:
                            four_by_two(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w,
                                        oo * taps, taps, bias, use_bias, y, d, out_plane, below, out_below, oo, relu)
                        o = oo + block
                    else:
                        one_by_one(zero, load, splat, full, x, src0, plane_p, width_p, channels, kh, kw, w,
                                   o * taps, bias, use_bias, y, out_base + o * out_plane + r * out_w + start, o,
                                   relu)
                        o += 1
                x0 = start + columns
            row = r + rows


@njit(cache=True, nogil=True, inline='always')
def _gradient_block(zero, load, lanes, x, dy, acc, ai, step, sa, sb, sc, d0, width_p, out_w, out_h, out_plane,
                    lane_index, overlap, ahead, ahead_end):
    """acc[ai + i * step + (0 | 1 | 2) * lanes ..] += the nine lane sums of 3 output channels x
    3 taps over one image (sa/sb/sc: the taps' first inputs, d0: the first dy element), vectors
    of ``lanes`` (8 or 16) columns. Where out_w is not a multiple of ``lanes`` the last block of
    a row starts at out_w - lanes and its lanes below ``overlap`` (counted in the block before)
    are masked out of dy. First it prefetches the cache lines of dy[ahead:ahead_end] (a share
    of the next block's)."""
    for at in range(ahead, ahead_end, 16):
        prefetch(dy, at)
    a0 = a1 = a2 = b0 = b1 = b2 = c0 = c1 = c2 = zero()
    z = zero()
    for yy in range(out_h):
        ra, rb, rc, d = sa + yy * width_p, sb + yy * width_p, sc + yy * width_p, d0 + yy * out_w
        x0 = 0
        while x0 < out_w:
            start = min(x0, out_w - lanes)
            u, v, w = load(x, ra + start), load(x, rb + start), load(x, rc + start)
            g0 = load(dy, d + start)
            g1 = load(dy, d + start + out_plane)
            g2 = load(dy, d + start + 2 * out_plane)
            if start != x0:
                g0, g1 = vwhere_gt(lane_index, overlap, g0, z), vwhere_gt(lane_index, overlap, g1, z)
                g2 = vwhere_gt(lane_index, overlap, g2, z)
            a0, b0, c0 = vfma(g0, u, a0), vfma(g0, v, b0), vfma(g0, w, c0)
            a1, b1, c1 = vfma(g1, u, a1), vfma(g1, v, b1), vfma(g1, w, c1)
            a2, b2, c2 = vfma(g2, u, a2), vfma(g2, v, b2), vfma(g2, w, c2)
            x0 = start + lanes
    for i, sums in enumerate(((a0, b0, c0), (a1, b1, c1), (a2, b2, c2))):
        for j in range(3):
            at = ai + i * step + lanes * j
            vstore(acc, at, vadd(load(acc, at), sums[j]))


@njit(cache=True, nogil=True, inline='always')
def _gradient_block_4(zero, load, lanes, x, dy, acc, ai, step, sa, sb, sc, d0, width_p, out_w, out_h, out_plane,
                      ahead, ahead_end):
    """:func:`_gradient_block` with 4 output channels (12 sums: the wide path, whose 32
    registers hold them; AVX2's 16 did not), for rows a multiple of ``lanes`` long (the wide
    path's condition: no vector shifted back, nothing masked)."""
    for at in range(ahead, ahead_end, 16):
        prefetch(dy, at)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = c0 = c1 = c2 = c3 = zero()
    for yy in range(out_h):
        ra, rb, rc, d = sa + yy * width_p, sb + yy * width_p, sc + yy * width_p, d0 + yy * out_w
        for start in range(0, out_w, lanes):
            u, v, w = load(x, ra + start), load(x, rb + start), load(x, rc + start)
            g0 = load(dy, d + start)
            g1 = load(dy, d + start + out_plane)
            g2 = load(dy, d + start + 2 * out_plane)
            g3 = load(dy, d + start + 3 * out_plane)
            a0, b0, c0 = vfma(g0, u, a0), vfma(g0, v, b0), vfma(g0, w, c0)
            a1, b1, c1 = vfma(g1, u, a1), vfma(g1, v, b1), vfma(g1, w, c1)
            a2, b2, c2 = vfma(g2, u, a2), vfma(g2, v, b2), vfma(g2, w, c2)
            a3, b3, c3 = vfma(g3, u, a3), vfma(g3, v, b3), vfma(g3, w, c3)
    for i, sums in enumerate(((a0, b0, c0), (a1, b1, c1), (a2, b2, c2), (a3, b3, c3))):
        for j in range(3):
            at = ai + i * step + lanes * j
            vstore(acc, at, vadd(load(acc, at), sums[j]))


@njit(cache=True, nogil=True, inline='always')
def _add_lane_sums(dy, d, count, sums, at):
    """sums[at:at + 8] += dy[d:d + count] summed by lane (element i into lane i % 8)."""
    total = vload(sums, at)
    whole = count // 8 * 8
    for i in range(0, whole, 8):
        total = vadd(total, vload(dy, d + i))
    vstore(sums, at, total)
    for i in range(whole, count):
        sums[at + i % 8] += dy[d + i]


@njit(cache=True, nogil=True, inline='always')
def _sum_lanes(v, at, lanes):
    """The ``lanes`` (8 or 16) floats v[at:at + lanes] added pairwise."""
    eight = ((v[at] + v[at + 1]) + (v[at + 2] + v[at + 3])) + ((v[at + 4] + v[at + 5]) + (v[at + 6] + v[at + 7]))
    if lanes == 8:
        return eight
    return eight + (((v[at + 8] + v[at + 9]) + (v[at + 10] + v[at + 11]))
                    + ((v[at + 12] + v[at + 13]) + (v[at + 14] + v[at + 15])))


def direct_weight_gradient(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw, db, wide=WIDE):
    """dw (outputs, channels, kh, kw) = the weight gradient of :func:`direct_forward` for dy
    (num, outputs, out_h, out_w), overwritten; db (outputs), unless empty, = the bias gradient
    (dy summed over images and positions), each block of output channels summed while its dy
    is in cache (CIFAR10-quick's conv1: the bias gradient by NumPy took 1.2 of 10.3 ms). Needs
    outputs >= 3, channels * kh * kw >= 3, out_w >= 8. Taps (c, ky, kx) are grouped by three in
    that order (CIFAR10-quick's 75: 25 groups); the last block of channels and the last group
    of taps are shifted back to end at the edge; their repeated sums are computed and dropped.
    With ``wide`` (AVX-512), output rows a multiple of 16 and 4 outputs or more, vectors of
    sixteen columns in blocks of 4 output channels x 3 taps: sixteen lane sums, so other bits
    than eight (one Sapphire Rapids core, alternated, CIFAR10-quick's conv1: 7.0 -> 5.4 ms;
    with 3-channel blocks 5.9; LeNet's 24-column rows, a third of the last vector masked, ran
    as fast as eight lanes and stay there). The result depends on the shapes and ``wide`` only."""
    kernel = _weight_gradient_wide if _wide_gradient(wide, width_p, kw, outputs) else _weight_gradient_narrow
    args = (x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw, db)
    if ready(kernel, args):
        kernel(*args)
    else:
        weight_gradient_reference(*args, wide=wide)


def weight_gradient_reference(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw, db, wide=WIDE):
    """:func:`direct_weight_gradient`'s bits one (output channel, tap) chain at a time, without
    its blocks and prefetches: its reference, run while it compiles in the background
    (:mod:`.tiered`; compiles in a fraction of its time)."""
    reference = _wide_reference if _wide_gradient(wide, width_p, kw, outputs) else _narrow_reference
    await_ahead(reference)
    reference(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw)
    if db.size:
        out_plane = (height_p - kh + 1) * (width_p - kw + 1)
        db[:] = _bias_gradient_reference(dy[:num * outputs * out_plane].reshape(num, outputs, out_plane))


def _bias_gradient_reference(dy):
    """The blocked kernel's bias gradient of dy (num, outputs, positions), in NumPy: each
    output's values summed in eight lanes from +0 (value i of an image into lane i % 8, the
    images in turn; :func:`_add_lane_sums`), then the lanes pairwise (:func:`_sum_lanes`). A
    cumulative sum is sequential: each lane's sum is the kernel's chain. (Numba took 1 s to
    compile these loops, half the reference's compile, which the first backward waits for.)"""
    num, outputs, positions = dy.shape
    rows = -(-positions // 8)
    lanes = np.zeros((outputs, 1 + num * rows, 8), np.float32)  # a first row of +0: the sums' start
    lanes[:, 1:].reshape(outputs, num, rows * 8)[:, :, :positions] = dy.transpose(1, 0, 2)
    v = np.cumsum(lanes, axis=1)[:, -1]
    return ((v[:, 0] + v[:, 1]) + (v[:, 2] + v[:, 3])) + ((v[:, 4] + v[:, 5]) + (v[:, 6] + v[:, 7]))


def weight_gradient_reference_ahead(width_p, kw, outputs, wide=WIDE):
    """:func:`weight_gradient_reference`'s compile for this geometry, for :func:`.tiered.ahead`
    (the call's types: flat float32 arrays and integers)."""
    flat = np.empty(0, np.float32)
    return [(_wide_reference if _wide_gradient(wide, width_p, kw, outputs) else _narrow_reference,
             (flat, 0, 0, 0, 0, flat, 0, 0, 0, flat))]


def _wide_gradient(wide, width_p, kw, outputs):
    return wide and (width_p - kw + 1) % 16 == 0 and outputs >= 4


@njit(cache=True, nogil=True)
def _weight_gradient_narrow(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw, db):
    _weight_gradient(_gradient_block, _gradient_block_4, vzero, vload, vfull,
                     vramp(np.float32(0.0), np.float32(1.0)), 8, 3, x, num, channels, height_p, width_p, dy,
                     outputs, kh, kw, dw, db)


@njit(cache=True, nogil=True)
def _weight_gradient_wide(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw, db):
    _weight_gradient(_gradient_block, _gradient_block_4, wzero, wload, wfull,
                     wramp(np.float32(0.0), np.float32(1.0)), 16, 4, x, num, channels, height_p, width_p, dy,
                     outputs, kh, kw, dw, db)


@njit(cache=True, nogil=True)
def _narrow_reference(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw):
    _weight_gradient_reference(vzero, vload, vfull, vramp(np.float32(0.0), np.float32(1.0)), 8, x, num, channels,
                               height_p, width_p, dy, outputs, kh, kw, dw)


@njit(cache=True, nogil=True)
def _wide_reference(x, num, channels, height_p, width_p, dy, outputs, kh, kw, dw):
    _weight_gradient_reference(wzero, wload, wfull, wramp(np.float32(0.0), np.float32(1.0)), 16, x, num, channels,
                               height_p, width_p, dy, outputs, kh, kw, dw)


@njit(cache=True, nogil=True, inline='always')
def _weight_gradient_reference(zero, load, full, lane_index, lanes, x, num, channels, height_p, width_p, dy, outputs,
                               kh, kw, dw):
    """:func:`_weight_gradient`'s weight gradient's bits (see :func:`weight_gradient_reference`)."""
    out_h, out_w = height_p - kh + 1, width_p - kw + 1
    plane_p, out_plane = height_p * width_p, out_h * out_w
    overlap = full(np.float32((lanes - out_w % lanes) % lanes) - np.float32(0.5))
    taps = channels * kh * kw
    z = zero()
    total_lanes = np.empty(lanes, np.float32)
    for o in range(outputs):
        for t in range(taps):
            tap = t // (kh * kw) * plane_p + t % (kh * kw) // kw * width_p + t % kw
            total = zero()
            for n in range(num):
                sums = zero()
                for yy in range(out_h):
                    r, d = n * channels * plane_p + tap + yy * width_p, (n * outputs + o) * out_plane + yy * out_w
                    x0 = 0
                    while x0 < out_w:
                        start = min(x0, out_w - lanes)
                        g = load(dy, d + start)
                        if start != x0:
                            g = vwhere_gt(lane_index, overlap, g, z)
                        sums = vfma(g, load(x, r + start), sums)
                        x0 = start + lanes
                total = vadd(total, sums)
            vstore(total_lanes, 0, total)
            dw[o * taps + t] = _sum_lanes(total_lanes, 0, lanes)


@njit(cache=True, nogil=True, inline='always')
def _weight_gradient(gradient_block, gradient_block_4, zero, load, full, lane_index, lanes, outs, x, num, channels,
                     height_p, width_p, dy, outputs, kh, kw, dw, db):
    """The weight gradient in blocks of :func:`_gradient_block` (3 output channels) or
    :func:`_gradient_block_4` (4), taken as arguments for the compile time (as
    :func:`_forward`'s blocks)."""
    out_h, out_w = height_p - kh + 1, width_p - kw + 1
    plane_p, out_plane = height_p * width_p, out_h * out_w
    overlap = full(np.float32((lanes - out_w % lanes) % lanes) - np.float32(0.5))
    taps = channels * kh * kw
    groups, blocks = (taps + 2) // 3, (outputs + outs - 1) // outs
    step = groups * 3 * lanes  # one output channel's sums: 3 taps x lanes per group
    acc = np.zeros(blocks * outs * step, np.float32)
    bias_sums = np.zeros(outputs * 8, np.float32)
    tap_at = np.empty(taps, np.int64)  # where tap t (in (c, ky, kx) order) of image 0 reads first
    for t in range(taps):
        tap_at[t] = t // (kh * kw) * plane_p + t % (kh * kw) // kw * width_p + t % kw
    share = -(-outs * out_plane // (16 * groups)) * 16  # of the next block's dy to prefetch per group
    for n in range(num):
        image = n * channels * plane_p
        for block in range(blocks):
            o = min(outs * block, outputs - outs)
            d0 = (n * outputs + o) * out_plane
            if block + 1 < blocks:
                following = (n * outputs + min(outs * block + outs, outputs - outs)) * out_plane
            else:
                following = (n + 1) * outputs * out_plane  # the next image's first block
            end = min(following + outs * out_plane, dy.size)
            for group in range(groups):
                first = min(3 * group, taps - 3)  # taps first .. first + 2, in (c, ky, kx) order
                ahead = min(following + group * share, end)
                sa, sb, sc = image + tap_at[first], image + tap_at[first + 1], image + tap_at[first + 2]
                ai = outs * block * step + group * 3 * lanes
                if outs == 4:
                    gradient_block_4(zero, load, lanes, x, dy, acc, ai, step, sa, sb, sc, d0, width_p, out_w,
                                     out_h, out_plane, ahead, min(ahead + share, end))
                else:
                    gradient_block(zero, load, lanes, x, dy, acc, ai, step, sa, sb, sc, d0, width_p, out_w,
                                   out_h, out_plane, lane_index, overlap, ahead, min(ahead + share, end))
            for oc in range(outs * block if db.size else o + outs, o + outs):  # the block's channels not counted before
                _add_lane_sums(dy, (n * outputs + oc) * out_plane, out_plane, bias_sums, oc * 8)
    for oc in range(db.size):
        db[oc] = _sum_lanes(bias_sums, oc * 8, 8)
    for o in range(outputs):
        block = min(o // outs, blocks - 1)
        for t in range(taps):
            group = min(t // 3, groups - 1)
            at = ((outs * block + o - min(outs * block, outputs - outs)) * step + group * 3 * lanes
                  + (t - min(3 * group, taps - 3)) * lanes)
            dw[o * taps + t] = _sum_lanes(acc, at, lanes)
