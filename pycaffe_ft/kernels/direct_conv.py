"""Direct stride-1 convolution (forward) for layers with few input values per output (C*kh*kw
small: LeNet's conv1, 1 x 5 x 5; CIFAR10-quick's, 3 x 5 x 5). The products take as long as
im2col + GEMM's, but the outputs are written in place in NCHW with the bias added, where the
GEMM's (channels, images x positions) result had to be copied into the top and the bias added
in two more passes (LeNet's conv1 forward: 2.4 -> 1.5 ms on one thread). The weight gradient stays im2col + GEMM (a
direct reduction measured 3-5x slower).

Eight output columns are the lanes of a vector (:mod:`.simd`), four output channels at a time,
so each input load feeds four fused multiply-adds. Every output is one multiply-add chain over
(c, ky, kx) in that order, the same at every position: equal input patches give equal sums,
as with im2col (a later max pooling breaks their ties as in Caffe). Images are the zero-padded
planes (n, C, H + 2 ph, W + 2 pw) made by :func:`~pycaffe_ft.kernels.im2col.pad_planes`.
"""
from numba import njit

from .simd import vadd, vfma, vfull, vload, vsplat, vstore, vzero

__all__ = ['direct_forward']


@njit(cache=True, nogil=True, inline='always')
def _store(y, d, acc, bias, use_bias, o):
    """y[d:d+8] = acc (+ bias[o]: the sum first, then the bias, as Caffe adds it)."""
    vstore(y, d, vadd(acc, vfull(bias[o])) if use_bias else acc)


@njit(cache=True, nogil=True, inline='always')
def _four_channels(x, image, channels, plane_p, width_p, kh, kw, w, o, taps, bias, use_bias, y,
                   out_base, out_plane, out_w, row, x0):
    """Outputs (o .. o+3, row, x0 .. x0+7) of one image."""
    a0 = a1 = a2 = a3 = vzero()
    for c in range(channels):
        for ky in range(kh):
            src = image + c * plane_p + (row + ky) * width_p + x0
            wk = (o * channels + c) * kh * kw + ky * kw
            for kx in range(kw):
                v = vload(x, src + kx)
                a0 = vfma(vsplat(w, wk + kx), v, a0)
                a1 = vfma(vsplat(w, wk + taps + kx), v, a1)
                a2 = vfma(vsplat(w, wk + 2 * taps + kx), v, a2)
                a3 = vfma(vsplat(w, wk + 3 * taps + kx), v, a3)
    d = out_base + o * out_plane + row * out_w + x0
    _store(y, d, a0, bias, use_bias, o)
    _store(y, d + out_plane, a1, bias, use_bias, o + 1)
    _store(y, d + 2 * out_plane, a2, bias, use_bias, o + 2)
    _store(y, d + 3 * out_plane, a3, bias, use_bias, o + 3)


@njit(cache=True, nogil=True, inline='always')
def _one_channel(x, image, channels, plane_p, width_p, kh, kw, w, o, bias, use_bias, y, out_base,
                 out_plane, out_w, row, x0):
    acc = vzero()
    for c in range(channels):
        for ky in range(kh):
            src = image + c * plane_p + (row + ky) * width_p + x0
            wk = (o * channels + c) * kh * kw + ky * kw
            for kx in range(kw):
                acc = vfma(vsplat(w, wk + kx), vload(x, src + kx), acc)
    _store(y, out_base + o * out_plane + row * out_w + x0, acc, bias, use_bias, o)


@njit(cache=True, nogil=True)
def direct_forward(x, num, channels, height_p, width_p, w, outputs, kh, kw, bias, use_bias, y):
    """y (num, outputs, height_p - kh + 1, width_p - kw + 1) = the correlation of the padded
    images x (num, channels, height_p, width_p) with w (outputs, channels, kh, kw), + bias[o]
    with ``use_bias``; flat float32 arrays. Needs width_p - kw + 1 >= 8: the last block of a
    row starts 8 from its end (overlapping columns are written again with the same bits)."""
    out_h, out_w = height_p - kh + 1, width_p - kw + 1
    plane_p, out_plane = height_p * width_p, out_h * out_w
    taps = channels * kh * kw
    for n in range(num):
        image = n * channels * plane_p
        out_base = n * outputs * out_plane
        for row in range(out_h):
            x0 = 0
            while x0 < out_w:
                start = min(x0, out_w - 8)
                o = 0
                while o + 4 <= outputs:
                    _four_channels(x, image, channels, plane_p, width_p, kh, kw, w, o, taps, bias,
                                   use_bias, y, out_base, out_plane, out_w, row, start)
                    o += 4
                while o < outputs:
                    _one_channel(x, image, channels, plane_p, width_p, kh, kw, w, o, bias, use_bias,
                                 y, out_base, out_plane, out_w, row, start)
                    o += 1
                x0 = start + 8
