"""One chunk of images of the im2col backward whose products run in batched_gemm, whole in one
kernel call: bias sums, weight gradient, bottom diff and col2im.

A layer calling it releases and takes back the GIL once a chunk instead of five or six times.
At two threads each taking is a chance to find the GIL held by the other thread, and a thread
that waits for it sleeps; waking it costs 30-50 us on a virtual machine (an interrupt to its
halted virtual CPU). (A forward made this way ran LeNet's conv2 at two threads in 1.3 ms call
by call, 1.1 in one call a chunk, as fast as the direct kernel, which keeps it.)

Arrays are flat float32; images (n, C, H, W); columns (C*kh*kw, n*out_h*out_w) as in
:mod:`.im2col`; the weights (O, C*kh*kw). ``gemm`` is
:func:`~.small_gemm.batched_gemm_function` and ``lower`` :func:`~.im2col.columns_function`, called
at their addresses (:mod:`.c_functions`).
"""
import numpy as np
from numba import njit, types

from .im2col import call_columns, columns_function_ahead
from .small_gemm import batched_gemm_function_ahead, call_batched_gemm

__all__ = ['backward_chunk', 'backward_chunk_ahead']


@njit(cache=True, nogil=True)
def backward_chunk(x, dy, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, weights, outputs,
                   need_w, lanes, w_part, need_b, bias_part, down, dx, cols, dy_rows, dy_cm, gemm, lower):
    """For n images and their top diff dy (n, O, out_h, out_w):

    - with ``need_b``, bias_part (O) = dy summed over images and positions (in float64);
    - with ``need_w``, w_part (K, lanes) = im2col(x) @ dy position-major (its channels padded
      with zeros to ``lanes``): the weight gradient transposed, one chain of fused
      multiply-adds over the positions in order per element;
    - with ``down``, dx (overwritten) = col2im(weights.T @ dy), Caffe's order of terms.

    x and dx are the images with their zero borders, if the convolution pads (height and
    width include them; the caller pads x and crops dx). ``cols`` (K * positions),
    ``dy_rows`` (positions * lanes) and ``dy_cm`` (O * positions) are scratch."""
    plane = out_h * out_w
    positions = n * plane
    k = channels * kh * kw
    if need_b:
        for o in range(outputs):
            total = 0.0
            for i in range(n):
                at = (i * outputs + o) * plane
                for p in range(plane):
                    total += dy[at + p]
            bias_part[o] = total
    if need_w:
        for i in range(n):
            for p in range(plane):
                row = (i * plane + p) * lanes
                for o in range(outputs):
                    dy_rows[row + o] = dy[(i * outputs + o) * plane + p]
                for o in range(outputs, lanes):
                    dy_rows[row + o] = 0.0
        call_columns(lower, x, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, positions, True)
        call_batched_gemm(gemm, cols, 0, 0, positions, 1, dy_rows, 0, 0, lanes, w_part, 0, 0, lanes, 1, k, positions,
                          lanes)
    if down:
        for o in range(outputs):
            for i in range(n):
                at, to = (i * outputs + o) * plane, o * positions + i * plane
                for p in range(plane):
                    dy_cm[to + p] = dy[at + p]
        call_batched_gemm(gemm, weights, 0, 0, 1, k, dy_cm, 0, 0, positions, cols, 0, 0, positions, 1, k, outputs,
                          positions)
        call_columns(lower, dx, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, positions,
                     False)


def backward_chunk_ahead(sw, out_w):
    """The compiles a first :func:`backward_chunk` call needs (its own, for the call's types,
    and its C functions'), for :func:`.tiered.ahead`."""
    flat, count = np.empty(0, np.float32), 0
    args = (flat, flat, count) + (count,) * 11 + (flat, count, True, count, flat, True, flat, True, flat, flat, flat,
                                                  flat, types.intp, types.intp)
    return [(backward_chunk, args)] + columns_function_ahead(sw, out_w) + batched_gemm_function_ahead()
