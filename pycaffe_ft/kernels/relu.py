"""ReLU without a negative slope, one pass each way over flat float32 arrays (Caffe's
arithmetic: max(x, 0) forward, dy * (x > 0) backward, signed zeros included)."""
import numpy as np
from numba import njit

from . import numpy_references
from .tiered import call

__all__ = ['relu_forward', 'relu_backward', 'relu_forward_kernel', 'relu_backward_kernel']


def relu_forward(x, y):
    """y = ReLU(x) by :func:`relu_forward_kernel`, or by its NumPy reference while the kernel
    compiles (:mod:`.tiered`)."""
    call(relu_forward_kernel, numpy_references.relu_forward, x, y)


def relu_backward(x, dy, dx):
    """dx = dy where x > 0 (else dy * 0) by :func:`relu_backward_kernel`, or by its NumPy
    reference while the kernel compiles."""
    call(relu_backward_kernel, numpy_references.relu_backward, x, dy, dx)


@njit(cache=True, nogil=True)
def relu_forward_kernel(x, y):
    """y = max(x, 0) as np.maximum(x, 0) gives it: x where x > 0 or x is a NaN, else +0."""
    for i in range(x.size):
        v = x[i]
        y[i] = v if v > 0 or v != v else np.float32(0.0)


@njit(cache=True, nogil=True)
def relu_backward_kernel(x, dy, dx):
    """dx = dy * (1 if x > 0 else 0)."""
    for i in range(x.size):
        dx[i] = dy[i] * (np.float32(1.0) if x[i] > 0 else np.float32(0.0))
