"""Local response normalisation across channels: scale = k + alpha/n * sum of squares over a
window of n channels (starting (n-1)/2 before), y = x * scale^-beta."""
from numba import njit


@njit(cache=True)
def lrn_across_forward(x, size, alpha, beta, k, scale, y):
    """x, scale, y: (N, C, P)."""
    n_img, channels, plane = x.shape
    pre = (size - 1) // 2
    a = alpha / size
    for n in range(n_img):
        for p in range(plane):
            for c in range(channels):
                s = 0.0
                lo = max(c - pre, 0)
                hi = min(c - pre + size, channels)
                for j in range(lo, hi):
                    v = x[n, j, p]
                    s += v * v
                sc = k + a * s
                scale[n, c, p] = sc
                y[n, c, p] = x[n, c, p] * sc ** (-beta)


@njit(cache=True)
def lrn_across_backward(x, y, scale, dy, size, alpha, beta, dx):
    n_img, channels, plane = x.shape
    pre = (size - 1) // 2
    post = size - pre - 1
    ratio = 2.0 * alpha * beta / size
    for n in range(n_img):
        for p in range(plane):
            for c in range(channels):
                acc = 0.0
                lo = max(c - post, 0)
                hi = min(c + pre + 1, channels)
                for j in range(lo, hi):
                    acc += dy[n, j, p] * y[n, j, p] / scale[n, j, p]
                dx[n, c, p] = dy[n, c, p] * scale[n, c, p] ** (-beta) - ratio * x[n, c, p] * acc
