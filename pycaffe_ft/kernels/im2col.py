"""im2col / col2im for 2-D convolution (pad, stride, dilation per dimension), batched.

``im`` is (N, C, H, W). ``col`` is (C*kh*kw, N*out_h*out_w): rows ordered (c, ki, kj) as in
Caffe, so weights (num_output, C, kh, kw) reshaped to (num_output, C*kh*kw) multiply it in one
GEMM for the whole batch; column ``n*out_h*out_w + p`` belongs to image ``n``.
"""
from numba import njit


@njit(cache=True)
def im2col(im, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, col):
    n_img, channels, height, width = im.shape
    plane = out_h * out_w
    for c in range(channels):
        for ki in range(kh):
            for kj in range(kw):
                row = (c * kh + ki) * kw + kj
                for n in range(n_img):
                    off = n * plane
                    for oy in range(out_h):
                        y = oy * sh - ph + ki * dh
                        base = off + oy * out_w
                        if y < 0 or y >= height:
                            for ox in range(out_w):
                                col[row, base + ox] = 0.0
                        else:
                            for ox in range(out_w):
                                x = ox * sw - pw + kj * dw
                                if x >= 0 and x < width:
                                    col[row, base + ox] = im[n, c, y, x]
                                else:
                                    col[row, base + ox] = 0.0


@njit(cache=True)
def col2im(col, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, im):
    """Sum the columns back into ``im`` (overwritten)."""
    n_img, channels, height, width = im.shape
    plane = out_h * out_w
    im[...] = 0.0
    for c in range(channels):
        for ki in range(kh):
            for kj in range(kw):
                row = (c * kh + ki) * kw + kj
                for n in range(n_img):
                    off = n * plane
                    for oy in range(out_h):
                        y = oy * sh - ph + ki * dh
                        if y < 0 or y >= height:
                            continue
                        base = off + oy * out_w
                        for ox in range(out_w):
                            x = ox * sw - pw + kj * dw
                            if x >= 0 and x < width:
                                im[n, c, y, x] += col[row, base + ox]
