"""Max and average pooling over (N, C, H, W), Caffe's window and divisor rules.

MAX and AVE kernels take flat (1-D, C-contiguous) arrays and the geometry ``planes`` (N*C),
``height``, ``width``, ``kh, kw, ph, pw, sh, sw, out_h, out_w``; they index with unsigned
offsets, never allocate and release the GIL, so layers run them on several threads, one image
range each.
"""
import numpy as np
from numba import njit

from .simd import vadd, vdiv, vfull, vload, vload_even, vramp, vstore, vwhere_gt

_LOWEST = np.float32(-3.4028234663852886e38)  # -FLT_MAX, where Caffe's max pooling starts


@njit(cache=True, nogil=True)
def _inner_columns(out_w, width, kw, pw, sw):
    """[lo, hi): the output columns whose windows lie inside the image's columns."""
    lo = min(out_w, (pw + sw - 1) // sw)
    return lo, max(lo, min(out_w, (width - kw + pw) // sw + 1))


@njit(cache=True, nogil=True, inline='always')
def _block_start(ox, lo, hi, size):
    """Where the next block of ``size`` inner outputs starts: at ``ox``, or, for the last one,
    at hi - size, overlapping outputs already written (written again with the same bits)
    rather than leaving a few to the slow path."""
    return max(lo, min(ox, hi - size))


@njit(cache=True, nogil=True, inline='always')
def _with_width(block, x, in_base, h0, h1, width, kw, pw, sw, ox, out, extra, o):
    """block(...) with the window width as a constant where it is 3 or 2 (the kx loop
    unrolls)."""
    if kw == 3:
        block(x, in_base, h0, h1, width, 3, pw, sw, ox, out, extra, o)
    elif kw == 2:
        block(x, in_base, h0, h1, width, 2, pw, sw, ox, out, extra, o)
    else:
        block(x, in_base, h0, h1, width, kw, pw, sw, ox, out, extra, o)


@njit(cache=True, nogil=True, inline='always')
def _inner_blocks(eight, four, x, in_base, h0, h1, width, kw, pw, sw, lo, hi, out, extra, o):
    """The inner outputs [lo, hi) of one output row (rows h0 .. h1-1 of the plane at in_base):
    eight at a time as vector lanes where the stride is 1 or 2 and the block's loads stay in
    the array, then four at a time, each kind's last block overlapping; with fewer than four
    the caller's one-by-one path takes them."""
    ox = lo
    # the last element a block reads (stride 2: one past its last window)
    far = in_base + (h1 - 1) * width + kw - 1 - pw + (15 if sw == 2 else 7)
    while sw <= 2 and hi - lo >= 8 and ox < hi:
        start = _block_start(ox, lo, hi, 8)
        if far + start * sw >= x.size:
            break
        _with_width(eight, x, in_base, h0, h1, width, kw, pw, sw, start, out, extra, o)
        ox = start + 8
    while hi - lo >= 4 and ox < hi:
        start = _block_start(ox, lo, hi, 4)
        _with_width(four, x, in_base, h0, h1, width, kw, pw, sw, start, out, extra, o)
        ox = start + 4


@njit(cache=True, nogil=True, inline='always')
def _four_max_windows(x, in_base, hstart, hend, width, kw, pw, sw, ox, y, mask, o):
    """Outputs o + ox .. o + ox + 3 (windows inside the image columns): four independent
    compare-and-select chains, each over its window in row-major order. Inlined with a
    constant ``kw`` where the layer allows, so that the short kx loop unrolls."""
    b0 = b1 = b2 = b3 = _LOWEST
    i0 = i1 = i2 = i3 = -1
    for yy in range(hstart, hend):
        for kx in range(kw):
            col = yy * width + kx - pw + ox * sw
            v0 = x[np.uint64(in_base + col)]
            v1 = x[np.uint64(in_base + col + sw)]
            v2 = x[np.uint64(in_base + col + 2 * sw)]
            v3 = x[np.uint64(in_base + col + 3 * sw)]
            i0 = col if v0 > b0 else i0
            b0 = v0 if v0 > b0 else b0
            i1 = col + sw if v1 > b1 else i1
            b1 = v1 if v1 > b1 else b1
            i2 = col + 2 * sw if v2 > b2 else i2
            b2 = v2 if v2 > b2 else b2
            i3 = col + 3 * sw if v3 > b3 else i3
            b3 = v3 if v3 > b3 else b3
    y[np.uint64(o + ox)] = b0
    y[np.uint64(o + ox + 1)] = b1
    y[np.uint64(o + ox + 2)] = b2
    y[np.uint64(o + ox + 3)] = b3
    mask[np.uint64(o + ox)] = i0
    mask[np.uint64(o + ox + 1)] = i1
    mask[np.uint64(o + ox + 2)] = i2
    mask[np.uint64(o + ox + 3)] = i3


@njit(cache=True, nogil=True, inline='always')
def _eight_max_windows(x, in_base, hstart, hend, width, kw, pw, sw, ox, y, mask, o):
    """Outputs o + ox .. o + ox + 7 as the eight lanes of vectors (stride 1 or 2: the inputs
    of a window position are one load, or the even lanes of two): the same compare-and-select
    per lane, in the same row-major window order."""
    best = vfull(_LOWEST)
    index = vfull(np.float32(-1.0))
    for yy in range(hstart, hend):
        for kx in range(kw):
            col = yy * width + kx - pw + ox * sw
            v = vload(x, in_base + col) if sw == 1 else vload_even(x, in_base + col)
            index = vwhere_gt(v, best, vramp(np.float32(col), np.float32(sw)), index)
            best = vwhere_gt(v, best, v, best)
    vstore(y, o + ox, best)
    vstore(mask, o + ox, index)


@njit(cache=True, nogil=True)
def max_pool_forward(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask):
    """y and mask (flat argmax index into H*W, as float) hold planes*out_h*out_w values.
    The first maximum in row-major window order wins (strict >), from -FLT_MAX as in Caffe.

    The outputs whose windows lie inside the image columns go eight at a time as vectors
    where the stride is 1 or 2 (CIFAR10-quick's pool1: 14 -> 3.5 ms), else (and the rest)
    four at a time (four independent compare-and-select chains instead of one long dependent
    one; 2- and 3-wide windows with the width as a constant), the others one by one, jumping
    over the inner ones (rather than testing each: CIFAR10-quick's pool1 3.0 -> 2.25 ms,
    LeNet's 0.57 -> 0.37 ms)."""
    lo, hi = _inner_columns(out_w, width, kw, pw, sw)
    for plane in range(planes):
        in_base = plane * height * width
        for oy in range(out_h):
            hstart = oy * sh - ph
            hend = min(hstart + kh, height)
            hstart = max(hstart, 0)
            o = (plane * out_h + oy) * out_w
            _inner_blocks(_eight_max_windows, _four_max_windows, x, in_base, hstart, hend, width, kw, pw,
                          sw, lo, hi, y, mask, o)
            ox = 0
            while ox < out_w:  # the outputs the blocks left, one by one
                if ox == lo and hi - lo >= 4:
                    ox = hi
                    continue
                wstart = ox * sw - pw
                wend = min(wstart + kw, width)
                wstart = max(wstart, 0)
                best = _LOWEST
                best_idx = -1
                for yy in range(hstart, hend):
                    row = yy * width
                    for xx in range(wstart, wend):
                        v = x[np.uint64(in_base + row + xx)]
                        better = v > best
                        best = v if better else best
                        best_idx = row + xx if better else best_idx
                y[np.uint64(o + ox)] = best
                mask[np.uint64(o + ox)] = best_idx
                ox += 1


@njit(cache=True, nogil=True)
def max_pool_backward(dy, mask, planes, in_plane, out_plane, dx):
    """dx (overwritten) receives each dy at its argmax, outputs in row-major order."""
    for plane in range(planes):
        in_base = plane * in_plane
        out_base = plane * out_plane
        for p in range(in_plane):
            dx[np.uint64(in_base + p)] = 0.0
        for p in range(out_plane):
            idx = int(mask[np.uint64(out_base + p)])
            if idx >= 0:
                dx[np.uint64(in_base + idx)] += dy[np.uint64(out_base + p)]


@njit(cache=True, nogil=True)
def _ave_span(o, stride, pad, kernel, size):
    """Caffe's AVE window along one axis for output o: [lo, hi) clipped to the input, and the
    extent the divisor counts (the window clipped to the padded input: padding counts)."""
    start = o * stride - pad
    end = min(start + kernel, size + pad)
    return max(start, 0), min(end, size), end - start


@njit(cache=True, nogil=True, inline='always')
def _eight_ave_windows(x, in_base, h0, h1, width, kw, pw, sw, ox, y, size, o):
    """Outputs o + ox .. o + ox + 7 (stride 1 or 2) as vector lanes: each lane's sum in its
    window's row-major order, as the scalar path adds it."""
    total = vfull(np.float32(0.0))
    for yy in range(h0, h1):
        for kx in range(kw):
            col = in_base + yy * width + kx - pw + ox * sw
            total = vadd(total, vload(x, col) if sw == 1 else vload_even(x, col))
    vstore(y, o + ox, vdiv(total, vfull(size)))


@njit(cache=True, nogil=True, inline='always')
def _four_ave_windows(x, in_base, h0, h1, width, kw, pw, sw, ox, y, size, o):
    """Outputs o + ox .. o + ox + 3: four independent sums, each in its window order."""
    t0 = t1 = t2 = t3 = np.float32(0.0)
    for yy in range(h0, h1):
        row = in_base + yy * width + ox * sw - pw
        for kx in range(kw):
            t0 += x[np.uint64(row + kx)]
            t1 += x[np.uint64(row + sw + kx)]
            t2 += x[np.uint64(row + 2 * sw + kx)]
            t3 += x[np.uint64(row + 3 * sw + kx)]
    y[np.uint64(o + ox)] = t0 / size
    y[np.uint64(o + ox + 1)] = t1 / size
    y[np.uint64(o + ox + 2)] = t2 / size
    y[np.uint64(o + ox + 3)] = t3 / size


@njit(cache=True, nogil=True, error_model='numpy')  # an empty window: 0/0 as in Caffe
def ave_pool_forward(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y):
    """Float32 sums in row-major window order (Caffe's), divided by Caffe's window size.
    Outputs whose windows lie inside the image columns go eight at a time as vector lanes
    (stride 1 or 2), else four at a time (independent sums, each in its own window order:
    the same bits, without waiting on one long chain); the others one by one."""
    lo, hi = _inner_columns(out_w, width, kw, pw, sw)
    for plane in range(planes):
        in_base = plane * height * width
        for oy in range(out_h):
            h0, h1, rows = _ave_span(oy, sh, ph, kh, height)
            o = (plane * out_h + oy) * out_w
            size = np.float32(rows * kw)
            _inner_blocks(_eight_ave_windows, _four_ave_windows, x, in_base, h0, h1, width, kw, pw, sw,
                          lo, hi, y, size, o)
            ox = 0
            while ox < out_w:  # the outputs the blocks left, one by one
                if ox == lo and hi - lo >= 4:
                    ox = hi
                    continue
                w0, w1, cols = _ave_span(ox, sw, pw, kw, width)
                total = np.float32(0.0)
                for yy in range(h0, h1):
                    row = in_base + yy * width
                    for xx in range(w0, w1):
                        total += x[np.uint64(row + xx)]
                y[np.uint64(o + ox)] = total / np.float32(rows * cols)
                ox += 1


@njit(cache=True, nogil=True)
def _covering_columns(width, kw, pw, sw, out_w, slots, covers, valid):
    """For each input column xx and t < slots: covers[t * width + xx] = the t-th output column
    (ascending) whose window holds xx, else out_w; valid[...] = 1 where there is one, else 0."""
    for xx in range(width):
        lowest = xx + pw - kw + 1
        first = 0 if lowest <= 0 else (lowest + sw - 1) // sw
        last = min(out_w - 1, (xx + pw) // sw)
        for t in range(slots):
            ox = first + t
            covers[t * width + xx] = ox if ox <= last else out_w
            valid[t * width + xx] = np.float32(1.0) if ox <= last else np.float32(0.0)


@njit(cache=True, nogil=True, error_model='numpy')  # an empty window: 0/0 as in Caffe
def ave_pool_backward(dy, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, dx):
    """dx (overwritten) = each dy / window size spread over its window, outputs in row-major
    order as in Caffe: each dx element gets its terms in ascending output order. Per output
    row, the terms of each input column are laid out by slot (its first covering output
    column, its second, ...), then every input row of the window adds them slot by slot, eight
    columns at a time as vector lanes (CIFAR10-quick's pool2 backward: 2.3 -> 1.1 ms)."""
    slots = (kw + sw - 1) // sw  # the most windows along a row holding one column
    covers = np.empty(slots * width, np.int64)
    valid = np.empty(slots * width, np.float32)
    _covering_columns(width, kw, pw, sw, out_w, slots, covers, valid)
    cols = np.empty(out_w, np.int64)
    for ox in range(out_w):
        cols[ox] = _ave_span(ox, sw, pw, kw, width)[2]
    g = np.zeros(out_w + 1, np.float32)  # g[out_w] = 0: what a missing slot reads
    terms = np.empty(slots * width, np.float32)
    half = vfull(np.float32(0.5))
    vector_end = width // 8 * 8
    for plane in range(planes):
        in_base = plane * height * width
        dx[in_base:in_base + height * width] = 0.0
        for oy in range(out_h):
            h0, h1, rows = _ave_span(oy, sh, ph, kh, height)
            o = (plane * out_h + oy) * out_w
            for ox in range(out_w):
                g[ox] = dy[o + ox] / np.float32(rows * cols[ox])
            for i in range(slots * width):
                terms[i] = g[covers[i]]
            for yy in range(h0, h1):
                row = in_base + yy * width
                for xb in range(0, vector_end, 8):
                    d = vload(dx, row + xb)
                    for t in range(slots):  # a select, not + 0: -0.0 stays -0.0
                        d = vwhere_gt(vload(valid, t * width + xb), half, vadd(d, vload(terms, t * width + xb)), d)
                    vstore(dx, row + xb, d)
                for xx in range(vector_end, width):
                    d = dx[row + xx]
                    for t in range(slots):
                        if valid[t * width + xx] > 0.5:
                            d = d + terms[t * width + xx]
                    dx[row + xx] = d


@njit(cache=True, inline='always')
def _unpadded_window(oy, ox, kh, kw, sh, sw, height, width):
    """Window bounds without padding (STOCHASTIC pooling takes none)."""
    hstart, wstart = oy * sh, ox * sw
    return hstart, min(hstart + kh, height), wstart, min(wstart + kw, width)


@njit(cache=True)
def stochastic_pool_train(x, kh, kw, sh, sw, out_h, out_w, u, y, mask):
    """Sample one position per window with probability x / sum(x) (x >= 0) using the uniform
    draws ``u`` (same shape as y); y gets its value, mask its flat index."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    hstart, hend, wstart, wend = _unpadded_window(oy, ox, kh, kw, sh, sw, height, width)
                    total = 0.0
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            total += x[n, c, yy, xx]
                    threshold = u[n, c, oy, ox] * total
                    acc = 0.0
                    chosen = hstart * width + wstart
                    value = x[n, c, hstart, wstart]
                    found = False
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            acc += x[n, c, yy, xx]
                            if not found and acc >= threshold:
                                chosen = yy * width + xx
                                value = x[n, c, yy, xx]
                                found = True
                    y[n, c, oy, ox] = value
                    mask[n, c, oy, ox] = chosen


@njit(cache=True)
def stochastic_pool_test(x, kh, kw, sh, sw, out_h, out_w, y):
    """Probability-weighted average: sum(x^2) / sum(x) per window."""
    n_img, channels, height, width = x.shape
    for n in range(n_img):
        for c in range(channels):
            for oy in range(out_h):
                for ox in range(out_w):
                    hstart, hend, wstart, wend = _unpadded_window(oy, ox, kh, kw, sh, sw, height, width)
                    s = 1.17549435e-38
                    sq = 0.0
                    for yy in range(hstart, hend):
                        for xx in range(wstart, wend):
                            v = x[n, c, yy, xx]
                            s += v
                            sq += v * v
                    y[n, c, oy, ox] = sq / s
