"""NumPy references of kernels: each takes its kernel's arguments and gives its kernel's bits,
with nothing to compile. A first pass runs them while a worker compiles the kernels
(:mod:`.tiered`): CIFAR10-quick's Winograd kernels took 7-12 s to compile in place before its
first training step, AlexNet's 6-7 s. The pooling's, the padding's and im2col's stand in for
Numba references or kernels of 0.2-0.5 s of compiling each, and so do the ReLU's, the softmax
loss's backward and the solvers' updates (0.15-0.6 s each on a Zen 3 core: together 1.2 s of
LeNet's first training step from an empty cache): a first pass compiles little besides what
has no reference here (what runs fused multiply-adds, which NumPy has not, and exp and log,
which NumPy computes with other roundings than the C library's that Numba calls).

Each value is computed by the same float32 (or float64) operations in the same order as in its
kernel, one NumPy operation over many values at a time (NumPy rounds every operation, as the
kernels do: no fused multiply-adds). The Winograd transforms run the kernels' own functions
(:data:`.winograd.TRANSFORMS`) on arrays; the per-position products run
:func:`.small_gemm.run_batched_gemm`. They are slower than the kernels (a CIFAR10-quick
training step about 0.3 s instead of 0.04 s) and allocate their own scratch.
"""
import functools

import numpy as np
from numpy.lib.stride_tricks import as_strided

from . import winograd
from .small_gemm import run_batched_gemm
from .solver_update import L1, L2

__all__ = ['to_channels_last', 'from_channels_last', 'tile_transform', 'tile_inverse', 'convolve_images',
           'weight_products', 'weight_tiles', 'weight_gradient_from_tiles', 'max_pool_caffe', 'ave_pool_caffe',
           'max_pool_backward', 'ave_pool_backward', 'ave_pool_backward_plane_vectors', 'ave_pool_backward_rows',
           'pad_planes', 'columns', 'lrn_across_forward', 'lrn_across_backward', 'relu_forward', 'relu_backward',
           'softmax_loss_backward', 'sgd', 'nesterov', 'adagrad', 'rmsprop', 'adadelta', 'adam']

_F32 = np.float32


def _quietly(function):
    """``function`` without NumPy's floating-point warnings (overflow, inf - inf, 0 / 0): the
    kernels it stands for give none."""
    @functools.wraps(function)
    def quiet(*args):
        with np.errstate(all='ignore'):
            return function(*args)
    return quiet


def _transform(kind):
    """(the kind's function on arrays, its tap count)."""
    function, taps = winograd.TRANSFORMS[kind]
    return function.py_func, taps


def _split_view(flat, num, height, width, channels):
    """flat as (N, height, 2, width / 2, C): column x at [.., x % 2, x // 2, :]."""
    return flat[:num * height * width * channels].reshape(num, height, 2, width // 2, channels)


def _joined(flat, num, height, width, channels):
    """An (N, height, width, C) copy of a channels-last image stored with split columns."""
    split = _split_view(flat, num, height, width, channels)
    image = np.empty((num, height, width, channels), _F32)
    image[:, :, 0::2] = split[:, :, 0]
    image[:, :, 1::2] = split[:, :, 1]
    return image


@_quietly
def to_channels_last(src, num, channels, height, width, top, left, padded_h, padded_w, dst):
    """:func:`.winograd.to_channels_last`."""
    image = np.zeros((num, padded_h, padded_w, channels), _F32)
    y0, y1 = max(0, -top), min(height, padded_h - top)
    x0, x1 = max(0, -left), min(width, padded_w - left)
    if y1 > y0 and x1 > x0:
        planes = src[:num * channels * height * width].reshape(num, channels, height, width)
        image[:, y0 + top:y1 + top, x0 + left:x1 + left] = planes[:, :, y0:y1, x0:x1].transpose(0, 2, 3, 1)
    split = _split_view(dst, num, padded_h, padded_w, channels)
    split[:, :, 0] = image[:, :, 0::2]
    split[:, :, 1] = image[:, :, 1::2]


@_quietly
def from_channels_last(src, num, channels, src_h, src_w, height, width, bias, use_bias, relu, dst):
    """:func:`.winograd.from_channels_last`."""
    image = _joined(src, num, src_h, src_w, channels)[:, :height, :width]
    values = image + (bias[:channels] if use_bias else np.zeros(channels, _F32))  # + 0 as the kernel: -0 -> 0
    if relu:
        values = np.where((values > 0) | (values != values), values, _F32(0.0))
    dst[:num * channels * height * width].reshape(num, channels, height, width)[...] = values.transpose(0, 3, 1, 2)


@_quietly
def tile_transform(src, num, padded_h, padded_w, channels, kind, alpha, tiles_h, tiles_w, rows, out):
    """:func:`.winograd.tile_transform`: every row's tiles along the columns, then along the
    rows."""
    function, taps = _transform(kind)
    image = _joined(src, num, padded_h, padded_w, channels)
    across = function(*(image[:, :, b:b + 2 * tiles_w - 1:2] for b in range(taps)))  # [q]: (N, h, tiles_w, C)
    tiles = num * tiles_h * tiles_w
    result = out[:alpha * alpha * tiles * channels].reshape(alpha, alpha, tiles, channels)
    for q in range(alpha):
        down = function(*(across[q][:, b:b + 2 * tiles_h - 1:2] for b in range(taps)))
        for p in range(alpha):
            result[p, q] = down[p].reshape(tiles, channels)


@_quietly
def tile_inverse(prod, num, channels, kind, alpha, tiles_h, tiles_w, half, dst):
    """:func:`.winograd.tile_inverse`: along the positions' rows, then their columns."""
    function, _ = _transform(kind)
    products = prod[:alpha * alpha * num * tiles_h * tiles_w * channels].reshape(
        alpha, alpha, num, tiles_h, tiles_w, channels)
    outputs = dst[:num * 4 * tiles_h * tiles_w * channels].reshape(num, tiles_h, 2, 2, tiles_w, channels)
    for u, rows in enumerate(function(*(products[p] for p in range(alpha)))):  # rows: (alpha, N, ...)
        for v, values in enumerate(function(*(rows[q] for q in range(alpha)))):
            outputs[:, :, u, v] = values


def _input_windows(x, lo, n, channels, height, width, top, left, padded_h, padded_w, kind, alpha, tiles_h,
                   tiles_w):
    """The transformed input windows of images lo .. lo + n - 1 (flat), as the kernels' own."""
    image = np.empty(n * padded_h * padded_w * channels, _F32)
    to_channels_last(x[lo * channels * height * width:], n, channels, height, width, top, left, padded_h,
                     padded_w, image)
    v = np.empty(alpha * alpha * n * tiles_h * tiles_w * channels, _F32)
    tile_transform(image, n, padded_h, padded_w, channels, kind, alpha, tiles_h, tiles_w, None, v)
    return v


@_quietly
def convolve_images(x, num, step, channels, height, width, top, left, padded_h, padded_w, in_kind, alpha,
                    tiles_h, tiles_w, u, groups, out_channels, out_kind, out_h, out_w, bias, use_bias, relu,
                    y, image, rows, v, prod, half, result, gemm):
    """:func:`.winograd.convolve_images`, every image at once (its bits do not depend on
    ``step``); the scratch arguments and ``gemm`` go unused."""
    ci, co = channels // groups, out_channels // groups
    count = num * tiles_h * tiles_w
    v = _input_windows(x, 0, num, channels, height, width, top, left, padded_h, padded_w, in_kind, alpha,
                       tiles_h, tiles_w)
    prod = np.empty(alpha * alpha * count * out_channels, _F32)
    for gi in range(groups):
        run_batched_gemm(v, gi * ci, count * channels, channels, 1, u, gi * ci * co, groups * ci * co, co,
                         prod, gi * co, count * out_channels, out_channels, alpha * alpha, count, ci, co)
    result = np.empty(num * 4 * tiles_h * tiles_w * out_channels, _F32)
    tile_inverse(prod, num, out_channels, out_kind, alpha, tiles_h, tiles_w, None, result)
    from_channels_last(result, num, out_channels, 2 * tiles_h, 2 * tiles_w, out_h, out_w, bias, use_bias, relu,
                       y[:num * out_channels * out_h * out_w])


@_quietly
def weight_products(x, dy, num, step, channels, height, width, top, left, padded_h, padded_w, in_kind,
                    diff_kind, alpha, tiles_h, tiles_w, out_channels, out_h, out_w, groups, part, image, rows,
                    vx, diff_image, diff_rows, vg, more, gemm):
    """:func:`.winograd.weight_products`, ``step`` images at a time as the kernel (each step's
    products are a sum of their own); the scratch arguments and ``gemm`` go unused."""
    ci, co = channels // groups, out_channels // groups
    for lo in range(0, num, step):
        n = min(step, num - lo)
        count = n * tiles_h * tiles_w
        vx = _input_windows(x, lo, n, channels, height, width, top, left, padded_h, padded_w, in_kind, alpha,
                            tiles_h, tiles_w)
        diff_image = np.empty(n * 4 * tiles_h * tiles_w * out_channels, _F32)
        to_channels_last(dy[lo * out_channels * out_h * out_w:], n, out_channels, out_h, out_w, 0, 0, 2 * tiles_h,
                         2 * tiles_w, diff_image)
        vg = np.empty(alpha * alpha * count * out_channels, _F32)
        tile_transform(diff_image, n, 2 * tiles_h, 2 * tiles_w, out_channels, diff_kind, alpha, tiles_h, tiles_w,
                       None, vg)
        into = part if lo == 0 else np.empty(part.size, _F32)
        for gi in range(groups):
            run_batched_gemm(vg, gi * co, count * out_channels, 1, out_channels, vx, gi * ci, count * channels,
                             channels, into, gi * co * ci, groups * co * ci, ci, alpha * alpha, co, count, ci)
        if lo > 0:
            part += into


def _add_scaled_rows(acc, coefficients, rows):
    """acc += coefficients[t] * rows[t] for t in order (float64), as the kernels' helper."""
    for g, row in zip(coefficients, rows):
        acc += g * row


@_quietly
def weight_tiles(w, g_matrix, groups, flip, out, first_pair, last_pair):
    """:func:`.winograd.weight_tiles`."""
    k, c_in, r = w.shape[0], w.shape[1], w.shape[2]
    alpha, per_group = g_matrix.shape[0], k // groups
    taps = w.reshape(k * c_in, r, r).astype(np.float64)  # [pair, row, column]
    if flip:
        taps = taps[:, ::-1, ::-1]
    taps = taps.transpose(1, 2, 0)  # [row, column, pair]
    pair = np.arange(k * c_in)
    o_all, c = pair // c_in, pair % c_in
    gi = o_all // per_group
    dest = pair if flip else (gi * c_in + c) * per_group + o_all - gi * per_group
    half = np.zeros((alpha, r, k * c_in))  # G w
    for p in range(alpha):
        for b in range(r):
            _add_scaled_rows(half[p, b], g_matrix[p], taps[:, b])
    flat = out.reshape(alpha * alpha, -1)
    for p in range(alpha):
        for q in range(alpha):
            total = np.zeros(k * c_in)
            _add_scaled_rows(total, g_matrix[q], half[p])
            written = (dest >= first_pair) & (dest < last_pair)
            flat[p * alpha + q, dest[written]] = total[written]


@_quietly
def weight_gradient_from_tiles(m, a_t, out):
    """:func:`.winograd.weight_gradient_from_tiles`."""
    alpha, r = m.shape[0], a_t.shape[0]
    pairs = m.shape[2] * m.shape[3]
    rows = m.reshape(alpha, alpha, pairs)
    half = np.zeros((r, alpha, pairs))  # A^T m
    for u in range(r):
        for q in range(alpha):
            _add_scaled_rows(half[u, q], a_t[u], (rows[p, q].astype(np.float64) for p in range(alpha)))
    flat = out.reshape(pairs, r, r)
    for u in range(r):
        for v in range(r):
            total = np.zeros(pairs)
            _add_scaled_rows(total, a_t[v], half[u])
            flat[:, u, v] = total


def _tap_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, outside):
    """Each window tap's values for every output, in row-major window order: (tap row in the
    image (out_h, 1), tap column (1, out_w), values (planes, out_h, out_w)), the values strided
    views of the planes set in a border of ``outside`` that reaches every tap (a tap outside the
    image reads ``outside``: a value that changes no maximum or sum, as Caffe skips it)."""
    rows, cols = max(height + ph, (out_h - 1) * sh + kh), max(width + pw, (out_w - 1) * sw + kw)
    framed = np.full((planes, rows, cols), outside, _F32)
    framed[:, ph:ph + height, pw:pw + width] = x[:planes * height * width].reshape(planes, height, width)
    oy, ox = np.arange(out_h).reshape(-1, 1) * sh, np.arange(out_w).reshape(1, -1) * sw
    for dh in range(kh):
        for dw in range(kw):
            yield (oy + dh - ph, ox + dw - pw,
                   framed[:, dh:dh + (out_h - 1) * sh + 1:sh, dw:dw + (out_w - 1) * sw + 1:sw])


@_quietly
def max_pool_caffe(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask):
    """Max pooling as Caffe's CPU loop writes it: the first maximum in row-major window order
    (strict >, from -FLT_MAX; NaN never taken; taps outside the image read -inf, never taken),
    its flat index in the plane (as float) in mask, -1 where none is above -FLT_MAX. The vector
    kernels' reference (:func:`.pooling.max_pool_forward`)."""
    best = np.full((planes, out_h, out_w), np.finfo(np.float32).min, _F32)
    at = np.full((planes, out_h, out_w), -1, np.int32)
    for rows, cols, values in _tap_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, -np.inf):
        larger = values > best
        best = np.where(larger, values, best)  # (2x faster than np.copyto with where=)
        at = np.where(larger, (rows * width + cols).astype(np.int32), at)
    y[:best.size] = best.reshape(-1)
    mask[:at.size] = at.reshape(-1)


@_quietly
def ave_pool_caffe(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y):
    """Average pooling as Caffe's CPU loop writes it: float32 sums from zero in row-major window
    order over the window clipped to the image (taps outside it read +0, which changes no sum's
    bits: a sum from +0 is never -0), divided by its size clipped to the padded image (0 / 0:
    NaN). The vector kernels' reference (:func:`.pooling.ave_pool_forward`)."""
    total = np.zeros((planes, out_h, out_w), _F32)
    for _, _, values in _tap_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, 0.0):
        total += values
    h0, w0 = np.arange(out_h) * sh - ph, np.arange(out_w) * sw - pw
    size = np.outer(np.minimum(h0 + kh, height + ph) - h0, np.minimum(w0 + kw, width + pw) - w0).astype(_F32)
    y[:total.size] = (total / size).reshape(-1)


@_quietly
def max_pool_backward(dy, mask, planes, in_plane, out_plane, dx, x, *geometry):
    """:func:`.pooling.max_pool_backward`: dx from zero, each dy added at its argmax, outputs in
    row-major order (np.add.at adds in the order given); then, given x, the backward of the ReLU
    below (x its bottom data). ``geometry``: the other kernels' further arguments, which the
    masks make needless here."""
    where = mask[:planes * out_plane].reshape(planes, out_plane).astype(np.int64)
    taken = where >= 0
    dx[:planes * in_plane] = 0.0
    np.add.at(dx, (np.arange(planes).reshape(-1, 1) * in_plane + where)[taken],
              dy[:planes * out_plane].reshape(planes, out_plane)[taken])
    if x is not None:
        relu_backward(x[:planes * in_plane], dx[:planes * in_plane], dx[:planes * in_plane])


@_quietly
def pad_planes(src, planes, height, width, ph, pw, dst):
    """:func:`.im2col.pad_planes`."""
    padded = dst[:planes * (height + 2 * ph) * (width + 2 * pw)].reshape(planes, height + 2 * ph, width + 2 * pw)
    padded[...] = 0.0
    padded[:, ph:ph + height, pw:pw + width] = src[:planes * height * width].reshape(planes, height, width)


@_quietly
def columns(images, n_img, channels, height, width, kh, kw, sh, sw, dh, dw, out_h, out_w, cols, ncols, to_columns):
    """:func:`.im2col.columns`'s kernels: im2col copies each window tap's plane of positions
    into its row; col2im zeroes the images, then adds the rows tap by tap (an element's terms in
    Caffe's order: by tap, and one per tap)."""
    if not to_columns:
        images[:n_img * channels * height * width] = 0.0
    # the rows the windows reach (im2col in bands passes the images from a band's first row on,
    # its last plane cut after the rows it reads)
    reach = (out_h - 1) * sh + (kh - 1) * dh + 1
    size = images.itemsize
    image = as_strided(images, (n_img, channels, reach, width),
                       (channels * height * width * size, height * width * size, width * size, size))
    rows = cols[:channels * kh * kw * ncols].reshape(channels, kh, kw, ncols)
    for ki in range(kh):
        for kj in range(kw):
            window = image[:, :, ki * dh:ki * dh + (out_h - 1) * sh + 1:sh, kj * dw:kj * dw + (out_w - 1) * sw + 1:sw]
            row = rows[:, ki, kj, :n_img * out_h * out_w].reshape(channels, n_img, out_h, out_w).transpose(1, 0, 2, 3)
            if to_columns:
                row[...] = window
            else:
                window += row


@_quietly
def ave_pool_backward(dy, planes, sizes, covers, dx, x=None):
    """:func:`.pooling.ave_pool_backward`'s kernels (``sizes`` and ``covers`` from its taps):
    each output's share dy / size, then each input the sum of its covering outputs' shares in
    order, from zero; then, given x, the backward of the ReLU below (x its bottom data)."""
    in_plane, out_plane = covers.shape[0], sizes.size
    shares = np.zeros((planes, out_plane + 1), _F32)  # the last column: the zero term of padded covers
    shares[:, :out_plane] = dy[:planes * out_plane].reshape(planes, out_plane) / sizes
    total = np.zeros((planes, in_plane), _F32)
    for j in range(covers.shape[1]):
        total += shares[:, covers[:, j]]
    dx[:planes * in_plane] = total.reshape(-1)
    if x is not None:
        relu_backward(x[:planes * in_plane], dx[:planes * in_plane], dx[:planes * in_plane])


def ave_pool_backward_plane_vectors(dy, planes, sizes, covers, picks, dx, x):
    """:func:`.pooling.ave_pool_backward`'s kernels one plane a vector: :func:`ave_pool_backward`."""
    ave_pool_backward(dy, planes, sizes, covers, dx, x)


def ave_pool_backward_by_parity(dy, planes, sizes, covers, shifts, phases, dx, x):
    """:func:`.pooling.ave_pool_backward`'s kernels by parity: :func:`ave_pool_backward`."""
    ave_pool_backward(dy, planes, sizes, covers, dx, x)


def ave_pool_backward_rows(dy, planes, height, width, ph, out_h, sizes, covers, starts, picks, dx, x):
    """:func:`.pooling.ave_pool_backward`'s kernels by output rows: :func:`ave_pool_backward`."""
    ave_pool_backward(dy, planes, sizes, covers, dx, x)


def _root_neg_pow(s, beta):
    """:func:`.lrn._times_neg_pow`'s s^-beta for the betas of :data:`.lrn.ROOT_BETAS` (square roots)."""
    if beta == 0.75:
        r = np.sqrt(s)
        return _F32(1.0) / (r * np.sqrt(r))
    return _F32(1.0) / np.sqrt(s)


@_quietly
def lrn_across_forward(src, n_img, channels, plane, size, alpha, beta, k, sc, dst):
    """:func:`.lrn.lrn_across_forward`'s kernel (a beta of :data:`.lrn.ROOT_BETAS`): the
    scale's running window sum, channel by channel, over every image and position at once."""
    pre = (size - 1) // 2
    aos = alpha / _F32(size)
    x = src[:n_img * channels * plane].reshape(n_img, channels, plane)
    scale = sc[:x.size].reshape(x.shape)
    scale[:, 0] = k
    for c in range(min(size - pre, channels)):
        scale[:, 0] += aos * (x[:, c] * x[:, c])
    for c in range(1, channels):
        head, tail = c + size - 1 - pre, c - 1 - pre  # the channels entering and leaving the window
        scale[:, c] = scale[:, c - 1]
        if head < channels:
            scale[:, c] += aos * (x[:, head] * x[:, head])
        if tail >= 0:
            scale[:, c] += -aos * (x[:, tail] * x[:, tail])
    dst[:x.size] = (_root_neg_pow(scale, beta) * x).reshape(-1)


@_quietly
def lrn_across_backward(xs, ys, sc, gs, n_img, channels, plane, size, beta, ratio_value, out, ratio, accum):
    """:func:`.lrn.lrn_across_backward`'s kernel (a beta of :data:`.lrn.ROOT_BETAS`), every
    image at once; the work buffers go unused."""
    post = size - (size + 1) // 2
    shape = (n_img, channels, plane)
    x, y, scale, g = (a[:n_img * channels * plane].reshape(shape) for a in (xs, ys, sc, gs))
    shares = g * y / scale
    dx = g * _root_neg_pow(scale, beta)
    total = np.zeros((n_img, plane), _F32)
    for c in range(max(-post, 0), min(size - 1 - post, channels)):
        total += shares[:, c]
    for c in range(channels):
        head, tail = c + size - 1 - post, c - post
        if head < channels:
            total += shares[:, head]
        dx[:, c] += -ratio_value * (x[:, c] * total)
        if tail >= 0:
            total += -shares[:, tail]
    out[:dx.size] = dx.reshape(-1)


def relu_forward(x, y):
    """:func:`.relu.relu_forward_kernel`: x where x > 0 or x is a NaN, else +0."""
    y[...] = np.where(x <= 0, _F32(0.0), x)


@_quietly
def relu_backward(x, dy, dx):
    """:func:`.relu.relu_backward_kernel`: dy times 1 where x > 0, else times 0."""
    dx[...] = dy * (x > 0).astype(_F32)


def softmax_loss_backward(prob, label, has_ignore, ignore_label, scale, dx):
    """:func:`.softmax.softmax_loss_backward_kernel`: prob * scale (in float64, stored as
    float32), less scale at each position's label; 0 at positions with the ignored label."""
    labels = label.astype(np.int64)
    dx[...] = (prob.astype(np.float64) * scale).astype(_F32)
    counted = labels != ignore_label if has_ignore else np.ones(labels.shape, bool)
    outer, inner = np.nonzero(counted)
    at = (outer, labels[outer, inner], inner)
    dx[at] = (dx[at].astype(np.float64) - scale).astype(_F32)
    dx.transpose(0, 2, 1)[~counted] = 0.0


# The solvers' updates (:mod:`.solver_update`): the same float32 operations per element, a
# parameter blob's part of [lo, hi) at a time.

def _segments(lo, hi, bounds, rates):
    """(blob index, its part of [lo, hi) as a slice) for each blob the range reaches."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        if a < b:
            yield s, slice(a, b)


def _gradient(g, w, iter_scale, decay, regularization):
    """:func:`.solver_update._gradient` on arrays."""
    if iter_scale != 1:
        g = g * iter_scale
    if regularization == L2:
        g = g + decay * w
    elif regularization == L1:
        g = g + decay * np.sign(w)
    return g


def _step(w, g, part, update):
    """The update left in the gradient buffer (as Caffe leaves it in the diff) and subtracted
    from the weights."""
    g[part] = update
    w[part] = w[part] - update


def sgd(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, momentum):
    for s, part in _segments(lo, hi, bounds, rates):
        v = h[part] * momentum + rates[s] * _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        h[part] = v
        _step(w, g, part, v)


def nesterov(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, momentum, one_plus_momentum):
    for s, part in _segments(lo, hi, bounds, rates):
        previous = h[part].copy()
        v = previous * momentum + rates[s] * _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        h[part] = v
        _step(w, g, part, one_plus_momentum * v - momentum * previous)


@_quietly
def adagrad(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, delta):
    for s, part in _segments(lo, hi, bounds, rates):
        gi = _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        v = h[part] + gi * gi
        h[part] = v
        _step(w, g, part, rates[s] * (gi / (np.sqrt(v) + delta)))


@_quietly
def rmsprop(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, rms_decay, one_minus_decay, delta):
    for s, part in _segments(lo, hi, bounds, rates):
        gi = _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        v = h[part] * rms_decay + one_minus_decay * (gi * gi)
        h[part] = v
        _step(w, g, part, rates[s] * (gi / (np.sqrt(v) + delta)))


@_quietly
def adadelta(w, g, h, h_update, lo, hi, bounds, rates, decays, iter_scale, regularization, momentum,
             one_minus_momentum, delta):
    for s, part in _segments(lo, hi, bounds, rates):
        gi = _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        v = h[part] * momentum + one_minus_momentum * (gi * gi)
        h[part] = v
        u = gi * np.sqrt((h_update[part] + delta) / (v + delta))
        h_update[part] = h_update[part] * momentum + one_minus_momentum * (u * u)
        _step(w, g, part, rates[s] * u)


@_quietly
def adam(w, g, m, v, lo, hi, bounds, rates, decays, iter_scale, regularization, beta1, one_minus_beta1, beta2,
         one_minus_beta2, correction, delta):
    for s, part in _segments(lo, hi, bounds, rates):
        gi = _gradient(g[part], w[part], iter_scale, decays[s], regularization)
        mk = m[part] * beta1 + one_minus_beta1 * gi
        vk = v[part] * beta2 + one_minus_beta2 * (gi * gi)
        m[part] = mk
        v[part] = vk
        _step(w, g, part, (rates[s] * correction) * (mk / (np.sqrt(vk) + delta)))
