"""Per-channel maps and sums over arrays laid out (outer, channels, inner), flat float32:
BatchNorm's and Scale's passes in one sweep each, with NumPy's arithmetic.

Row r of such an array is its ``inner`` values at (r // channels, r % channels); the maps take
a range of rows (any split over threads gives the same bits), the sums a range of channels.
Each map rounds to float32 after every operation, as the NumPy expressions it replaces did
(no fused multiply-add: Numba does not contract without fastmath), so the bits are those of
``(x - shift) * factor`` and ``x * scale + bias``; where the layers' NumPy code computed in
float64 (BatchNorm's batch statistics and backward, the parameter gradients), so do these, the
sums in another order (float64: below float32's rounding in all but rare ties).
"""
import numpy as np
from numba import njit

from .simd import vadd, vfull, vload, vmul, vrelu, vstore, vsub

__all__ = ['subtract_multiply', 'multiply_add', 'channel_moments', 'normalized_backward',
           'scale_backward']

_ZERO = np.float32(0.0)


@njit(cache=True, nogil=True, inline='always')
def _relu(v):
    """max(v, 0) as np.maximum(v, 0) gives it: v where v > 0 or v is a NaN, else +0."""
    return v if v > 0 or v != v else _ZERO


@njit(cache=True, nogil=True, inline='always')
def _put(y, keep, i, v, relu, keeping):
    """Store the vector v at i of y (through a ReLU with ``relu``) and, with ``keeping``, of keep."""
    if keeping:
        vstore(keep, i, v)
    vstore(y, i, vrelu(v) if relu else v)


# The last values of a row (fewer than eight) are done by a function of their own, not inlined:
# with the same loop written after the vector loop, LLVM compiled that vector loop ten times slower.

@njit(cache=True, nogil=True)
def _subtract_multiply_tail(x, y, keep, i, end, a, b, relu, keeping):
    while i < end:
        v = (x[i] - a) * b
        if keeping:
            keep[i] = v
        y[i] = _relu(v) if relu else v
        i += 1


@njit(cache=True, nogil=True)
def _multiply_add_tail(x, y, keep, i, end, s, b, use_bias, relu, keeping):
    while i < end:
        v = x[i]
        if keeping:
            keep[i] = v
        v = v * s + b if use_bias else v * s
        y[i] = _relu(v) if relu else v
        i += 1


@njit(cache=True, nogil=True)
def subtract_multiply(x, y, keep, lo, hi, channels, inner, shift, factor, relu, keeping):
    """Rows lo..hi: y = (x - shift[c]) * factor[c], through a ReLU with ``relu``; with
    ``keeping`` also keep = that value before the ReLU (a copy the layer's backward reads).
    In place (y is x) allowed."""
    for r in range(lo, hi):
        c = r % channels
        a, b = shift[c], factor[c]
        va, vb = vfull(a), vfull(b)
        i, end = r * inner, (r + 1) * inner
        while i + 8 <= end:
            _put(y, keep, i, vmul(vsub(vload(x, i), va), vb), relu, keeping)
            i += 8
        _subtract_multiply_tail(x, y, keep, i, end, a, b, relu, keeping)


@njit(cache=True, nogil=True)
def multiply_add(x, y, keep, lo, hi, channels, inner, scale, bias, use_bias, relu, keeping):
    """Rows lo..hi: y = x * scale[c] (+ bias[c] with ``use_bias``), through a ReLU with
    ``relu``; with ``keeping`` also keep = x (the input, for a layer run in place). In place
    allowed."""
    for r in range(lo, hi):
        c = r % channels
        s = scale[c]
        b = bias[c] if use_bias else _ZERO
        vs, vb = vfull(s), vfull(b)
        i, end = r * inner, (r + 1) * inner
        while i + 8 <= end:
            v = vload(x, i)
            if keeping:
                vstore(keep, i, v)
            _put(y, keep, i, vadd(vmul(v, vs), vb) if use_bias else vmul(v, vs), relu, False)
            i += 8
        _multiply_add_tail(x, y, keep, i, end, s, b, use_bias, relu, keeping)


# Sums over one row, in float64, free to add in any order (``reassoc``: LLVM keeps several
# running sums in vectors); nothing else is computed under that flag.

@njit(cache=True, nogil=True, fastmath={'reassoc'})
def _row_sum(x):
    s = 0.0
    for i in range(x.size):
        s += np.float64(x[i])
    return s


@njit(cache=True, nogil=True, fastmath={'reassoc'})
def _row_squares(x, m):
    """sum of (x - m) ** 2."""
    s = 0.0
    for i in range(x.size):
        d = np.float64(x[i]) - m
        s += d * d
    return s


@njit(cache=True, nogil=True, fastmath={'reassoc'})
def _row_sums(dy, x):
    """(sum of dy, sum of dy * x)."""
    s = t = 0.0
    for i in range(dy.size):
        g = np.float64(dy[i])
        s += g
        t += g * np.float64(x[i])
    return s, t


@njit(cache=True, nogil=True)
def channel_moments(x, outer, channels, inner, lo, hi, mean, var):
    """Channels lo..hi: mean[c] and var[c] (biased: divided by outer * inner) of x's values
    of channel c, in float64, the variance from the mean's deviations (two passes)."""
    count = outer * inner
    for c in range(lo, hi):
        s = 0.0
        for n in range(outer):
            start = (n * channels + c) * inner
            s += _row_sum(x[start:start + inner])
        m = s / count
        q = 0.0
        for n in range(outer):
            start = (n * channels + c) * inner
            q += _row_squares(x[start:start + inner], m)
        mean[c] = m
        var[c] = q / count


@njit(cache=True, nogil=True)
def normalized_backward(dy, y, dx, outer, channels, inner, lo, hi, inv_std):
    """Channels lo..hi of BatchNorm's backward with batch statistics, in float64:
    dx = (dy - mean(dy) - mean(dy * y) * y) * inv_std[c], y the normalized output."""
    count = outer * inner
    for c in range(lo, hi):
        s = t = 0.0
        for n in range(outer):
            start = (n * channels + c) * inner
            a, b = _row_sums(dy[start:start + inner], y[start:start + inner])
            s += a
            t += b
        mean_dy, mean_dy_y = s / count, t / count
        f = np.float64(inv_std[c])
        for n in range(outer):
            start = (n * channels + c) * inner
            g, v, out = dy[start:start + inner], y[start:start + inner], dx[start:start + inner]
            for i in range(inner):
                out[i] = np.float32((np.float64(g[i]) - mean_dy - mean_dy_y * np.float64(v[i])) * f)


@njit(cache=True, nogil=True)
def scale_backward(dy, x, dx, outer, channels, inner, lo, hi, scale, scale_diff, bias_diff, need_scale,
                   need_bias, down):
    """Channels lo..hi of Scale's backward: with ``need_bias`` bias_diff[c] += sum(dy), with
    ``need_scale`` scale_diff[c] += sum(dy * x) (sums in float64, added to the float32 diffs
    in float64 and rounded once), with ``down`` dx = dy * scale[c]. dx may be dy."""
    for c in range(lo, hi):
        s = t = 0.0
        k = scale[c]
        for n in range(outer):
            start = (n * channels + c) * inner
            g = dy[start:start + inner]
            if need_scale:
                a, b = _row_sums(g, x[start:start + inner])
                s += a
                t += b
            elif need_bias:
                s += _row_sum(g)
            if down:
                out = dx[start:start + inner]
                for i in range(inner):
                    out[i] = g[i] * k
        if need_bias:
            bias_diff[c] = np.float32(np.float64(bias_diff[c]) + s)
        if need_scale:
            scale_diff[c] = np.float32(np.float64(scale_diff[c]) + t)
