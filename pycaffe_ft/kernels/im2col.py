"""im2col / col2im for 2-D convolution (pad, stride, dilation per dimension), batched.

Images are (N, C, H, W) and columns (C*kh*kw, N*out_h*out_w): rows ordered (c, ki, kj) as in
Caffe, so weights (num_output, C, kh, kw) reshaped to (num_output, C*kh*kw) multiply them in
one GEMM for the whole chunk; column ``n*out_h*out_w + p`` belongs to image ``n``.

Speed: the kernels take flat (1-D, C-contiguous) arrays and their shapes and index them with
unsigned offsets (no negative-index wraparound tests), and they never allocate: padding is a
zero-bordered copy made once (:func:`pad_planes`) into a buffer the caller owns, so the inner
loops are plain copies with no bounds tests. That also keeps Numba's compile time (the cold
start) small. All kernels release the GIL: layers run them on several threads.
"""
import numpy as np
from numba import carray, njit, types

from .c_functions import FLOATS, c_caller, c_function, floats
from .simd import vadd, vload, vstore
from . import numpy_references
from .tiered import await_ahead, call


def pad_planes(src, planes, height, width, ph, pw, dst):
    """dst (planes, height + 2 ph, width + 2 pw) = the planes of src with a zero border; while
    the kernel compiles in the background (:mod:`.tiered`), by NumPy."""
    call(_pad_planes, numpy_references.pad_planes, src, planes, height, width, ph, pw, dst)


@njit(cache=True, nogil=True)
def _pad_planes(src, planes, height, width, ph, pw, dst):
    """:func:`pad_planes`."""
    hp, wp = height + 2 * ph, width + 2 * pw
    for plane in range(planes):
        base = plane * hp * wp
        for i in range(ph * wp):
            dst[np.uint64(base + i)] = 0.0
            dst[np.uint64(base + (hp - ph) * wp + i)] = 0.0
        for y in range(height):
            s0 = (plane * height + y) * width
            d0 = base + (y + ph) * wp
            for x in range(pw):
                dst[np.uint64(d0 + x)] = 0.0
                dst[np.uint64(d0 + pw + width + x)] = 0.0
            for x in range(width):
                dst[np.uint64(d0 + pw + x)] = src[np.uint64(s0 + x)]


@njit(cache=True, nogil=True)
def crop_planes(src, planes, height, width, ph, pw, dst):
    """dst (planes, height, width) = the interior of src (planes, height + 2 ph, width + 2 pw)."""
    hp, wp = height + 2 * ph, width + 2 * pw
    for plane in range(planes):
        for y in range(height):
            s0 = (plane * hp + y + ph) * wp + pw
            d0 = (plane * height + y) * width
            for x in range(width):
                dst[np.uint64(d0 + x)] = src[np.uint64(s0 + x)]


def columns(images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
            ncols, to_columns):
    """im2col (``to_columns``) or its transpose col2im, on padded images.

    ``images``: flat (n_img, channels, height, width), already padded; ``cols``: C*kh*kw rows
    of ``ncols``, image n from column n*out_h*out_w. im2col writes ``cols``; col2im overwrites
    ``images`` with the sum of the columns, each element getting its terms in Caffe's order
    (rows c, ki, kj, then output positions).

    Stride 1 with rows of a multiple of 8 runs a kernel that moves whole vectors (LeNet's
    conv2, 8 wide: 0.08 -> 0.05 ms im2col, 0.09 -> 0.06 col2im per 8 images; 16 wide 1.7x); a
    separate compiled function, because the same branch inside one loop nest made LLVM compile
    the other rows slower (27 wide: 0.155 -> 0.19 ms). While that kernel compiles in the
    background (:mod:`.tiered`), by NumPy."""
    kernel = _vector_columns if sw == 1 and out_w % 8 == 0 else _columns
    call(kernel, numpy_references.columns, images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w,
         cols, ncols, to_columns)


@njit(cache=True, nogil=True, inline='always')
def _each_row(move_row, images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
              ncols, to_columns):
    """move_row(images, i0, cols, c0, out_w, sw, to_columns) for every output row of every column
    row (c, ki, kj) of every image, in Caffe's order; col2im first zeroes the images."""
    plane = out_h * out_w
    if not to_columns:
        images[:n_img * channels * height * width] = 0.0
    for n in range(n_img):
        for c in range(channels):
            image_base = (n * channels + c) * height * width
            for ki in range(kh):
                for kj in range(kw):
                    row = ((c * kh + ki) * kw + kj) * ncols + n * plane
                    for oy in range(out_h):
                        move_row(images, image_base + (oy * sh + ki * dh) * width + kj * dw, cols,
                                 row + oy * out_w, out_w, sw, to_columns)


@njit(cache=True, nogil=True, inline='always')
def _vector_row(images, i0, cols, c0, out_w, sw, to_columns):
    """One output row of stride 1 and a multiple of 8 wide, as whole vectors."""
    for ox in range(0, out_w, 8):
        if to_columns:
            vstore(cols, c0 + ox, vload(images, i0 + ox))
        else:
            vstore(images, i0 + ox, vadd(vload(images, i0 + ox), vload(cols, c0 + ox)))


@njit(cache=True, nogil=True, inline='always')
def _any_row(images, i0, cols, c0, out_w, sw, to_columns):
    """One output row, any stride and width (loops LLVM vectorizes)."""
    if to_columns and sw == 1:  # the common case: a contiguous copy
        for ox in range(out_w):
            cols[np.uint64(c0 + ox)] = images[np.uint64(i0 + ox)]
    elif to_columns:
        for ox in range(out_w):
            cols[np.uint64(c0 + ox)] = images[np.uint64(i0 + ox * sw)]
    else:
        for ox in range(out_w):
            images[np.uint64(i0 + ox * sw)] += cols[np.uint64(c0 + ox)]


@njit(cache=True, nogil=True)
def _vector_columns(images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
                    ncols, to_columns):
    """:func:`columns` for sw == 1 and out_w % 8 == 0."""
    _each_row(_vector_row, images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
              ncols, to_columns)


@njit(cache=True, nogil=True)
def _columns(images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
             ncols, to_columns):
    """:func:`columns`, any geometry."""
    _each_row(_any_row, images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
              ncols, to_columns)


COLUMNS_SIGNATURE = types.void(FLOATS, *[types.intp] * 13, FLOATS, types.intp, types.intp, types.intp)


def _c_vector_columns(images, images_size, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
                      cols_size, ncols, to_columns):
    _vector_columns(carray(images, images_size), n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w,
                    carray(cols, cols_size), ncols, to_columns != 0)


def _c_columns(images, images_size, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
               cols_size, ncols, to_columns):
    _columns(carray(images, images_size), n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w,
             carray(cols, cols_size), ncols, to_columns != 0)


def _columns_kernel(sw, out_w):
    return _c_vector_columns if sw == 1 and out_w % 8 == 0 else _c_columns


_call_columns_at = c_caller(COLUMNS_SIGNATURE)


def columns_function(sw, out_w):
    """The address of :func:`columns`' kernel for this stride and output width as a C function
    (see :mod:`.c_functions`), for :func:`call_columns`."""
    function = _columns_kernel(sw, out_w)
    await_ahead(function)
    return c_function(function, COLUMNS_SIGNATURE).address


def columns_function_ahead(sw, out_w):
    """:func:`columns_function`'s compile, for :func:`.tiered.ahead`."""
    return [(_columns_kernel(sw, out_w), COLUMNS_SIGNATURE)]


@njit(cache=True, nogil=True, inline='always')
def call_columns(function, images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols,
                 ncols, to_columns):
    """:func:`columns`' call, at ``function`` (:func:`columns_function`)."""
    _call_columns_at(function, (floats(images), images.size, n_img, channels, height, width, kh, kw, sh, sw, dh, dw,
                                out_h, out_w, floats(cols), cols.size, ncols, 1 if to_columns else 0))
