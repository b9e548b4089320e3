"""Local response normalisation across channels, Caffe's CPU algorithm in float32:
scale = k + alpha/n * (sum of squares over a window of n channels starting (n-1)/2 before),
kept as a running window sum over channels (add the head, subtract the tail),
y = x * scale^-beta. Arrays (N, C, P) are C-contiguous and walked one channel plane at a time
(vectorised along P). Kernels release the GIL: layers run image ranges on several threads.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline='always')
def _u(i):
    return np.uint64(i)


@njit(cache=True, nogil=True, inline='always')
def _neg_pow(s, beta):
    """s^-beta in float32; 0.75 and 0.5 (the usual betas) through square roots, which
    vectorise (within an ulp or two of powf)."""
    if beta == 0.75:
        r = np.sqrt(s)
        return np.float32(1.0) / (r * np.sqrt(r))
    if beta == 0.5:
        return np.float32(1.0) / np.sqrt(s)
    return s ** (-beta)


@njit(cache=True, nogil=True)
def lrn_across_forward(x, size, alpha, beta, k, scale, y):
    """x, scale, y: (N, C, P) float32; alpha, beta, k float32."""
    n_img, channels, plane = x.shape
    pre = (size - 1) // 2
    aos = alpha / np.float32(size)
    src = x.reshape(-1)
    sc = scale.reshape(-1)
    dst = y.reshape(-1)
    for n in range(n_img):
        base = n * channels * plane
        # channel 0: k + aos * x^2 over channels [0, size - pre), in Caffe's order
        for p in range(plane):
            sc[_u(base + p)] = k
        for c in range(0, size - pre):
            if c < channels:
                o = base + c * plane
                for p in range(plane):
                    v = src[_u(o + p)]
                    sc[_u(base + p)] += aos * (v * v)
        for c in range(1, channels):
            o = base + c * plane
            head = c + size - 1 - pre  # channel entering the window
            tail = c - 1 - pre  # channel leaving it
            for p in range(plane):
                sc[_u(o + p)] = sc[_u(o - plane + p)]
            if head < channels:
                h = base + head * plane
                for p in range(plane):
                    v = src[_u(h + p)]
                    sc[_u(o + p)] += aos * (v * v)
            if tail >= 0:
                t = base + tail * plane
                for p in range(plane):
                    v = src[_u(t + p)]
                    sc[_u(o + p)] += -aos * (v * v)
        for i in range(base, base + channels * plane):
            dst[_u(i)] = _neg_pow(sc[_u(i)], beta) * src[_u(i)]


@njit(cache=True, nogil=True)
def lrn_across_backward(x, y, scale, dy, size, beta, ratio_value, dx):
    """dx = dy scale^-beta - ratio_value x * sum over the window of dy y / scale, with
    ratio_value = 2 alpha beta / n (float32)."""
    n_img, channels, plane = x.shape
    post = size - (size + 1) // 2  # channels after c whose window holds c
    xs = x.reshape(-1)
    ys = y.reshape(-1)
    sc = scale.reshape(-1)
    gs = dy.reshape(-1)
    out = dx.reshape(-1)
    ratio = np.empty(channels * plane, np.float32)
    accum = np.empty(plane, np.float32)
    for n in range(n_img):
        base = n * channels * plane
        for i in range(channels * plane):
            k = _u(base + i)
            ratio[_u(i)] = gs[k] * ys[k] / sc[k]
            out[k] = gs[k] * _neg_pow(sc[k], beta)
        accum[:] = 0.0
        for c in range(-post, size - 1 - post):
            if 0 <= c < channels:
                for p in range(plane):
                    accum[_u(p)] += ratio[_u(c * plane + p)]
        for c in range(channels):
            head = c + size - 1 - post
            if head < channels:
                for p in range(plane):
                    accum[_u(p)] += ratio[_u(head * plane + p)]
            o = base + c * plane
            for p in range(plane):
                out[_u(o + p)] += -ratio_value * (xs[_u(o + p)] * accum[_u(p)])
            tail = c - post
            if tail >= 0:
                for p in range(plane):
                    accum[_u(p)] += -ratio[_u(tail * plane + p)]
