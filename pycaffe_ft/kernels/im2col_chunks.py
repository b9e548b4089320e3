"""One chunk of images of an im2col convolution whose products run in batched_gemm, whole in
one kernel call: the forward (im2col, W times the columns, the top with bias and ReLU) and the
backward (bias sums, weight gradient, bottom diff and col2im).

A layer calling these releases and takes back the GIL once a chunk instead of five or six
times. At two threads each taking is a chance to find the GIL held by the other thread, and a
thread that waits for it sleeps; waking it costs 30-50 us on a virtual machine (an interrupt to
its halted virtual CPU). LeNet's conv2 at two threads, im2col + batched_gemm call by call:
forward 1.3 ms, slower than the direct kernel's 1.1, though faster at one thread.

Arrays are flat float32; images (n, C, H, W); columns (C*kh*kw, n*out_h*out_w) as in
:mod:`.im2col`; the weights (O, C*kh*kw).
"""
import numpy as np
from numba import njit

from .im2col import _columns, _vector_columns, crop_planes, pad_planes
from .small_gemm import batched_gemm

__all__ = ['forward_chunk', 'backward_chunk']


@njit(cache=True, nogil=True)
def _lower(images, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, to_columns):
    """:func:`~.im2col.columns` (im2col, or col2im with ``to_columns`` False) of n images."""
    positions = n * out_h * out_w
    if sw == 1 and out_w % 8 == 0:
        _vector_columns(images, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, positions,
                        to_columns)
    else:
        _columns(images, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, positions,
                 to_columns)


@njit(cache=True, nogil=True)
def _padded(x, n, channels, height, width, ph, pw, buffer):
    """x, or its planes with a zero border written into ``buffer``."""
    if ph == 0 and pw == 0:
        return x
    pad_planes(x, n * channels, height, width, ph, pw, buffer)
    return buffer


@njit(cache=True, nogil=True)
def forward_chunk(x, n, channels, height, width, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, weights,
                  outputs, bias, use_bias, relu, step, padded, cols, product, y):
    """y (n, O, out_h, out_w) = weights @ im2col(x) (+ bias), through a ReLU (negative slope
    0, as :func:`~.relu.relu_forward`) with ``relu``, ``step`` images at a time (their columns
    stay in the core's cache: LeNet's conv2, 8 images, caches evicted first, 327 us at once,
    271 two at a time). Every output is one chain of fused multiply-adds over the columns' rows
    (:mod:`.small_gemm`); where out_h * out_w is a multiple of 8 they are all in vector lanes,
    so equal patches give equal outputs and the step changes no bit. ``padded`` holds the bordered images of a step when ph
    or pw; ``cols`` (K x step's positions) and ``product`` (O x step's positions) are scratch."""
    plane = out_h * out_w
    k = channels * kh * kw
    image_in, image_out = channels * height * width, outputs * plane
    zero = np.float32(0.0)
    for first in range(0, n, step):
        images = min(step, n - first)
        positions = images * plane
        src = _padded(x[first * image_in:(first + images) * image_in], images, channels, height, width, ph, pw,
                      padded)
        _lower(src, images, channels, height + 2 * ph, width + 2 * pw, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
               True)
        batched_gemm(weights, 0, 0, k, 1, cols, 0, 0, positions, product, 0, 0, positions, 1, outputs, k, positions)
        for i in range(images):
            for o in range(outputs):
                at, to = o * positions + i * plane, (first + i) * image_out + o * plane
                b = bias[o] if use_bias else zero
                for p in range(plane):
                    v = product[at + p] + b if use_bias else product[at + p]
                    if relu and not (v > 0 or v != v):
                        v = zero
                    y[to + p] = v


@njit(cache=True, nogil=True)
def backward_chunk(x, dy, n, channels, height, width, kh, kw, ph, pw, sh, sw, dh, dw, out_h, out_w, weights,
                   outputs, need_w, lanes, w_part, need_b, bias_part, down, dx, padded, cols, dy_rows, dy_cm):
    """For n images and their top diff dy (n, O, out_h, out_w):

    - with ``need_b``, bias_part (O) = dy summed over images and positions (in float64);
    - with ``need_w``, w_part (K, lanes) = im2col(x) @ dy position-major (its channels padded
      with zeros to ``lanes``): the weight gradient transposed, one chain of fused
      multiply-adds over the positions in order per element;
    - with ``down``, dx (overwritten) = col2im(weights.T @ dy), Caffe's order of terms.

    ``padded`` (the bordered images, when ph or pw), ``cols`` (K * positions), ``dy_rows``
    (positions * lanes) and ``dy_cm`` (O * positions) are scratch."""
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
        src = _padded(x, n, channels, height, width, ph, pw, padded)
        _lower(src, n, channels, height + 2 * ph, width + 2 * pw, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, True)
        batched_gemm(cols, 0, 0, positions, 1, dy_rows, 0, 0, lanes, w_part, 0, 0, lanes, 1, k, positions, lanes)
    if down:
        for o in range(outputs):
            for i in range(n):
                at, to = (i * outputs + o) * plane, o * positions + i * plane
                for p in range(plane):
                    dy_cm[to + p] = dy[at + p]
        batched_gemm(weights, 0, 0, 1, k, dy_cm, 0, 0, positions, cols, 0, 0, positions, 1, k, outputs, positions)
        if ph == 0 and pw == 0:
            _lower(dx, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, False)
        else:
            _lower(padded, n, channels, height + 2 * ph, width + 2 * pw, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
                   False)
            crop_planes(padded, n * channels, height, width, ph, pw, dx)
