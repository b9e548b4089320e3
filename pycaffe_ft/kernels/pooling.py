"""Max and average pooling over (N, C, H, W), Caffe's window and divisor rules."""
import numpy as np
from numba import njit


@njit(cache=True)
def max_pool_forward(x, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask):
    """y and mask (flat argmax index into H*W, as float) are (N, C, out_h, out_w).
    The first maximum in row-major window order wins (strict >), from -FLT_MAX as in Caffe."""
    n_img, channels, height, width = x.shape
    lowest = np.float32(-3.4028234663852886e38)
    for n in range(n_img):
        for c in range(channels):
            plane = x[n, c]
            for oy in range(out_h):
                hstart = oy * sh - ph
                hend = min(hstart + kh, height)
                hstart = max(hstart, 0)
                for ox in range(out_w):
                    wstart = ox * sw - pw
                    wend = min(wstart + kw, width)
                    wstart = max(wstart, 0)
                    best = lowest
                    best_idx = -1
                    for yy in range(hstart, hend):
                        row = plane[yy]
                        for xx in range(wstart, wend):
                            v = row[xx]
                            if v > best:
                                best = v
                                best_idx = yy * width + xx
                    y[n, c, oy, ox] = best
                    mask[n, c, oy, ox] = best_idx


@njit(cache=True)
def max_pool_backward(dy, mask, dx):
    """dx (overwritten) receives each dy at its argmax."""
    n_img, channels, height, width = dx.shape
    out_h, out_w = dy.shape[2], dy.shape[3]
    dx[...] = 0.0
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    idx = int(mask[n, c, oy, ox])
                    if idx >= 0:
                        dx[n, c, idx // width, idx % width] += dy[n, c, oy, ox]


@njit(cache=True, inline='always')
def _ave_window(oy, ox, kh, kw, ph, pw, sh, sw, height, width):
    """Window bounds clipped to the image, and Caffe's divisor: the window clipped to the
    padded extent (padding counts, beyond it does not)."""
    hstart = oy * sh - ph
    wstart = ox * sw - pw
    hend = min(hstart + kh, height + ph)
    wend = min(wstart + kw, width + pw)
    size = (hend - hstart) * (wend - wstart)
    return max(hstart, 0), min(hend, height), max(wstart, 0), min(wend, width), size


@njit(cache=True)
def ave_pool_forward(x, kh, kw, ph, pw, sh, sw, out_h, out_w, y):
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    h0, h1, w0, w1, size = _ave_window(oy, ox, kh, kw, ph, pw, sh, sw, height, width)
                    s = 0.0
                    for yy in range(h0, h1):
                        for xx in range(w0, w1):
                            s += x[n, c, yy, xx]
                    y[n, c, oy, ox] = s / size


@njit(cache=True)
def ave_pool_backward(dy, kh, kw, ph, pw, sh, sw, dx):
    n_img, channels, height, width = dx.shape
    out_h, out_w = dy.shape[2], dy.shape[3]
    dx[...] = 0.0
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    h0, h1, w0, w1, size = _ave_window(oy, ox, kh, kw, ph, pw, sh, sw, height, width)
                    g = dy[n, c, oy, ox] / size
                    for yy in range(h0, h1):
                        for xx in range(w0, w1):
                            dx[n, c, yy, xx] += g


@njit(cache=True, inline='always')
def _unpadded_window(oy, ox, kh, kw, sh, sw, height, width):
    """Window bounds without padding (STOCHASTIC pooling takes none)."""
    hstart, wstart = oy * sh, ox * sw
    return hstart, min(hstart + kh, height), wstart, min(wstart + kw, width)


@njit(cache=True)
def stochastic_pool_train(x, kh, kw, sh, sw, out_h, out_w, u, y, mask):
    """Sample one position per window with probability x / sum(x) (x >= 0) using the uniform
    draws ``u`` (same shape as y); y gets its value, mask its flat index."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    hstart, hend, wstart, wend = _unpadded_window(oy, ox, kh, kw, sh, sw, height, width)
                    total = 0.0
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            total += x[n, c, yy, xx]
                    threshold = u[n, c, oy, ox] * total
                    acc = 0.0
                    chosen = hstart * width + wstart
                    value = x[n, c, hstart, wstart]
                    found = False
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            acc += x[n, c, yy, xx]
                            if not found and acc >= threshold:
                                chosen = yy * width + xx
                                value = x[n, c, yy, xx]
                                found = True
                    y[n, c, oy, ox] = value
                    mask[n, c, oy, ox] = chosen


@njit(cache=True)
def stochastic_pool_test(x, kh, kw, sh, sw, out_h, out_w, y):
    """Probability-weighted average: sum(x^2) / sum(x) per window."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    hstart, hend, wstart, wend = _unpadded_window(oy, ox, kh, kw, sh, sw, height, width)
                    s = 1.17549435e-38
                    sq = 0.0
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            v = x[n, c, yy, xx]
                            s += v
                            sq += v * v
                    y[n, c, oy, ox] = sq / s
