"""Max and average pooling over (N, C, H, W), Caffe's window and divisor rules."""
from numba import njit


@njit(cache=True)
def max_pool_forward(x, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask):
    """y and mask (flat argmax index into H*W, as float) are (N, C, out_h, out_w).
    The first maximum in row-major window order wins (strict >)."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                hstart = oy * sh - ph
                hend = min(hstart + kh, height)
                hstart = max(hstart, 0)
                for ox in range(out_w):
                    wstart = ox * sw - pw
                    wend = min(wstart + kw, width)
                    wstart = max(wstart, 0)
                    best = -3.4028234663852886e38
                    best_idx = -1
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            v = x[n, c, yy, xx]
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


@njit(cache=True)
def ave_pool_forward(x, kh, kw, ph, pw, sh, sw, out_h, out_w, y):
    """Divisor = window clipped to the padded extent, before clipping to the image."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    hstart = oy * sh - ph
                    wstart = ox * sw - pw
                    hend = min(hstart + kh, height + ph)
                    wend = min(wstart + kw, width + pw)
                    size = (hend - hstart) * (wend - wstart)
                    hstart = max(hstart, 0)
                    wstart = max(wstart, 0)
                    hend = min(hend, height)
                    wend = min(wend, width)
                    s = 0.0
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
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
                    hstart = oy * sh - ph
                    wstart = ox * sw - pw
                    hend = min(hstart + kh, height + ph)
                    wend = min(wstart + kw, width + pw)
                    size = (hend - hstart) * (wend - wstart)
                    hstart = max(hstart, 0)
                    wstart = max(wstart, 0)
                    hend = min(hend, height)
                    wend = min(wend, width)
                    g = dy[n, c, oy, ox] / size
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            dx[n, c, yy, xx] += g
