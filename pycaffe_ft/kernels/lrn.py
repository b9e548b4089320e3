"""Local response normalisation across channels, Caffe's CPU algorithm in float32:
scale = k + alpha/n * (sum of squares over a window of n channels starting (n-1)/2 before),
kept as a running window sum over channels (add the head, subtract the tail),
y = x * scale^-beta. Arrays are flat (N, C, P) C-contiguous buffers, walked one channel plane
at a time; the kernels never allocate (work buffers come from the caller) and release the GIL:
layers run image ranges on several threads.
"""
import numpy as np
from numba import njit

from . import numpy_references
from .tiered import call

ROOT_BETAS = (0.75, 0.5)
"""The betas whose s^-beta :func:`_times_neg_pow` takes through square roots; a pass with another
beta runs powf, whose bits NumPy's power need not give: it has no NumPy reference."""


def lrn_across_forward(src, n_img, channels, plane, size, alpha, beta, k, sc, dst):
    """src (x), sc (scale), dst (y): flat (n_img, channels, plane) float32; alpha, beta, k
    float32. While the kernel compiles in the background (:mod:`.tiered`), by its NumPy
    reference (:data:`ROOT_BETAS`)."""
    _tiered(_lrn_across_forward, numpy_references.lrn_across_forward, beta,
            (src, n_img, channels, plane, size, alpha, beta, k, sc, dst))


def lrn_across_backward(xs, ys, sc, gs, n_img, channels, plane, size, beta, ratio_value, out, ratio, accum):
    """out (dx) = gs (dy) sc^-beta - ratio_value xs * sum over the window of gs ys / sc, with
    ratio_value = 2 alpha beta / n (float32); flat (n_img, channels, plane) arrays. Work
    buffers: ``ratio`` (channels*plane) and ``accum`` (plane). While the kernel compiles in the
    background, by its NumPy reference (:data:`ROOT_BETAS`)."""
    _tiered(_lrn_across_backward, numpy_references.lrn_across_backward, beta,
            (xs, ys, sc, gs, n_img, channels, plane, size, beta, ratio_value, out, ratio, accum))


def _tiered(kernel, reference, beta, args):
    """``kernel(*args)``; while it compiles in the background, ``reference(*args)`` where
    ``beta`` is one of :data:`ROOT_BETAS` (others wait for the kernel)."""
    if beta in ROOT_BETAS:
        call(kernel, reference, *args)
    else:
        kernel(*args)


# The kernels take Numba's 'numpy' error model: under its default ('python') every float
# division checks for a zero divisor and raises, a branch per element that kept their loops
# scalar (AlexNet's norm1, 16 x 96 x 55 x 55: the y = x s^-beta pass alone 15.5 -> 1.5 ms); a
# zero scale now gives inf and NaN, as in Caffe.
@njit(cache=True, nogil=True, error_model='numpy')
def _times_neg_pow(a, sc, out, lo, hi, beta):
    """out[i] = a[i] * sc[i]^-beta for lo <= i < hi, in float32; 0.75 and 0.5 (the usual
    betas) through square roots, which vectorise (within an ulp or two of powf): one loop per
    kind, so that the branch on beta is not taken per element."""
    if beta == 0.75:
        for i in range(lo, hi):
            r = np.sqrt(sc[np.uint64(i)])
            out[np.uint64(i)] = a[np.uint64(i)] * (np.float32(1.0) / (r * np.sqrt(r)))
    elif beta == 0.5:
        for i in range(lo, hi):
            out[np.uint64(i)] = a[np.uint64(i)] * (np.float32(1.0) / np.sqrt(sc[np.uint64(i)]))
    else:
        for i in range(lo, hi):
            out[np.uint64(i)] = a[np.uint64(i)] * sc[np.uint64(i)] ** (-beta)


@njit(cache=True, nogil=True, error_model='numpy')
def _lrn_across_forward(src, n_img, channels, plane, size, alpha, beta, k, sc, dst):
    """:func:`lrn_across_forward`."""
    pre = (size - 1) // 2
    aos = alpha / np.float32(size)
    for n in range(n_img):
        base = n * channels * plane
        # channel 0: k + aos * x^2 over channels [0, size - pre), in Caffe's order
        for p in range(plane):
            sc[np.uint64(base + p)] = k
        for c in range(0, size - pre):
            if c < channels:
                o = base + c * plane
                for p in range(plane):
                    v = src[np.uint64(o + p)]
                    sc[np.uint64(base + p)] += aos * (v * v)
        for c in range(1, channels):
            o = base + c * plane
            head = c + size - 1 - pre  # channel entering the window
            tail = c - 1 - pre  # channel leaving it
            for p in range(plane):
                sc[np.uint64(o + p)] = sc[np.uint64(o - plane + p)]
            if head < channels:
                h = base + head * plane
                for p in range(plane):
                    v = src[np.uint64(h + p)]
                    sc[np.uint64(o + p)] += aos * (v * v)
            if tail >= 0:
                t = base + tail * plane
                for p in range(plane):
                    v = src[np.uint64(t + p)]
                    sc[np.uint64(o + p)] += -aos * (v * v)
        _times_neg_pow(src, sc, dst, base, base + channels * plane, beta)


@njit(cache=True, nogil=True, error_model='numpy')
def _lrn_across_backward(xs, ys, sc, gs, n_img, channels, plane, size, beta, ratio_value, out,
                         ratio, accum):
    """:func:`lrn_across_backward`."""
    post = size - (size + 1) // 2  # channels after c whose window holds c
    for n in range(n_img):
        base = n * channels * plane
        for i in range(channels * plane):
            k = np.uint64(base + i)
            ratio[np.uint64(i)] = gs[k] * ys[k] / sc[k]
        _times_neg_pow(gs, sc, out, base, base + channels * plane, beta)
        accum[:] = 0.0
        for c in range(-post, size - 1 - post):
            if 0 <= c < channels:
                for p in range(plane):
                    accum[np.uint64(p)] += ratio[np.uint64(c * plane + p)]
        for c in range(channels):
            head = c + size - 1 - post
            if head < channels:
                for p in range(plane):
                    accum[np.uint64(p)] += ratio[np.uint64(head * plane + p)]
            o = base + c * plane
            for p in range(plane):
                out[np.uint64(o + p)] += -ratio_value * (xs[np.uint64(o + p)] * accum[np.uint64(p)])
            tail = c - post
            if tail >= 0:
                for p in range(plane):
                    accum[np.uint64(p)] += -ratio[np.uint64(tail * plane + p)]
