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
from .simd import vload, vstore
from .small_gemm import batched_gemm_function_ahead, call_batched_gemm

__all__ = ['backward_chunk', 'backward_chunk_ahead', 'patch_row_length']


def patch_row_length(k, kw):
    """The row length of :func:`backward_chunk`'s patch rows (and of its w_part) for k = C*kh*kw
    columns of kernels kw wide: k and the seven columns an eight-lane copy of the last kernel
    row may write past it (see :func:`_patch_rows`), rounded up to a multiple of 32 so that
    every column of the weight gradient's product is in batched_gemm's wide blocks (LeNet's
    conv2, 500 -> 512: 254 us a chunk of 8 images where 504 took 264)."""
    return -(-(k + max(0, 8 - kw)) // 32) * 32


@njit(cache=True, nogil=True, inline='always')
def _patch_rows(x, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, rows, row_length):
    """rows (n*out_h*out_w, row_length): row p is output position p's patch of x, its values in
    im2col's order (c, ky, kx); the columns past C*kh*kw hold anything.

    Stride and dilation 1 with kernels at most 8 wide copy each kernel row as one eight-lane
    vector, the lanes past it written over by the next kernel row or falling in the columns
    past C*kh*kw; position by position, so that the rows are written in order (LeNet's conv2, 8
    images: 35 us; kernel row by kernel row, each store 2 KB past the one before, 75). That
    nest is apart from the one for other geometries: one nest with both copies, the choice in
    its inner loop, took 416."""
    plane = out_h * out_w
    if sw == 1 and dw == 1 and kw <= 8 and row_length >= channels * kh * kw + 8 - kw:
        for i in range(n):
            for oy in range(out_h):
                for ox in range(out_w):
                    at = (i * plane + oy * out_w + ox) * row_length
                    for c in range(channels):
                        src = ((i * channels + c) * height + oy * sh) * width + ox
                        for ky in range(kh):
                            first, to = src + ky * dh * width, at + (c * kh + ky) * kw
                            if first + 8 <= x.size:
                                vstore(rows, to, vload(x, first))
                            else:  # the last rows of the last image: no vector past the array's end
                                for kx in range(kw):
                                    rows[to + kx] = x[first + kx]
        return
    for i in range(n):
        for oy in range(out_h):
            for ox in range(out_w):
                at = (i * plane + oy * out_w + ox) * row_length
                for c in range(channels):
                    src = ((i * channels + c) * height + oy * sh) * width + ox * sw
                    for ky in range(kh):
                        first, to = src + ky * dh * width, at + (c * kh + ky) * kw
                        for kx in range(kw):
                            rows[to + kx] = x[first + kx * dw]


@njit(cache=True, nogil=True)
def backward_chunk(x, dy, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, weights, outputs,
                   need_w, row_length, w_part, need_b, bias_part, down, dx, cols, rows, dy_cm, gemm, lower):
    """For n images and their top diff dy (n, O, out_h, out_w):

    - with ``need_b``, bias_part (O) = dy summed over images and positions (in float64);
    - with ``need_w``, w_part (O, row_length) = dy channel-major @ the patch rows of x: the
      weight gradient in its first C*kh*kw columns (the others hold anything), one chain of
      fused multiply-adds over the positions in order per element;
    - with ``down``, dx (overwritten) = col2im(weights.T @ dy), Caffe's order of terms.

    x and dx are the images with their zero borders, if the convolution pads (height and
    width include them; the caller pads x and crops dx). ``cols`` (C*kh*kw * positions),
    ``rows`` (positions * row_length, see :func:`patch_row_length`) and ``dy_cm`` (O *
    positions) are scratch.

    The weight gradient's product takes the patch rows as they are (the positions' patches,
    position-major), so its columns are the C*kh*kw patch values and need no padding beyond a
    multiple of 32; it ran as im2col's columns times dy position-major before, its columns the
    outputs padded to a multiple of 16 (LeNet's conv2, 50 -> 64) and dy transposed into them:
    a chunk of 8 images of LeNet's conv2, weight and bias gradients, 399 -> ~306 us, the same
    bits."""
    plane = out_h * out_w
    positions = n * plane
    k = channels * kh * kw
    for o in range(outputs):
        for i in range(n):
            at, to = (i * outputs + o) * plane, o * positions + i * plane
            for p in range(plane):
                dy_cm[to + p] = dy[at + p]
    if need_b:  # four channels' chains side by side: four additions in flight
        o = 0
        while o + 4 <= outputs:
            t0 = t1 = t2 = t3 = 0.0
            at = o * positions
            for p in range(at, at + positions):
                t0 += dy_cm[p]
                t1 += dy_cm[p + positions]
                t2 += dy_cm[p + 2 * positions]
                t3 += dy_cm[p + 3 * positions]
            bias_part[o], bias_part[o + 1], bias_part[o + 2], bias_part[o + 3] = t0, t1, t2, t3
            o += 4
        for o in range(o, outputs):
            total = 0.0
            for p in range(o * positions, (o + 1) * positions):
                total += dy_cm[p]
            bias_part[o] = total
    if need_w:
        _patch_rows(x, n, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, rows, row_length)
        call_batched_gemm(gemm, dy_cm, 0, 0, positions, 1, rows, 0, 0, row_length, w_part, 0, 0, row_length, 1,
                          outputs, positions, row_length)
    if down:
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
