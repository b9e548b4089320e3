"""im2col / col2im for 2-D convolution (pad, stride, dilation per dimension), batched, and the
layout moves around the convolution GEMMs.

``im`` is (N, C, H, W). ``col`` is (C*kh*kw, N*out_h*out_w): rows ordered (c, ki, kj) as in
Caffe, so weights (num_output, C, kh, kw) reshaped to (num_output, C*kh*kw) multiply it in one
GEMM for the whole chunk; column ``n*out_h*out_w + p`` belongs to image ``n``.

Speed: arrays must be C-contiguous; they are walked flat with unsigned offsets (no negative-
index wraparound test), and padding is done once per image (a zero-bordered copy) so that the
inner loops are plain copies with no bounds tests. All kernels release the GIL: layers run
them on several threads, one image range each.
"""
import numpy as np
from numba import njit


@njit(cache=True, nogil=True, inline='always')
def _u(i):
    return np.uint64(i)


@njit(cache=True, nogil=True)
def _padded(im, ph, pw):
    """im (N, C, H, W) with a zero border of ph rows and pw columns (im itself if none)."""
    if ph == 0 and pw == 0:
        return im
    n_img, channels, height, width = im.shape
    hp, wp = height + 2 * ph, width + 2 * pw
    out = np.zeros((n_img, channels, hp, wp), im.dtype)
    src = im.reshape(-1)
    dst = out.reshape(-1)
    for plane in range(n_img * channels):
        for y in range(height):
            s0 = (plane * height + y) * width
            d0 = (plane * hp + y + ph) * wp + pw
            for x in range(width):
                dst[_u(d0 + x)] = src[_u(s0 + x)]
    return out


@njit(cache=True, nogil=True)
def im2col(im, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, col):
    """The image is copied into a zero-padded buffer first, so every row of the column buffer
    is plain copies with no bounds tests (several times faster for small images)."""
    padded = _padded(im, ph, pw)
    n_img, channels, hp, wp = padded.shape
    plane = out_h * out_w
    ncols = col.shape[1]
    src = padded.reshape(-1)
    dst = col.reshape(-1)
    for n in range(n_img):
        for c in range(channels):
            in_base = (n * channels + c) * hp * wp
            for ki in range(kh):
                for kj in range(kw):
                    row = ((c * kh + ki) * kw + kj) * ncols + n * plane
                    for oy in range(out_h):
                        s0 = in_base + (oy * sh + ki * dh) * wp + kj * dw
                        d0 = row + oy * out_w
                        if sw == 1:
                            for ox in range(out_w):
                                dst[_u(d0 + ox)] = src[_u(s0 + ox)]
                        else:
                            for ox in range(out_w):
                                dst[_u(d0 + ox)] = src[_u(s0 + ox * sw)]


@njit(cache=True, nogil=True)
def col2im(col, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, im):
    """Sum the columns back into ``im`` (overwritten), through a zero-padded buffer whose
    border is dropped at the end; each element gets its terms in Caffe's order."""
    n_img, channels, height, width = im.shape
    hp, wp = height + 2 * ph, width + 2 * pw
    plane = out_h * out_w
    ncols = col.shape[1]
    src = col.reshape(-1)
    acc = np.empty(channels * hp * wp, im.dtype) if (ph or pw) else im.reshape(-1)
    out = im.reshape(-1)
    for n in range(n_img):
        base = 0 if (ph or pw) else n * channels * hp * wp
        for i in range(channels * hp * wp):
            acc[_u(base + i)] = 0.0
        for c in range(channels):
            out_base = base + c * hp * wp
            for ki in range(kh):
                for kj in range(kw):
                    row = ((c * kh + ki) * kw + kj) * ncols + n * plane
                    for oy in range(out_h):
                        d0 = out_base + (oy * sh + ki * dh) * wp + kj * dw
                        s0 = row + oy * out_w
                        if sw == 1:
                            for ox in range(out_w):
                                acc[_u(d0 + ox)] += src[_u(s0 + ox)]
                        else:
                            for ox in range(out_w):
                                acc[_u(d0 + ox * sw)] += src[_u(s0 + ox)]
        if ph or pw:
            for c in range(channels):
                for y in range(height):
                    s0 = (c * hp + y + ph) * wp + pw
                    d0 = ((n * channels + c) * height + y) * width
                    for x in range(width):
                        out[_u(d0 + x)] = acc[_u(s0 + x)]


@njit(cache=True, nogil=True)
def channel_major_to_images(cm, bias, use_bias, y):
    """y (n, C, P) = cm (C, n*P) regrouped by image, plus bias[c] if ``use_bias``."""
    n_img, channels, plane = y.shape
    ncols = cm.shape[1]
    src = cm.reshape(-1)
    dst = y.reshape(-1)
    for n in range(n_img):
        for c in range(channels):
            s0 = c * ncols + n * plane
            d0 = (n * channels + c) * plane
            if use_bias:
                b = bias[c]
                for p in range(plane):
                    dst[_u(d0 + p)] = src[_u(s0 + p)] + b
            else:
                for p in range(plane):
                    dst[_u(d0 + p)] = src[_u(s0 + p)]


@njit(cache=True, nogil=True)
def images_to_channel_major(x, cm):
    """cm (C, n*P) = x (n, C, P) with the images side by side per channel."""
    n_img, channels, plane = x.shape
    ncols = cm.shape[1]
    src = x.reshape(-1)
    dst = cm.reshape(-1)
    for n in range(n_img):
        for c in range(channels):
            s0 = (n * channels + c) * plane
            d0 = c * ncols + n * plane
            for p in range(plane):
                dst[_u(d0 + p)] = src[_u(s0 + p)]
