"""Eltwise SUM of two bottoms in one pass over flat float32 arrays, with NumPy's arithmetic."""
import numpy as np
from numba import njit

_ZERO = np.float32(0.0)


@njit(cache=True, nogil=True)
def weighted_sum(a, b, ca, cb, y, relu):
    """y = a * ca + b * cb (each product and the sum rounded to float32, as NumPy's passes
    give them; a product by 1 is exact), through a ReLU (negative slope 0) with ``relu``.
    y may be a or b."""
    if relu:
        for i in range(y.size):
            v = a[i] * ca + b[i] * cb
            y[i] = v if v > 0 or v != v else _ZERO
    else:
        for i in range(y.size):
            y[i] = a[i] * ca + b[i] * cb
