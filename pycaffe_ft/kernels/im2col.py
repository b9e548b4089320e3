"""im2col / col2im for 2-D convolution (pad, stride, dilation per dimension), batched over N.

``im`` is (N, C, H, W); ``col`` is (N, C*kh*kw, out_h*out_w), rows ordered (c, ki, kj) as in
Caffe so that weights (num_output, C, kh, kw) reshaped to (num_output, C*kh*kw) multiply it.
"""
from numba import njit


@njit(cache=True)
def im2col(im, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, col):
    n_img, channels, height, width = im.shape
    for n in range(n_img):
        for c in range(channels):
            for ki in range(kh):
                for kj in range(kw):
                    row = (c * kh + ki) * kw + kj
                    for oy in range(out_h):
                        y = oy * sh - ph + ki * dh
                        base = oy * out_w
                        if y < 0 or y >= height:
                            for ox in range(out_w):
                                col[n, row, base + ox] = 0.0
                        else:
                            for ox in range(out_w):
                                x = ox * sw - pw + kj * dw
                                if x >= 0 and x < width:
                                    col[n, row, base + ox] = im[n, c, y, x]
                                else:
                                    col[n, row, base + ox] = 0.0


@njit(cache=True)
def col2im(col, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, im):
    """Sum the columns back into ``im`` (overwritten)."""
    n_img, channels, height, width = im.shape
    im[...] = 0.0
    for n in range(n_img):
        for c in range(channels):
            for ki in range(kh):
                for kj in range(kw):
                    row = (c * kh + ki) * kw + kj
                    for oy in range(out_h):
                        y = oy * sh - ph + ki * dh
                        if y < 0 or y >= height:
                            continue
                        base = oy * out_w
                        for ox in range(out_w):
                            x = ox * sw - pw + kj * dw
                            if x >= 0 and x < width:
                                im[n, c, y, x] += col[n, row, base + ox]
