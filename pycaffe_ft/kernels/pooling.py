"""Max and average pooling over (N, C, H, W), Caffe's window and divisor rules.

Kernels take flat (1-D, C-contiguous) arrays holding ``planes`` (N*C) planes and the geometry
(``height, width, kh, kw, ph, pw, sh, sw, out_h, out_w``, or the window table of
:func:`window_taps`); they allocate at most a few planes of scratch and release the GIL, so
layers run them on several threads, one image range each. Every output gets Caffe's bits: max
pooling keeps the first maximum in row-major window order (strict >, from -FLT_MAX), average
pooling adds in row-major window order in float32, backward adds each output's terms in
row-major output order.

Six ways through the planes:

- **Small planes** (forward, AVX-512; :func:`_small_planes`): planes of at most 64 inputs and 16
  outputs (LeNet's pool2, CIFAR10-quick's pool3) **one plane a vector**, the plane's inputs in four
  sixteen-lane vectors and each window tap of all its outputs one pick from them by a table
  (``wpick``; average pooling at row stride 2 from the plane's even and odd rows, two vectors each,
  made first: :func:`_ave_plane_vector_by_parity`); planes at most 16 wide with rows of at most 8
  outputs (CIFAR10-quick's pool2, AlexNet's pool5) by **row pairs**, two output rows a vector and
  each tap one pick from the two input rows it reads (``wpick2``; max pooling with no padding keeps
  its argmax as the tap's offset in the window: :func:`_max_row_pairs_by_offsets`), and planes at
  most 32 wide with rows of at most 16 outputs (LeNet's pool1, CIFAR10-quick's pool1) by **single
  rows**, each tap one pick from the two halves of its input row; max pooling there by **window
  rows**: each input row's maxima over the window's columns, then each output row's over its window
  rows, a row two windows share reduced once (:func:`_max_single_rows`), and 3 x 3 max pooling at
  stride 2 of wider planes the same way by **wide rows**, sixteen outputs of a row a block
  (AlexNet's pool1, :func:`_pool_wide_rows`); max pooling's taps outside the image are read as
  repeats of the nearest inside ones, so that its picks need no select. Without AVX-512, 3 x 3 max
  pooling at strides 1 and 2 of planes at most 32 wide with rows of 8 outputs or more goes by
  **blocks by window rows**, the same reduction on blocks of eight outputs of a row, a block's
  output rows in turn (:func:`_max_blocks_by_window_rows`); 3 x 3 average pooling of such planes
  goes by **blocks**, each lane adding its window's taps in order, with a table of the taps inside
  the image and of the divisors (:func:`_ave_blocks3`). See :func:`_pool_small_planes`. These
  kernels apply a ReLU fused after the pooling as they store.
- **Rows** (forward, stride 1 or 2, output rows of ``ROWS_MIN_WIDTH`` or more: 6 for max, 12
  for average pooling): eight outputs of one row are the lanes of a vector, sixteen with
  AVX-512 on rows of ``SIXTEEN_FROM`` (9) or more (a shorter row: one block whose spare lanes
  the next row overwrites); a window tap is one load (stride 2: the even elements of 16, lanes
  in swizzled order; of 32 in order for sixteen lanes), and windows running past the image's
  left or right edge skip the missing columns lane by lane. (CIFAR10-quick's pool1 forward:
  2.3 -> 1.2 ms on one thread; AlexNet's 6-wide pool5 in-net 0.97 -> 0.67 ms against plane
  lanes. Sixteen lanes, in-net, alternated pass by pass: AlexNet's pool1 / pool2 forward 2.07
  -> 1.89 / 1.44 -> 1.24 ms, CIFAR10-quick's pool1 1.28 -> 1.15, LeNet's pool1 0.25 -> 0.22.)
  Max pooling rows of up to ``PAIRS_UP_TO`` (8) outputs go two rows a sixteen-lane vector where
  both rows' windows lie inside the image's rows (AlexNet's 6-wide pool5 forward in-net 0.46 ->
  0.41 ms, against 0.51 by sixteen plane lanes).
- **Plane lanes** (the forward of small planes or other strides, and the backward of average
  pooling where the next way does not go): eight planes (sixteen with AVX-512, ``PLANE_LANES``) are transposed into the lanes
  of one vector (8 x 8 transposes), so every output, at the edges too, is one vector sum or
  compare-and-select chain over its window's taps: from the table at the edges, at constant
  steps from the first tap where the window is inside the image (3 x 3 and 2 x 2 windows
  compiled as constants, so these taps unroll). (CIFAR10-quick's pool2 forward 1.6 -> 0.6 ms,
  backward 2.2 -> 0.6 ms, its 8 x 8 pool3 1.0 -> 0.13 ms; then with constant taps, one
  thread, alternated: its 3 x 3 average pools' forward 4.6-7.9 -> 10.4-11.3 GB/s; sixteen
  planes, in-net, alternated: its pool3 0.175 / 0.153 -> 0.155 / 0.140 ms forward / backward,
  LeNet's pool2 forward 0.092 -> 0.084.) Average pooling's backward gathers instead of
  scattering: each input adds the shares of the outputs covering it (a table padded with zero
  terms to one count), so it is stored once, straight from the transpose, instead of being
  zeroed and read-modified-written by every window over it (CIFAR10-quick's pool2 backward
  alone, alternated: 9.6 -> 15.8 GB/s, pool3 11.8 -> 17.2).
- **Output rows and plane vectors** (the backward of average pooling, AVX-512): planes 9 to 16
  wide under 3 x 3 or 2 x 2 windows at stride 2 go by output rows, a plane row one vector
  (:func:`_ave_pool_backward_rows`): each output row's column terms are permutes of the plane's
  shares dy / size, its sum is carried to the next output row, whose window shares a row with
  it, and every input row is stored once; planes of at most 64 inputs and 16 outputs go one
  plane a vector, each vector of sixteen inputs adding its covering shares picked from the
  plane's one vector of shares (:func:`_ave_pool_backward_plane_vectors`); under 3 x 3 windows
  at stride 2 with CEIL's outputs (CIFAR10-quick's 8 x 8 pool3) by parity, the four parities
  of input row and column each a sum of the shares and their shifts by one output, each input
  vector two permutes of those four (:func:`_ave_pool_backward_by_parity`; alone, hot, 55-70
  -> 47-49 us). All apply the backward of the ReLU below as they store. (CIFAR10-quick's pool2
  / pool3 backward alone, hot: 0.19 / 0.09 ms by plane lanes, 0.11 / 0.06 ms these ways; with
  the ReLU below's mask, a pass of its own before, 0.45 / 0.22 -> 0.15 / 0.08 ms.)
- **Scatter and gather** (the backward of max pooling): each output's dy added at its argmax,
  in output order, into a zeroed dx (:func:`_max_pool_backward`); 2 x 2 windows at stride 2,
  which never overlap, gather instead, each input stored once (:func:`_max_pool_gather`; with
  AVX-512 on planes of up to 1024 inputs by flat vectors, sixteen inputs of a plane in whatever
  rows they lie, dx written in order: :func:`_max_pool_gather_vectors`). Overlapping 3 x 3
  windows at stride 2 without padding gather too with AVX-512: a block of 32 input columns is
  its 16 even and 16 odd columns, whose candidate windows are the block's 16 outputs as they
  lie and shifted one lane, so each window row's terms are a compare and a masked add per
  column kind, and each input row is stored once (:func:`_max_pool_gather_3x3`; planes up to
  32 wide by way of scratch, copied to dx in whole vectors); planes at most 16 wide go two a
  vector, a block of 16 columns each (:func:`_max_pool_gather_3x3_pairs`). (A gather in eight
  lanes, a candidate window an input a compare and an add, had run as many instructions as the
  scatter and was 10-30% slower.)

**Bound calls**: ``max_pool_forward_calls`` and the other ``*_calls`` functions take the
arguments of the function they are named after and return ``[(function, arguments), ...]``,
the calls that function makes once its kernel is compiled, or None while it compiles in the
background (:func:`.tiered.ready`). A caller that pools the same arrays pass after pass (a
layer, each of its image ranges) binds them once and so skips choosing the kernel and building
its arguments on every pass: Python work that, in a pass whose other layers have evicted the
interpreter's data from the caches, cost 5-25 us an image range. With the layer's reshape
skipped where no shape changed, in-net, one thread, a 64 MB copy before each pass (as
``pycaffe-ft time`` runs), trees alternated: LeNet's pool1 / pool2 forward 172-195 / 61-66 ->
132-135 / 47-53 us, CIFAR10-quick's pool1 / pool2 / pool3 786-829 / 192-213 / 99-112 ->
682-721 / 149-164 / 81-96 us; backwards by less (AlexNet's pool1 1.54-1.61 -> 1.45-1.52 ms).
"""
import functools

import numpy as np
from numba import njit

from .simd import WIDE, prefetch, prefetch_to_write, vadd, vadd_if_eq, vadd_where_eq, vdiv, vfull, vkeep, vload, \
    vload_even_swizzled, vload_evens_odds_swizzled, vload_pairs, vmul, vramp, vrelu, vsplat, vstore, vsub, vtranspose, \
    vunswizzle, vwhere_gt, wfull, whalves, wload, wload_even, wload_even_rows, wload_rows, wpermute2, wpermute4, \
    wpick, wpick2, wramp, wramp_rows, wsplat, wstore, winterleave, wload_halves, wload_lanes, wstore_lanes, wzero
from . import numpy_references
from .relu import relu_forward
from .tiered import call, ready

_LOWEST = np.float32(-3.4028234663852886e38)  # -FLT_MAX, where Caffe's max pooling starts


def window_taps(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """The windows of one plane as a table: output o (row-major) reads the in-plane offsets
    ``offsets[starts[o]:starts[o + 1]]`` (its window clipped to the image, row-major), average
    pooling divides its sum by ``sizes[o]`` (the window clipped to the padded image, as Caffe
    counts), and ``covers`` (:func:`_covering_outputs`) lists the outputs whose windows hold
    each input. Built with NumPy once a geometry (no compiling at a cold start)."""
    h0 = np.arange(out_h, dtype=np.int64) * sh - ph
    w0 = np.arange(out_w, dtype=np.int64) * sw - pw
    h1, w1 = np.minimum(h0 + kh, height + ph), np.minimum(w0 + kw, width + pw)
    sizes = np.outer(h1 - h0, w1 - w0).astype(np.float32).reshape(-1)
    top, left = np.maximum(h0, 0), np.maximum(w0, 0)
    tall = np.maximum(0, np.minimum(h1, height) - top)
    wide = np.maximum(0, np.minimum(w1, width) - left)
    counts = np.outer(tall, wide).reshape(-1)
    starts = np.zeros(counts.size + 1, np.int64)
    np.cumsum(counts, out=starts[1:])
    # tap t of output o: row-major within its clipped window
    t = np.arange(starts[-1], dtype=np.int64) - np.repeat(starts[:-1], counts)
    columns = np.repeat(np.broadcast_to(wide, (out_h, out_w)).reshape(-1), counts)
    rows = np.repeat(np.repeat(top, out_w), counts) + t // np.maximum(columns, 1)
    offsets = rows * width + np.repeat(np.tile(left, out_h), counts) + t % np.maximum(columns, 1)
    covers = _covering_outputs(starts, offsets, height * width)
    return starts, offsets, sizes, covers, \
        _plane_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes), \
        _pair_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes), \
        _row_picks(height, width, kw, ph, pw, sh, sw, out_h, out_w), \
        _backward_rows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w), \
        _backward_plane_picks(covers, out_h * out_w), \
        _wide_row_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w), \
        _parity_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w), \
        _backward_parity_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w)


def _chunk_windows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes, per):
    """The windows of ``per`` output rows a sixteen-lane chunk (lanes 0 .. per * out_w - 1, in
    output order), tap t (row-major in the window) of chunk c's lane l at ``(c * taps + t) * 16 +
    l``: each lane's output row within its chunk, each tap's input row and column, whether the
    tap is inside the image (and the lane one of the chunk's outputs), and each lane's window
    size (1 past the outputs)."""
    chunks, lanes = -(-out_h // per), np.arange(16)
    second, ox = np.divmod(lanes, out_w)
    oy = per * np.arange(chunks)[:, None] + second  # (chunks, lanes)
    real = (second < per) & (oy < out_h)
    ky, kx = np.divmod(np.arange(kh * kw), kw)
    rows = oy[:, None] * sh - ph + ky[:, None]  # (chunks, taps, lanes)
    columns = np.broadcast_to(ox * sw - pw + kx[:, None], rows.shape)
    inside = (rows >= 0) & (rows < height) & (columns >= 0) & (columns < width) & real[:, None]
    lane_sizes = np.ones((chunks, 16), np.float32)
    lane_sizes[real] = sizes[(oy * out_w + ox)[real]]
    return second, rows, columns, inside, lane_sizes.reshape(-1)


def _if_repeats_serve(picks, height, width, ph, pw, sh, sw, out_h, out_w):
    """``picks`` (of taps :func:`_repeated`), or None where a last window lies wholly past the
    image (:func:`_last_windows_reach_the_image`): it has no tap to repeat."""
    return picks if _last_windows_reach_the_image(height, width, ph, pw, sh, sw, out_h, out_w) else None


def _repeated(rows, columns, height, width):
    """Each tap's row and column clamped into the image: max pooling's windows read a tap
    outside the image as a repeat of the nearest one inside it, in the same window, which wins
    nothing that one does not (see :func:`_max_single_rows`): so its picks need no select of an
    outside value."""
    return np.clip(rows, 0, height - 1), np.clip(columns, 0, width - 1)


def _plane_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes):
    """For planes of at most 64 inputs and 16 outputs (one plane a vector: one chunk of all
    out_h rows, :func:`_chunk_windows`): ``picks``, each tap's in-plane offset (int32; 64 where
    the tap is outside the image or the lane past the plane's outputs: average pooling's),
    ``positions``, the offsets of max pooling's taps as float32 (its argmax), the lanes' window
    sizes, and max pooling's picks: the offsets its taps read (int32; outside the image
    :func:`_repeated`; :func:`_if_repeats_serve`); None for larger planes."""
    if height * width > 64 or out_h * out_w > 16:
        return None
    _, rows, columns, inside, lane_sizes = _chunk_windows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes,
                                                          out_h)
    picks = np.where(inside, rows * width + columns, 64).astype(np.int32).reshape(-1)
    rows, columns = _repeated(rows, columns, height, width)
    offsets = rows * width + columns
    return picks, offsets.astype(np.float32).reshape(-1), lane_sizes, \
        _if_repeats_serve(offsets.astype(np.int32).reshape(-1), height, width, ph, pw, sh, sw, out_h, out_w)


def _parity_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """One plane a vector by row parity (average pooling at row stride 2; planes of at most 64
    inputs and 16 outputs whose even rows and odd rows each fit in 32 floats): ``picks[:64]``,
    the plane's elements in its even rows (the first 32) and its odd rows (the next 32), row
    after row; then for tap t (row-major in the window) of lane l, ``picks[64 + 16 t + l]``: its
    element of the 32 of its row's parity, (ky - ph) % 2, or 32 where the tap is outside the
    image or the lane past the outputs. None for other planes."""
    if height * width > 64 or out_h * out_w > 16 or sh != 2 or -(-height // 2) * width > 32:
        return None
    _, rows, columns, inside, _ = _chunk_windows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w,
                                                 np.ones(out_h * out_w, np.float32), out_h)
    split = np.zeros((2, 32), np.int64)
    for parity in (0, 1):
        elements = (np.arange(parity, height, 2)[:, None] * width + np.arange(width)).reshape(-1)
        split[parity, :elements.size] = elements
    picks = np.where(inside, (rows // 2) * width + columns, 32)
    return np.concatenate([split.reshape(-1), picks.reshape(-1)]).astype(np.int32)


def _pair_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, sizes):
    """Row pairs: for planes at most 16 wide with rows of at most 8 outputs, output rows 2 c and
    2 c + 1 (a chunk of :func:`_chunk_windows`) from two input rows each tap (row 2 c's and
    row 2 c + 1's window row ky, each loaded from its first column as sixteen floats); for planes
    at most 32 wide with rows of at most 16 outputs, output row c alone from its window row ky,
    loaded as two sixteen-float halves. ``picks[((c * kh + ky) * kw + kx) * 16 + l]``: lane l's
    element of those 32 (32 where outside the image or past the chunk's outputs: average
    pooling's); the offsets of max pooling's taps as float32; each lane's window size (1 past
    the outputs); the output rows a vector (2 or 1); and max pooling's picks, the elements its
    taps read (outside the image :func:`_repeated`, whose rows the loads clamp too;
    :func:`_if_repeats_serve`); and, for row pairs where no window is padded, max pooling's
    tables by tap offsets (:func:`_max_row_pairs_by_offsets`), else None: tap kx's picks
    ``[kx * 16 + l]``, the same in every window row and chunk, then the in-plane starts of the
    two rows each chunk's window row ky reads (``[16 * kw + 2 * (c * kh + ky) + i]``, clamped
    into the image), and each lane's window start ``[c * 16 + l]``. None for other planes, and
    for planes of more than 32 vectors (the tables stay in the caches)."""
    if width <= 16 and out_w <= 8:
        per = 2
    elif width <= 32 and out_w <= 16:
        per = 1
    else:
        return None
    if -(-out_h // per) > 32:
        return None
    second, rows, columns, inside, lane_sizes = _chunk_windows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w,
                                                               sizes, per)
    picks = np.where(inside, 16 * second + columns, 32).astype(np.int32)
    rows, columns = _repeated(rows, columns, height, width)
    positions = (rows * width + columns).astype(np.float32)
    repeats = _if_repeats_serve(np.minimum(16 * second + columns, 31).astype(np.int32), height, width, ph, pw, sh, sw,
                                out_h, out_w)
    by_offsets = None
    if repeats is not None and not ph and not pw and per == 2:
        starts = rows[:, ::kw][:, :, [0, out_w]] * width  # window row ky's first tap, each chunk's two rows
        by_offsets = (np.concatenate([repeats[0, :kw].reshape(-1), starts.reshape(-1)]).astype(np.int32),
                      np.ascontiguousarray(positions[:, 0]).reshape(-1))
    return picks.reshape(-1), positions.reshape(-1), lane_sizes, per, \
        None if repeats is None else repeats.reshape(-1), by_offsets


def _last_windows_reach_the_image(height, width, ph, pw, sh, sw, out_h, out_w):
    """Whether the last window of a row and of a column each hold a tap of the image (no
    padding and a stride above the window can leave one wholly past the right or bottom edge:
    Caffe gives it -FLT_MAX and -1, which the window-row kernels' repeated rows and columns
    would fill)."""
    return (out_w - 1) * sw - pw < width and (out_h - 1) * sh - ph < height


def _row_picks(height, width, kw, ph, pw, sh, sw, out_h, out_w):
    """Single rows by window rows (max pooling; the planes :func:`_pair_picks` takes one row a
    vector: at most 32 wide with rows of at most 16 outputs, not both at most 16 wide and 8
    outputs): ``picks[kx * 16 + l]``, the column of an input row that tap kx of output column l
    reads, clamped into the image (a column outside it repeats the nearest inside one, which is
    in the same window and next to the clamped taps in window order, so that it wins nothing
    the inside one does not: see :func:`_max_single_rows`), and the same columns as float32.
    None for other planes, and where a last window lies wholly past the image
    (:func:`_last_windows_reach_the_image`)."""
    if width > 32 or out_w > 16 or (width <= 16 and out_w <= 8):
        return None
    if not _last_windows_reach_the_image(height, width, ph, pw, sh, sw, out_h, out_w):
        return None
    columns = np.clip(np.arange(16)[None, :] * sw - pw + np.arange(kw)[:, None], 0, width - 1)
    columns[:, out_w:] = 0
    return columns.astype(np.int32).reshape(-1), columns.astype(np.float32).reshape(-1)


def _wide_row_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """Wide rows by window rows (max pooling, 3 x 3 windows at stride 2 on planes
    wider than 32: AlexNet's 55 x 55 pool1): blocks of sixteen outputs of a row, block b's
    outputs from ``min(16 b, out_w - 16)``, each window row of a block read as the 32 floats
    from the block's first column ``base`` and the float after them. For each block
    ``picks[b * 16 * (kw + 1):]`` (int32) holds ``base`` (lane 0) and then for each tap kx the
    column each lane reads less ``base``: 0 .. 31, and 32 (the float after) for the last tap
    only; ``positions[b * 16 * kw:]`` (float32) the same columns, not less ``base``. A column
    left of the image is read as column 0, the window's first in it (next to the taps clamped
    there, it wins nothing column 0 does not: see :func:`_max_single_rows`); one right of the
    image, which comes after every tap of its window in the image, as the window's first column
    (the last tap: as the image's last column), a repeat that wins nothing. None for other
    geometries."""
    if (kh, kw) != (3, 3) or sw != 2 or width <= 32 or out_w < 16:
        return None
    if not _last_windows_reach_the_image(height, width, ph, pw, sh, sw, out_h, out_w):
        return None
    blocks = -(-out_w // 16)
    firsts = np.minimum(16 * np.arange(blocks), out_w - 16)
    starts = (firsts[:, None, None] + np.arange(16)) * sw - pw  # (blocks, 1, lanes): each window's first column
    columns = np.broadcast_to(starts + np.arange(kw)[:, None], (blocks, kw, 16))
    columns = np.where(columns < width, np.maximum(columns, 0), starts)
    columns[:, -1] = np.minimum(starts[:, 0] + kw - 1, width - 1)
    bases = np.clip(firsts * sw - pw, 0, width - 32)
    picks = np.zeros((blocks, kw + 1, 16), np.int32)
    picks[:, 0, 0] = bases
    picks[:, 1:] = columns - bases[:, None, None]
    assert picks[:, 1:].min() >= 0 and picks[:, 1:-1].max() <= 31 and picks[:, -1].max() <= 32
    return picks.reshape(-1), columns.astype(np.float32).reshape(-1)


def _backward_rows(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """Average pooling's backward by output rows (:func:`_ave_pool_backward_rows`; AVX-512,
    square 3 x 3 or 2 x 2 windows at stride 2, planes 9 to 16 wide: a row one vector): the
    arguments after the plane count, ``(kh, height, width, ph, out_h, starts, picks)``.
    ``starts[m]``: where, in a plane's shares, the 32 begin (a multiple of 16) that output row
    m's column terms pick from; ``picks[(m * terms + j) * 16 + l]``: which of them is the j-th
    output of row m whose window holds column l (32: none, a zero term), ``terms`` the most
    outputs of a row holding one column (kw / sw rounded up). None for other geometries."""
    if kh != kw or sh != sw or sh != 2 or kh not in _AVE_POOL_BACKWARD_ROWS \
            or not BACKWARD_ROWS_WIDTHS[0] <= width <= BACKWARD_ROWS_WIDTHS[1]:
        return None
    terms = -(-kw // sw)
    column = np.arange(16)
    first = np.maximum(0, -((kw - 1 - column - pw) // sw))  # the first output whose window holds it
    ox = first + np.arange(terms).reshape(terms, 1)  # (terms, 16)
    held = (ox <= np.minimum(out_w - 1, (column + pw) // sw)) & (column < width)
    outputs = np.arange(out_h).reshape(out_h, 1, 1) * out_w + ox  # (out_h, terms, 16)
    lowest = np.where(held, outputs, np.iinfo(np.int64).max).min(axis=(1, 2))
    highest = np.where(held, outputs, -1).max(axis=(1, 2))
    starts = np.where(highest >= 0, lowest // 16 * 16, 0)
    if np.any(highest - starts >= 32):
        return None
    picks = np.where(held, outputs - starts[:, None, None], 32).astype(np.int32)
    return kh, height, width, ph, out_h, starts, picks.reshape(-1)


def _backward_plane_picks(covers, out_plane):
    """Average pooling's backward one plane a vector (:func:`_ave_pool_backward_plane_vectors`;
    planes of at most 64 inputs and 16 outputs): ``picks[(c * terms + j) * 16 + l]``, input
    16 c + l's j-th covering output (of :func:`_covering_outputs`; 16 for none, a zero term).
    None for larger planes."""
    in_plane, terms = covers.shape
    if in_plane > 64 or out_plane > 16:
        return None
    chunks = -(-in_plane // 16)
    picks = np.full((chunks * 16, terms), 16, np.int32)
    picks[:in_plane] = np.where(covers < out_plane, covers, 16)
    return picks.reshape(chunks, 16, terms).transpose(0, 2, 1).reshape(-1)


def _backward_parity_picks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """Average pooling's backward one plane a vector by parity (:func:`_ave_pool_backward_by_parity`;
    3 x 3 windows at stride 2 without padding, planes of at most 64 inputs and 16 outputs
    whose every input row and column r has an output row or column r // 2: even ones at most
    twice the outputs, as CEIL's rounding gives): ``shifts[16 k + l]``, the output lane l's
    neighbour to the left (k = 0), above (1) and above-left (2) comes from, or 16 (a zero
    term) where there is none; ``phases[16 v + l]``, where input 16 v + l of the plane lies
    among the four parity sums (even row and even column first, 16 lanes each, lane
    (r // 2) * out_w + c // 2). None for other planes."""
    if ((kh, kw, sh, sw, ph, pw) != (3, 3, 2, 2, 0, 0) or height * width > 64 or out_h * out_w > 16
            or height > 2 * out_h or width > 2 * out_w):
        return None
    lanes = np.arange(16)
    above, left = np.divmod(lanes, out_w)
    real = lanes < out_h * out_w
    shifts = np.concatenate([np.where(real & (left > 0), lanes - 1, 16),
                             np.where(real & (above > 0), lanes - out_w, 16),
                             np.where(real & (above > 0) & (left > 0), lanes - out_w - 1, 16)])
    rows, columns = np.divmod(np.arange(-(-height * width // 16) * 16), width)
    phases = ((rows % 2) * 2 + columns % 2) * 16 + (rows // 2) * out_w + columns // 2
    phases[height * width:] = 0  # past the plane: not stored
    return shifts.astype(np.int32), phases.astype(np.int32)


def _covering_outputs(starts, offsets, in_plane):
    """covers[p]: the outputs whose windows hold input p, in ascending (row-major) order, then
    ``out_plane`` (a zero term) up to the width of the most covered input, so that every input
    gathers the same number of terms."""
    out_plane = starts.size - 1
    outputs = np.repeat(np.arange(out_plane, dtype=np.int32), np.diff(starts))
    order = np.lexsort((outputs, offsets))  # by input, then by output
    count = np.bincount(offsets, minlength=in_plane)
    covers = np.full((in_plane, max(1, int(count.max(initial=0)))), out_plane, np.int32)
    first = np.zeros(in_plane, np.int64)
    np.cumsum(count[:-1], out=first[1:])
    inputs = offsets[order]
    covers[inputs, np.arange(inputs.size) - first[inputs]] = outputs[order]
    return covers


@njit(nogil=True)
def _to_lanes(x, first, lanes, size, xt, L):
    """xt[p * L + l] = x[(first + l) * size + p]: planes first .. first + lanes - 1 of x as the
    lanes of xt (the other lanes 0), L (8 or 16) lanes a position: 8 x 8 transposes. Called,
    not inlined: compiled once for all the plane-lane kernels of a width (a plane group a call;
    the same speed)."""
    base = first * size
    p = 0
    if lanes == L:
        while p + 8 <= size:
            for half in range(L // 8):
                at = base + half * 8 * size + p
                t = vtranspose(vload(x, at), vload(x, at + size), vload(x, at + 2 * size), vload(x, at + 3 * size),
                               vload(x, at + 4 * size), vload(x, at + 5 * size), vload(x, at + 6 * size),
                               vload(x, at + 7 * size))
                for r in range(8):
                    vstore(xt, (p + r) * L + half * 8, t[r])
            p += 8
    for q in range(p, size):
        for lane in range(L):
            xt[q * L + lane] = x[base + lane * size + q] if lane < lanes else np.float32(0.0)


@njit(nogil=True)
def _from_lanes(xt, first, lanes, size, x, L):
    """The inverse of :func:`_to_lanes`: lanes 0 .. lanes - 1 of xt back into their planes."""
    base = first * size
    p = 0
    if lanes == L:
        while p + 8 <= size:
            for half in range(L // 8):
                at = p * L + half * 8
                t = vtranspose(vload(xt, at), vload(xt, at + L), vload(xt, at + 2 * L), vload(xt, at + 3 * L),
                               vload(xt, at + 4 * L), vload(xt, at + 5 * L), vload(xt, at + 6 * L),
                               vload(xt, at + 7 * L))
                for r in range(8):
                    vstore(x, base + (half * 8 + r) * size + p, t[r])
            p += 8
    for q in range(p, size):
        for lane in range(lanes):
            x[base + lane * size + q] = xt[q * L + lane]


@njit(cache=True, nogil=True, inline='always')
def _inside(starts, o, kh, kw):
    """Whether output o's window lies wholly inside the image: then its taps are
    ``offsets[starts[o]] + ky * width + kx`` in row-major order, steps that unroll where kh and kw
    are constants (the table's loads and the loop's mispredicted exits were half the time of
    CIFAR10-quick's 3 x 3 average pools)."""
    return starts[o + 1] - starts[o] == kh * kw


@njit(cache=True, nogil=True, inline='always')
def _prefetch_next_planes(x, first, in_plane, out_plane, o, L):
    """While output o of planes first .. first + L - 1 is computed, prefetch its share of the
    next L planes' cache lines (all of them over the outputs): the plane-lane transpose then
    reads them from L1/L2, not from L3 or memory, where a layer's input usually is in a net.
    (Alone, one thread, alternated: CIFAR10-quick's 3 x 3 average pools' forward 1.3-1.5 ->
    0.8-0.9 ms for pool2 and 0.5-0.6 -> 0.3-0.4 ms for pool3 with the input out of the caches.)"""
    per = -(-in_plane * L // (16 * out_plane))  # 16 floats a line: L * in_plane / 16 lines over the outputs
    at = (first + L) * in_plane
    for line in range(o * per, (o + 1) * per):
        if at + line * 16 < x.size:
            prefetch(x, at + line * 16)


@njit(cache=True, nogil=True, inline='always')
def _max_tap(v, best, index, tap):
    """One tap of L max-pooling windows: (best, index) after value v at tap (strict >)."""
    return vwhere_gt(v, best, v, best), vwhere_gt(v, best, tap, index)


@njit(cache=True, nogil=True, inline='always')
def _max_pool_lanes(load, full, splat, L, x, planes, in_plane, width, kh, kw, starts, offsets, y, mask):
    """Max pooling L (8 or 16: ``load``, ``full``, ``splat`` of that width) planes at a time as
    vector lanes, the windows from the table; where a window is inside the image its taps are
    at constant steps and its argmax is kept relative to its first tap, made absolute at the
    end (a -1, no tap above -FLT_MAX, stays -1)."""
    out_plane = starts.size - 1
    float_offsets = offsets.astype(np.float32)  # the argmax values
    xt = np.empty(in_plane * L, np.float32)
    yt = np.empty(out_plane * L, np.float32)
    mt = np.empty(out_plane * L, np.float32)
    lowest = full(_LOWEST)
    for first in range(0, planes, L):
        lanes = min(L, planes - first)
        _to_lanes(x, first, lanes, in_plane, xt, L)
        for o in range(out_plane):
            _prefetch_next_planes(x, first, in_plane, out_plane, o, L)
            best = lowest
            index = full(np.float32(-1.0))
            t0 = starts[o]
            if _inside(starts, o, kh, kw):
                corner = offsets[t0]
                for ky in range(kh):
                    for kx in range(kw):
                        best, index = _max_tap(load(xt, (corner + ky * width + kx) * L), best, index,
                                               full(np.float32(ky * width + kx)))
                index = vwhere_gt(best, lowest, vadd(index, full(np.float32(corner))), index)
            else:
                for t in range(t0, starts[o + 1]):
                    best, index = _max_tap(load(xt, offsets[t] * L), best, index, splat(float_offsets, t))
            vstore(yt, o * L, best)
            vstore(mt, o * L, index)
        _from_lanes(yt, first, lanes, out_plane, y, L)
        _from_lanes(mt, first, lanes, out_plane, mask, L)


# Plane-lane kernels: 3 x 3 and 2 x 2 windows compiled as constants, eight or sixteen
# (``_wide``) planes a vector; each compiled on first use.
@njit(cache=True, nogil=True)
def _max_pool_lanes_3x3(x, planes, in_plane, width, starts, offsets, y, mask):
    _max_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, 3, 3, starts, offsets, y, mask)


@njit(cache=True, nogil=True)
def _max_pool_lanes_3x3_wide(x, planes, in_plane, width, starts, offsets, y, mask):
    _max_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, 3, 3, starts, offsets, y, mask)


@njit(cache=True, nogil=True)
def _max_pool_lanes_2x2(x, planes, in_plane, width, starts, offsets, y, mask):
    _max_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, 2, 2, starts, offsets, y, mask)


@njit(cache=True, nogil=True)
def _max_pool_lanes_2x2_wide(x, planes, in_plane, width, starts, offsets, y, mask):
    _max_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, 2, 2, starts, offsets, y, mask)


@njit(cache=True, nogil=True)
def _max_pool_lanes_any(x, planes, in_plane, width, kh, kw, starts, offsets, y, mask):
    _max_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, kh, kw, starts, offsets, y, mask)


@njit(cache=True, nogil=True)
def _max_pool_lanes_any_wide(x, planes, in_plane, width, kh, kw, starts, offsets, y, mask):
    _max_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, kh, kw, starts, offsets, y, mask)


@njit(cache=True, nogil=True, inline='always')
def _row_taps8(x, at, sw, apart):
    """Eight taps of one window row: x[at + sw * lane] (stride 2: in swizzled lane order)."""
    return vload(x, at) if sw == 1 else vload_even_swizzled(x, at)


@njit(cache=True, nogil=True, inline='always')
def _row_taps16(x, at, sw, apart):
    """Sixteen taps of one window row: x[at + sw * lane], in order."""
    return wload(x, at) if sw == 1 else wload_even(x, at)


@njit(cache=True, nogil=True, inline='always')
def _row_taps_pair(x, at, sw, apart):
    """Eight taps of one window row in lanes 0 .. 7 and of the row ``apart`` further in lanes
    8 .. 15 (two output rows in one vector), in order."""
    return wload_rows(x, at, apart) if sw == 1 else wload_even_rows(x, at, apart)


@njit(cache=True, nogil=True, inline='always')
def _in_order8(v, sw):
    """Eight lanes from :func:`_row_taps8`'s order to the outputs' (and back)."""
    return v if sw == 1 else vunswizzle(v)


@njit(cache=True, nogil=True, inline='always')
def _in_order16(v, sw):
    """Sixteen lanes from :func:`_row_taps16` or :func:`_row_taps_pair` are in the outputs'
    order already."""
    return v


@njit(cache=True, nogil=True, inline='always')
def _ramp8(start, step, apart):
    """start + lane * step over eight lanes (``apart`` unused: one row)."""
    return vramp(start, step)


@njit(cache=True, nogil=True, inline='always')
def _ramp16(start, step, apart):
    """start + lane * step over sixteen lanes (``apart`` unused: one row)."""
    return wramp(start, step)


@njit(cache=True, nogil=True, inline='always')
def _store_row(array, at, out_w, v):
    """The block's lanes into array[at:]."""
    vstore(array, at, v)


@njit(cache=True, nogil=True, inline='always')
def _store_pair(array, at, out_w, v):
    """Lanes 0 .. 7 into array[at:] and lanes 8 .. 15 into the next output row, out_w further
    (the first half's lanes past its row are overwritten by the second's)."""
    first, second = whalves(v)
    vstore(array, at, first)
    vstore(array, at + out_w, second)


# The row kernels take what they work with as their first arguments (``row_taps, in_order,
# full, ramp, store, block, apart``: the row-tap load, the lane order, splat, ramp, the store,
# a row's block width and how far apart in x two rows in one vector are) so that one body
# serves every width: _row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, 0 for blocks of
# eight outputs; _row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, 0 for sixteen
# (AVX-512); _row_taps_pair, _in_order16, wfull, wramp_rows, _store_pair, 8, sh * width for
# two output rows of up to eight in one vector (AVX-512). The window bodies themselves
# (:func:`_max_windows` or :func:`_ave_windows`, one signature) come to :func:`_pool_rows` as
# ``windows``, so that Numba inlines them into each kernel, not into _pool_rows first (see
# :mod:`pycaffe_ft.kernels`; LeNet's 2 x 2 max pooling kernel 2.8 -> 1.4 s to compile, the same
# machine code).


@njit(cache=True, nogil=True, inline='always')
def _inside_columns(in_order, full, ramp, block, v, ox, kx, pw, sw, width, outside):
    """v where tap kx of the lane's window (outputs ox .. ox + block - 1 of its row) is a column
    of the image, else ``outside`` (v itself where all of them are)."""
    if ox * sw + kx - pw >= 0 and (ox + block - 1) * sw + kx - pw < width:
        return v
    column = in_order(ramp(np.float32(ox * sw + kx - pw), np.float32(sw), np.float32(0.0)), sw)
    inside = vwhere_gt(full(np.float32(width) - np.float32(0.5)), column, v, outside)
    return vwhere_gt(column, full(np.float32(-0.5)), inside, outside)


@njit(cache=True, nogil=True, inline='always')
def _max_windows(row_taps, in_order, full, ramp, store, block, apart, x, in_base, hstart, rows, tall, width, kw, pw, sw,
                 ox, y, mask, o, out_w, masked):
    """Max pooling outputs o + ox .. of one output row (a block of 8 or 16, or of two rows;
    window rows hstart .. hstart + rows - 1 of the plane at in_base) as vector lanes. Each lane
    keeps the window position of its best value relative to the window's corner, made absolute
    at the end. With ``masked``, a column outside the image reads as -FLT_MAX, which never wins
    (strict >), as if skipped."""
    lowest = full(_LOWEST)
    best = lowest
    index = full(np.float32(-1.0))
    corner = hstart * width - pw + ox * sw
    for ky in range(rows):
        for kx in range(kw):
            rel = ky * width + kx
            v = row_taps(x, in_base + corner + rel, sw, apart)
            if masked:
                v = _inside_columns(in_order, full, ramp, block, v, ox, kx, pw, sw, width, lowest)
            index = vwhere_gt(v, best, full(np.float32(rel)), index)
            best = vwhere_gt(v, best, v, best)
    best, index = in_order(best, sw), in_order(index, sw)
    absolute = vadd(index, ramp(np.float32(corner), np.float32(sw), np.float32(apart)))
    store(y, o + ox, out_w, best)
    store(mask, o + ox, out_w, vwhere_gt(best, lowest, absolute, full(np.float32(-1.0))))


@njit(cache=True, nogil=True, inline='always')
def _ave_windows(row_taps, in_order, full, ramp, store, block, apart, x, in_base, hstart, rows, tall, width, kw, pw, sw,
                 ox, y, mask, o, out_w, masked):
    """Average pooling outputs o + ox .. of one output row (or two) as vector lanes: each lane's
    float32 sum over window rows hstart .. hstart + rows - 1 in row-major tap order (with
    ``masked``, a column outside the image adds +0, which leaves the sum's bits alone: it
    starts at +0 and so is never -0), divided by its window's size clipped to the padded image
    (``tall`` rows)."""
    zero = full(np.float32(0.0))
    total = zero
    corner = hstart * width - pw + ox * sw
    for ky in range(rows):
        for kx in range(kw):
            v = row_taps(x, in_base + corner + ky * width + kx, sw, apart)
            if masked:
                v = _inside_columns(in_order, full, ramp, block, v, ox, kx, pw, sw, width, zero)
            total = vadd(total, v)
    total = in_order(total, sw)
    left = ramp(np.float32(ox * sw - pw), np.float32(sw), np.float32(0.0))
    right = vadd(left, full(np.float32(kw)))
    limit = full(np.float32(width + pw))
    right = vwhere_gt(right, limit, limit, right)
    store(y, o + ox, out_w, vdiv(total, vmul(full(np.float32(tall)), vsub(right, left))))


@njit(cache=True, nogil=True, inline='always')
def _pair_windows(windows, x, in_base, hstart, width, kh, kw, pw, sh, sw, y, mask, o, out_w, masked):
    """Output rows oy and oy + 1 of a plane (rows of at most eight outputs; windows wholly
    inside the image's rows, kh tall, from rows hstart and hstart + sh) in one sixteen-lane
    vector, eight lanes a row, through ``windows``; ``masked`` where some windows run past
    the image's left or right edge."""
    windows(_row_taps_pair, _in_order16, wfull, wramp_rows, _store_pair, 8, sh * width, x, in_base, hstart, kh, kh,
            width, kw, pw, sw, 0, y, mask, o, out_w, masked)


@njit(cache=True, nogil=True, inline='always')
def _no_pair_windows(windows, x, in_base, hstart, width, kh, kw, pw, sh, sw, y, mask, o, out_w, masked):
    """Nothing: :func:`_pool_rows`' ``pair_windows`` where it never pairs rows."""


@njit(cache=True, nogil=True, inline='always', error_model='numpy')
def _one_window(x, in_base, hstart, hend, tall, width, kw, pw, sw, ox, y, mask, o, average):
    """Output o + ox alone (rows whose vector loads or stores would leave the array)."""
    wstart = ox * sw - pw
    wend = min(wstart + kw, width)
    best = _LOWEST
    best_idx = -1
    total = np.float32(0.0)
    for yy in range(hstart, hend):
        for xx in range(max(wstart, 0), wend):
            v = x[np.uint64(in_base + yy * width + xx)]
            total += v
            better = v > best
            best = v if better else best
            best_idx = yy * width + xx if better else best_idx
    if average:
        y[np.uint64(o + ox)] = total / np.float32(tall * (min(wstart + kw, width + pw) - wstart))
    else:
        y[np.uint64(o + ox)] = best
        mask[np.uint64(o + ox)] = best_idx


@njit(cache=True, nogil=True, inline='always')
def _prefetch_rows_ahead(x, base, size, first, count):
    """Prefetch lines first .. first + count - 1 of x[base:base + size] (16 floats a line)."""
    for line in range(first, min(first + count, -(-size // 16))):
        prefetch(x, base + line * 16)


@njit(cache=True, nogil=True, inline='always')
def _pool_rows(row_taps, in_order, full, ramp, store, block, windows, pair_windows, x, planes, height, width, kh, kw,
               ph, pw, sh, sw, out_h, out_w, y, mask, average, pairs):
    """Max (y, mask) or average (y; mask unused) pooling a block of 8 or 16 outputs of a row at
    a time (``block``; sw 1 or 2): rows of a block or more in blocks, the last block of a row
    overlapping the one before; shorter rows in one block whose lanes past the row are stored
    and then overwritten by the next row. Inlined with constant window sizes and stride where
    the caller has them, so that the tap loops unroll; rows whose windows lie inside the
    image's rows take a short way, with ``pairs`` two rows a vector (``pair_windows``: eight
    lanes only; :func:`_pair_windows`, or :func:`_no_pair_windows` where ``pairs`` is False, so
    that wide kernels do not compile it).
    The next plane's input is prefetched a few lines an output row (in a net it is seldom in
    the caches: in-net, one thread, CIFAR10-quick's pool1 forward 9.0 -> 11.8 GB/s, AlexNet's
    pool1 / pool2 8.0-8.9 -> 11.3-11.9 GB/s)."""
    lo = min(out_w, (pw + sw - 1) // sw)  # [lo, hi): windows inside the image's columns
    hi = max(lo, min(out_w, (width - kw + pw) // sw + 1))
    row_lanes = max(out_w, block)
    valid = min(out_w, block)
    reach = (row_lanes - block) * sw + kw - 1 + sw * block - 1  # read past a window row's first block
    in_plane = height * width
    per_row = -(-in_plane // (16 * out_h))  # the next plane's input lines, spread over the output rows
    top = min(out_h, -(-ph // sh))  # [top, bottom): windows inside the image's rows
    bottom = max(top, min(out_h, (height - kh + ph) // sh + 1))
    for plane in range(planes):
        in_base = plane * in_plane
        # whether rows top .. bottom - 1 of this plane stay inside x and y: then they take the
        # short way (no clipping, no checks, the window height a constant)
        inner = (bottom > top and in_base + (top * sh - ph) * width - pw >= 0
                 and in_base + ((bottom - 1) * sh - ph + kh - 1) * width - pw + reach < x.size
                 and (plane * out_h + bottom - 1) * out_w + row_lanes <= y.size)
        oy = 0
        while oy < out_h:
            if plane + 1 < planes:
                _prefetch_rows_ahead(x, in_base + in_plane, in_plane, oy * per_row, per_row)
            o = (plane * out_h + oy) * out_w
            if inner and top <= oy < bottom:
                hstart = oy * sh - ph
                hend, tall = hstart + kh, kh
                if pairs and oy + 1 < bottom:
                    if plane + 1 < planes:
                        _prefetch_rows_ahead(x, in_base + in_plane, in_plane, (oy + 1) * per_row, per_row)
                    pair_windows(windows, x, in_base, hstart, width, kh, kw, pw, sh, sw, y, mask, o, out_w,
                                 lo > 0 or valid > hi)
                    oy += 2
                    continue
            else:
                hstart = oy * sh - ph
                tall = min(hstart + kh, height + ph) - hstart
                hend = min(hstart + kh, height)
                hstart = max(hstart, 0)
                first = in_base + hstart * width - pw
                if first < 0 or first + (hend - hstart - 1) * width + reach >= x.size or o + row_lanes > y.size:
                    for ox in range(out_w):
                        _one_window(x, in_base, hstart, hend, tall, width, kw, pw, sw, ox, y, mask, o, average)
                    oy += 1
                    continue
            rows = hend - hstart
            for b in range((out_w + block - 1) // block):
                ox = min(block * b, row_lanes - block)
                if ox < lo or ox + valid > hi:
                    windows(row_taps, in_order, full, ramp, store, block, 0, x, in_base, hstart, rows, tall, width, kw,
                            pw, sw, ox, y, mask, o, out_w, True)
                elif rows == kh:  # the constant window height: its tap loops unroll
                    windows(row_taps, in_order, full, ramp, store, block, 0, x, in_base, hstart, kh, tall, width, kw,
                            pw, sw, ox, y, mask, o, out_w, False)
                else:
                    windows(row_taps, in_order, full, ramp, store, block, 0, x, in_base, hstart, rows, tall, width, kw,
                            pw, sw, ox, y, mask, o, out_w, False)
            oy += 1


# Max pooling by rows: window and stride constant where common (their tap loops unroll), eight
# or sixteen outputs a block; each compiled on first use.
@njit(cache=True, nogil=True)
def _max_pool_rows_3x3_stride_2(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask, pairs):
    _pool_rows(_row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, _max_windows, _pair_windows,
               x, planes, height, width, 3, 3, ph, pw, sh, 2, out_h, out_w, y, mask, False, pairs)


@njit(cache=True, nogil=True)
def _max_pool_rows_3x3_stride_2_wide(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask):
    _pool_rows(_row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, _max_windows, _no_pair_windows,
               x, planes, height, width, 3, 3, ph, pw, sh, 2, out_h, out_w, y, mask, False, False)


@njit(cache=True, nogil=True)
def _max_pool_rows_2x2_stride_2(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask, pairs):
    _pool_rows(_row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, _max_windows, _pair_windows,
               x, planes, height, width, 2, 2, ph, pw, sh, 2, out_h, out_w, y, mask, False, pairs)


@njit(cache=True, nogil=True)
def _max_pool_rows_2x2_stride_2_wide(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask):
    _pool_rows(_row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, _max_windows, _no_pair_windows,
               x, planes, height, width, 2, 2, ph, pw, sh, 2, out_h, out_w, y, mask, False, False)


@njit(cache=True, nogil=True)
def _max_pool_rows_3x3_stride_1(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask, pairs):
    _pool_rows(_row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, _max_windows, _pair_windows,
               x, planes, height, width, 3, 3, ph, pw, sh, 1, out_h, out_w, y, mask, False, pairs)


@njit(cache=True, nogil=True)
def _max_pool_rows_3x3_stride_1_wide(x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask):
    _pool_rows(_row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, _max_windows, _no_pair_windows,
               x, planes, height, width, 3, 3, ph, pw, sh, 1, out_h, out_w, y, mask, False, False)


@njit(cache=True, nogil=True)
def _max_pool_rows_any(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, pairs):
    _pool_rows(_row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, _max_windows, _pair_windows,
               x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, False, pairs)


@njit(cache=True, nogil=True)
def _max_pool_rows_any_wide(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask):
    _pool_rows(_row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, _max_windows, _no_pair_windows,
               x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, False, False)


@njit(cache=True, nogil=True, error_model='numpy')  # 0 / 0: NaN, as in Caffe
def _ave_pool_rows(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, pairs):
    _pool_rows(_row_taps8, _in_order8, vfull, _ramp8, _store_row, 8, _ave_windows, _pair_windows,
               x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, y, True, pairs)


@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_rows_wide(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y):
    _pool_rows(_row_taps16, _in_order16, wfull, _ramp16, _store_row, 16, _ave_windows, _no_pair_windows,
               x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, y, True, False)


_MAX_POOL_ROWS = {(3, 3, 2): (_max_pool_rows_3x3_stride_2, _max_pool_rows_3x3_stride_2_wide),
                  (2, 2, 2): (_max_pool_rows_2x2_stride_2, _max_pool_rows_2x2_stride_2_wide),
                  (3, 3, 1): (_max_pool_rows_3x3_stride_1, _max_pool_rows_3x3_stride_1_wide)}

# The narrowest output rows that go by rows: narrower ones leave lanes idle, and eight planes
# as lanes do better. In-net, one thread: AlexNet's 6-wide max pool5 0.97 -> 0.67 ms by rows;
# CIFAR10-quick's 8-wide average pool2 0.79 (lanes) against 0.84 ms, its 4-wide pool3 0.50
# against 0.84 ms; a 16-wide average pool (cold caches) 2.6 -> 2.1 ms by rows.
ROWS_MIN_WIDTH = {False: 6, True: 12}  # by ``average``

PLANE_LANES = 16 if WIDE else 8
"""Planes a vector in the plane-lane kernels: sixteen with AVX-512."""

PAIRS_UP_TO = 8 if WIDE else 0
"""The widest output rows pooled two rows a vector (eight lanes each, AVX-512 only)."""

PLANE_VECTORS = WIDE
"""Whether planes of at most 64 inputs and 16 outputs are pooled one plane a vector
(AVX-512 only), before rows or plane lanes are considered."""

ROW_PAIRS = WIDE
"""Whether planes at most 16 wide with rows of at most 8 outputs are pooled two output rows a
vector, and planes at most 32 wide with rows of at most 16 outputs one row a vector (AVX-512
only; after one plane a vector, before rows or plane lanes)."""

BACKWARD_ROWS = WIDE
"""Whether average pooling's backward goes by output rows where the window and width suit
(:func:`_backward_rows`; AVX-512 only: each term of a row is one permute), before plane lanes."""

BACKWARD_PARITY = True
"""Whether average pooling's backward goes one plane a vector by parity where
:func:`_backward_parity_picks` has tables (and :data:`PLANE_VECTORS` is on), before one plane a
vector by covering shares."""

BACKWARD_ROWS_WIDTHS = (9, 16)
"""The planes' widths whose average pooling backward goes by output rows: a row one sixteen-lane
vector, of which an 8-wide row would leave half idle (CIFAR10-quick's 8 x 8 pool3 alone, hot:
0.09 ms by plane lanes, 0.11 by output rows, 0.14 two rows a vector). Wider rows in several
vectors ran at 0.15 ms where one vector ran at 0.11 (its 16 x 16 pool2)."""

WIDE_ROWS = WIDE
"""Whether 3 x 3 max pooling at stride 2 of planes wider than 32 goes by wide rows by window
rows (:func:`_wide_row_picks`; AVX-512). Hot, one thread, against rows: AlexNet's 55 x 55 pool1
765-790 -> 530-610 ns a plane (all 1536: 1180-1260 -> 860-950 us), 112 x 112 planes 190 -> 135
us for 64; in-net, where AlexNet's pool1 reads its 19 MB input from memory, the same 1.5-1.6
ms. 2 x 2 windows, which share no row, were slower (224 x 224 planes: 505 -> 556 us for 64)."""

BLOCKS_BY_WINDOW_ROWS = not WIDE
"""Whether 3 x 3 pooling of small planes goes by blocks of eight (max pooling by window rows;
:func:`_by_blocks`; without AVX-512, where single rows and row pairs are not taken)."""

BLOCKS_UP_TO = 32
"""The widest planes pooled by blocks by window rows (wider ones, whose rows leave the L1 cache
between a block and the next, go by rows: AlexNet's 55 x 55 pool1 4.1-4.2 -> 4.2-4.5 ms by
blocks on Zen 3, one thread, 256 of GoogLeNet's 112 x 112 planes 1.2-1.4 -> 1.5-1.6 ms)."""

PLANE_AHEAD = 2048
"""How far ahead (floats) the small-plane kernels prefetch their input, for planes under
``AT_ONCE_FROM`` floats."""

AT_ONCE_FROM = 512 if WIDE else None
"""Planes of this many floats and more are prefetched as they start (AVX-512 hosts, where it was
measured), each plane's lines all at once just before it is pooled (ahead 0). In-net, caches
evicted before each pass (as ``pycaffe-ft time`` measures), one thread, passes alternated,
against 8 KB ahead: CIFAR10-quick's 32 x 32 pool1 forward 0.93-0.95 -> 0.75 ms, AlexNet's 27 x
27 pool2 0.85-0.93 -> 0.70-0.73, LeNet's 24 x 24 pool1 0.18 -> 0.165 (with no prefetch at all:
0.91-0.96, 0.90); but CIFAR10-quick's 16 x 16 and 8 x 8 average pools 0.235 / 0.112 -> 0.252 /
0.122 ms, so smaller planes keep ``PLANE_AHEAD``."""


def _ahead(height, width):
    """The ``ahead`` the small-plane kernels take for planes of this size."""
    return 0 if AT_ONCE_FROM is not None and height * width >= AT_ONCE_FROM else PLANE_AHEAD


SIXTEEN_FROM = 9 if WIDE else None
"""The narrowest output rows pooled sixteen outputs a block (AVX-512 only; narrower rows fit
one eight-output block)."""


def _by_rows(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, average):
    """(kernel, arguments) by rows where rows suit this geometry (max pooling with constant
    windows where common; average pooling, by rows only on wide planes, with any), else None."""
    if out_w < ROWS_MIN_WIDTH[average] or sw > 2:
        return None
    wide = int(SIXTEEN_FROM is not None and out_w >= SIXTEEN_FROM)
    pairs = () if wide else (out_w <= PAIRS_UP_TO,)
    if average:
        return ((_ave_pool_rows, _ave_pool_rows_wide)[wide],
                (x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, *pairs))
    if (kh, kw, sw) in _MAX_POOL_ROWS:
        return _MAX_POOL_ROWS[kh, kw, sw][wide], (x, planes, height, width, ph, pw, sh, out_h, out_w, y, mask, *pairs)
    return ((_max_pool_rows_any, _max_pool_rows_any_wide)[wide],
            (x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, *pairs))


def _window_kernel(kernels, kh, kw):
    """From (2 x 2 kernel, 3 x 3 kernel, any window's kernel): the one for this window and the
    window arguments it takes (none where the window is compiled in, else kh and kw)."""
    if (kh, kw) in ((2, 2), (3, 3)):
        return kernels[kh - 2], ()
    return kernels[2], (kh, kw)


def _small_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, mask, average, relu):
    """(kernel, arguments) one plane a vector, by single rows by window rows (max pooling) or by
    row pairs (AVX-512), or by blocks (by window rows for max pooling; without AVX-512), where
    the planes are small enough, else None. These kernels apply a ReLU fused after the pooling
    (``relu``) as they store y."""
    ahead = _ahead(height, width)
    if PLANE_VECTORS and average and taps[10] is not None:
        kernel, window = _window_kernel(_AVE_PARITY_PLANE_VECTORS, kh, kw)
        return kernel, (x, planes, height, width, *window, ph, out_h, out_w, taps[10], taps[4][2], y, ahead,
                        relu)
    if PLANE_VECTORS and taps[4] is not None and (average or taps[4][3] is not None):
        picks, positions, sizes, repeats = taps[4]
        if average:
            return _ave_pool_plane_vectors, (x, planes, height, width, out_h, out_w, picks, sizes, y, ahead,
                                             relu)
        return (_max_pool_plane_vectors,
                (x, planes, height, width, out_h, out_w, repeats, positions, y, mask, ahead, relu))
    if ROW_PAIRS and not average and taps[6] is not None:
        kernel, window = _window_kernel(_SINGLE_ROWS, kh, kw)
        picks, positions = taps[6]
        return kernel, (x, planes, height, width, *window, ph, sh, out_h, out_w, 1, picks, positions, y, mask,
                        ahead, relu)
    if WIDE_ROWS and not average and taps[9] is not None:
        picks, positions = taps[9]
        return _max_pool_wide_rows_3x3, (x, planes, height, width, ph, sh, out_h, out_w, picks, positions, y, mask,
                                         relu)
    if BLOCKS_BY_WINDOW_ROWS and _by_blocks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
        if average:
            return ((_ave_pool_blocks_3x3_stride_1, _ave_pool_blocks_3x3_stride_2)[sw - 1],
                    (x, planes, height, width, ph, pw, sh, out_h, out_w,
                     _ave_block_table(height, width, ph, pw, sh, sw, out_h, out_w), y, ahead, relu))
        return _max_pool_blocks_3x3, (x, planes, height, width, ph, pw, sh, sw, out_h, out_w, y, mask, ahead,
                                      relu)
    if ROW_PAIRS and taps[5] is not None and (average or taps[5][4] is not None):
        picks, positions, sizes, per, repeats, by_offsets = taps[5]
        if not average and by_offsets is not None:
            kernel, window = _window_kernel(_MAX_ROW_PAIRS_BY_OFFSETS, kh, kw)
            tables = (*by_offsets, y, mask)
        else:
            kernel, window = _window_kernel(_ROW_PAIRS[average], kh, kw)
            tables = (picks, sizes, y) if average else (repeats, positions, y, mask)
        return kernel, (x, planes, height, width, *window, ph, sh, out_h, out_w, per, *tables, ahead, relu)
    return None


def max_pool_forward(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, mask, relu=False):
    """y and mask (flat argmax index into H*W, as float) hold planes*out_h*out_w values;
    ``taps`` is :func:`window_taps` of this geometry; with ``relu``, y then goes through a ReLU
    (:func:`~.relu.relu_forward`'s rule; the mask is unchanged). Small planes go one plane a
    vector, by single rows or by row pairs (AVX-512), or by blocks by window rows (without it;
    these small-plane kernels apply the ReLU as they store y), rows of 6 or more outputs at
    stride 1 or 2 by rows, the others by plane lanes; while that kernel compiles in the
    background (:mod:`.tiered`), by :func:`.numpy_references.max_pool_caffe`."""
    _run_forward(_max_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y,
                                        mask, relu), y, relu)


def max_pool_forward_calls(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, mask,
                           relu=False):
    """:func:`max_pool_forward` bound to its arrays (see "Bound calls" in the
    module's docstring)."""
    return _forward_calls(_max_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps,
                                                 y, mask, relu), y, relu)


def _max_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, mask, relu):
    """(kernel, its arguments, whether it applies the ReLU, reference, its arguments) of
    :func:`max_pool_forward`."""
    small = _small_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, mask, False, relu)
    kernel, args = (small
                    or _by_rows(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, False)
                    or _by_plane_lanes(((_max_pool_lanes_2x2, _max_pool_lanes_2x2_wide),
                                        (_max_pool_lanes_3x3, _max_pool_lanes_3x3_wide)),
                                       (_max_pool_lanes_any, _max_pool_lanes_any_wide),
                                       x, planes, height, width, kh, kw, taps[:2], y, mask))
    return (kernel, args, small is not None, numpy_references.max_pool_caffe,
            (x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask))


def ave_pool_forward(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, relu=False):
    """y holds planes*out_h*out_w averages; ``taps`` is :func:`window_taps` of this geometry;
    ``relu`` as for :func:`max_pool_forward`. Small planes go one plane a vector or by row pairs
    (AVX-512) or by blocks (3 x 3 windows, without AVX-512), rows of 12 or more outputs at stride
    1 or 2 by rows, the others by plane lanes;
    while that kernel compiles in the background (:mod:`.tiered`), by
    :func:`.numpy_references.ave_pool_caffe`."""
    _run_forward(_ave_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y,
                                        relu), y, relu)


def ave_pool_forward_calls(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, relu=False):
    """:func:`ave_pool_forward` bound to its arrays (see "Bound calls" in the
    module's docstring)."""
    return _forward_calls(_ave_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps,
                                                 y, relu), y, relu)


def _ave_pool_forward_plan(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, relu):
    """(kernel, its arguments, whether it applies the ReLU, reference, its arguments) of
    :func:`ave_pool_forward`."""
    small = _small_planes(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, taps, y, y, True, relu)
    kernel, args = (small
                    or _by_rows(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, y, True)
                    or _by_plane_lanes(((_ave_pool_lanes_2x2, _ave_pool_lanes_2x2_wide),
                                        (_ave_pool_lanes_3x3, _ave_pool_lanes_3x3_wide)),
                                       (_ave_pool_lanes_any, _ave_pool_lanes_any_wide),
                                       x, planes, height, width, kh, kw, taps[:3], y))
    return (kernel, args, small is not None, numpy_references.ave_pool_caffe,
            (x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y))


def _run_forward(plan, y, relu):
    """Run a forward ``plan`` (of :func:`_max_pool_forward_plan` or :func:`_ave_pool_forward_plan`):
    its kernel where :func:`.tiered.ready`, else its reference; then, with ``relu``, y through a
    ReLU pass unless the kernel that ran applied it."""
    kernel, args, fuses_relu, reference, reference_args = plan
    if ready(kernel, args):
        kernel(*args)
        relu = relu and not fuses_relu
    else:
        reference(*reference_args)
    if relu:
        relu_forward(y, y)


def _forward_calls(plan, y, relu):
    """The bound calls of a forward ``plan``: its kernel, then a ReLU pass over y where ``relu``
    and the kernel does not apply it; None while the kernel compiles."""
    kernel, args, fuses_relu = plan[:3]
    calls = _bound(kernel, args)
    if calls is not None and relu and not fuses_relu:
        calls.append((relu_forward, (y, y)))
    return calls


def _bound(kernel, args):
    """``[(kernel, args)]`` where :func:`.tiered.ready`, else None (see "Bound calls" in the
    module's docstring)."""
    return [(kernel, args)] if ready(kernel, args) else None


def _by_plane_lanes(constant, general, x, planes, height, width, kh, kw, tables, *outputs):
    """(kernel, arguments) by plane lanes: :func:`_window_kernel` of the plane-lane kernels, each
    given as (eight planes a vector, sixteen), the width by :data:`PLANE_LANES`, with the
    window ``tables`` (of :func:`window_taps`) and ``outputs`` (y, or y and mask)."""
    wide = int(PLANE_LANES == 16)
    kernel, window = _window_kernel((constant[0][wide], constant[1][wide], general[wide]), kh, kw)
    return kernel, (x, planes, height * width, width, *window, *tables, *outputs)


def ave_pool_backward(dy, planes, taps, dx, x=None):
    """dx (overwritten) = for each input, the sum of dy / window size over the outputs whose
    windows hold it, in ascending output order (Caffe's order: it adds each output's share over
    its window, outputs in row-major order, into a zeroed dx); ``taps`` is :func:`window_taps`
    of this geometry. Given the bottom data ``x``, dx goes through the backward of a ReLU on x
    (:func:`~.relu.relu_backward`'s rule) as it is stored. Small planes go one plane a vector
    (by parity under 3 x 3 windows at stride 2 where every input has an output at half its
    row and column), planes 9 to 16 wide under 3 x 3 or 2 x 2 windows at stride 2 by output
    rows (AVX-512), the others by plane lanes. While the kernel compiles in the background
    (:mod:`.tiered`), by its NumPy reference."""
    call(*_ave_pool_backward_plan(dy, planes, taps, dx, x))


def ave_pool_backward_calls(dy, planes, taps, dx, x=None):
    """:func:`ave_pool_backward` bound to its arrays (see "Bound calls" in the module's
    docstring)."""
    kernel, _, *args = _ave_pool_backward_plan(dy, planes, taps, dx, x)
    return _bound(kernel, tuple(args))


def _ave_pool_backward_plan(dy, planes, taps, dx, x):
    """(kernel, reference, their arguments...) of :func:`ave_pool_backward`."""
    sizes, covers, rows, plane_picks = taps[2], taps[3], taps[7], taps[8]
    if PLANE_VECTORS and BACKWARD_PARITY and taps[11] is not None:
        return (_ave_pool_backward_by_parity, numpy_references.ave_pool_backward_by_parity, dy, planes, sizes, covers,
                *taps[11], dx, x)
    if PLANE_VECTORS and plane_picks is not None:
        return (_AVE_POOL_BACKWARD_PLANE_VECTORS.get(covers.shape[1], _ave_pool_backward_plane_vectors_any),
                numpy_references.ave_pool_backward_plane_vectors, dy, planes, sizes, covers, plane_picks, dx, x)
    if BACKWARD_ROWS and rows is not None:
        window, height, width, ph, out_h, starts, picks = rows
        return (_AVE_POOL_BACKWARD_ROWS[window], numpy_references.ave_pool_backward_rows, dy, planes, height, width,
                ph, out_h, sizes, covers, starts, picks, dx, x)
    kernel = _AVE_POOL_BACKWARD.get(covers.shape[1], (_ave_pool_backward_any, _ave_pool_backward_any_wide))
    return kernel[int(PLANE_LANES == 16)], numpy_references.ave_pool_backward, dy, planes, sizes, covers, dx, x


def max_pool_backward(dy, mask, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, dx, x=None):
    """dx (overwritten) receives each dy at its argmax, outputs in row-major order; given the
    bottom data ``x``, dx goes through the backward of a ReLU on x (:func:`~.relu.relu_backward`'s
    rule), plane by plane while it is in the caches. While the kernel compiles in the background
    (:mod:`.tiered`), by its NumPy reference. 2 x 2 windows at stride 2 without padding, on
    planes at least 8 wide, by gathering (:func:`_max_pool_gather`; by flat vectors where
    :func:`_gather_vectors` has a table, AVX-512), and 3 x 3 ones with AVX-512
    (:func:`_max_pool_gather_3x3`, :func:`_max_pool_gather_3x3_pairs`); the other geometries
    scatter. (One plane a vector, as average pooling's backward goes for small planes, was
    slower than both: LeNet's pool2 backward 0.04 -> 0.07 ms, 3 x 3 windows on 8 x 8 planes
    0.05 -> 0.10.)"""
    call(*_max_pool_backward_plan(dy, mask, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, dx, x))


def max_pool_backward_calls(dy, mask, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, dx, x=None):
    """:func:`max_pool_backward` bound to its arrays (see "Bound calls" in the module's
    docstring)."""
    kernel, _, *args = _max_pool_backward_plan(dy, mask, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w,
                                               dx, x)
    return _bound(kernel, tuple(args))


def _max_pool_backward_plan(dy, mask, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, dx, x):
    """(kernel, reference, their arguments...) of :func:`max_pool_backward`."""
    args = (dy, mask, planes, height * width, out_h * out_w, dx, x)
    apart = (kh, kw, sh, sw, ph, pw) == (2, 2, 2, 2, 0, 0)
    vectors = _gather_vectors(height, width, out_h, out_w) if apart and GATHER_VECTORS else None
    if vectors is not None:
        return (_max_pool_gather_vectors, numpy_references.max_pool_backward, *args, *vectors)
    if apart and width >= 8:
        return (_max_pool_gather, numpy_references.max_pool_backward, *args, width, out_w)
    if (kh, kw, sh, sw, ph, pw) == (3, 3, 2, 2, 0, 0) and GATHER_3X3:
        kernel = (_max_pool_gather_3x3_pairs if width < GATHER_3X3_FROM else
                  _max_pool_gather_3x3_scratch if width <= GATHER_3X3_SCRATCH_UP_TO else _max_pool_gather_3x3)
        return (kernel, numpy_references.max_pool_backward, *args, height, width, out_h, out_w)
    return (_max_pool_backward, numpy_references.max_pool_backward, *args)


@njit(cache=True, nogil=True, inline='always')
def _mask_plane_by_relu(dx, x, at, size):
    """dx[at:at + size] times 1 where x > 0, else times 0 (the backward of the ReLU below,
    :func:`~.relu.relu_backward`'s rule), eight at a time, where x is not None (a type of its
    own: the kernels compile without it). (As a plain loop, which LLVM did not vectorize, it
    made the max pooling backward slower than the ReLU's own pass after it.)"""
    if x is not None:
        zero, one = vfull(np.float32(0.0)), vfull(np.float32(1.0))
        p = at
        while p + 8 <= at + size:
            vstore(dx, p, vmul(vload(dx, p), vwhere_gt(vload(x, p), zero, one, zero)))
            p += 8
        for q in range(p, at + size):
            dx[q] = dx[q] * (np.float32(1.0) if x[q] > 0 else np.float32(0.0))


@njit(cache=True, nogil=True, inline='always')
def _gather_block(dy, mask, dx, in_base, out_base, start, height, width, out_h, out_w):
    """Eight columns of one plane from ``start`` (even), down the rows: output row oy's dy and
    mask, at the outputs whose windows hold them (start // 2 + lane // 2), loaded once as pairs
    of lanes, give rows 2 oy and 2 oy + 1: each input its dy where the mask is its plane index,
    else +0. Rows below the last window: +0."""
    zero = vfull(np.float32(0.0))
    p = vadd(vramp(np.float32(0.0), np.float32(1.0)), vfull(np.float32(start)))
    row, two_rows = vfull(np.float32(width)), vfull(np.float32(2 * width))
    d, at = in_base + start, out_base + start // 2
    for oy in range(out_h):
        taken, values = vload_pairs(mask, at), vload_pairs(dy, at)
        vstore(dx, d, vadd_where_eq(zero, taken, p, values))
        if 2 * oy + 1 < height:
            vstore(dx, d + width, vadd_where_eq(zero, taken, vadd(p, row), values))
        p = vadd(p, two_rows)
        d += 2 * width
        at += out_w
    for _ in range(2 * out_h, height):
        vstore(dx, d, zero)
        d += width


@njit(cache=True, nogil=True, inline='always')
def _gather_column(dy, mask, dx, in_base, out_base, x, height, width, out_h, out_w):
    """:func:`_gather_block` for one column x, element by element (its window: x // 2, if the
    row has it)."""
    inside = x // 2 < out_w
    p = np.float32(x)
    d, at = in_base + x, out_base + x // 2
    for oy in range(out_h):
        dx[d] = np.float32(0.0) + dy[at] if inside and mask[at] == p else np.float32(0.0)  # -0: +0
        if 2 * oy + 1 < height:
            dx[d + width] = np.float32(0.0) + dy[at] if inside and mask[at] == p + width else np.float32(0.0)
        p += np.float32(2 * width)
        d += 2 * width
        at += out_w
    for _ in range(2 * out_h, height):
        dx[d] = 0.0
        d += width


@njit(cache=True, nogil=True)
def _max_pool_gather(dy, mask, planes, in_plane, out_plane, dx, x, width, out_w):
    """:func:`max_pool_backward` of 2 x 2 windows at stride 2 without padding, by gathering:
    each input, under one window at most, is its dy where its mask took it, else +0 (Caffe's
    bits: its zeroed dx plus that dy; +0 + -0 is +0), so it is stored once, where the scatter
    zeroed dx and then read-modified-wrote an input per output (LeNet's pool1, 1280 planes,
    hot: 0.145 -> 0.09 ms). Eight inputs of a row are a vector (columns from an even one), a
    block of them going down the plane (:func:`_gather_block`; row by row of outputs, across
    the blocks, was slower: 0.12 ms); a last block is shifted back to end at the plane's last
    even column (its inputs written again, the same bits); a column left after it, or in a
    block whose windows would run past the row, one by one."""
    height, out_h = in_plane // width, out_plane // out_w
    blocks = np.empty(width // 8 + 1, np.int64)
    count = 0
    for start in range(0, width - 7, 8):
        if start // 2 + 3 <= out_w - 1:  # its windows inside the row
            blocks[count] = start
            count += 1
    last = (width - 8) & ~1
    if width % 8 and last // 2 + 3 <= out_w - 1:
        blocks[count] = last
        count += 1
    blocks = blocks[:count]
    by_vector = np.zeros(width, np.bool_)
    for start in blocks:
        by_vector[start:start + 8] = True
    columns = np.flatnonzero(~by_vector)
    for plane in range(planes):
        in_base, out_base = plane * in_plane, plane * out_plane
        for start in blocks:
            _gather_block(dy, mask, dx, in_base, out_base, start, height, width, out_h, out_w)
        for column in columns:
            _gather_column(dy, mask, dx, in_base, out_base, column, height, width, out_h, out_w)
        _mask_plane_by_relu(dx, x, in_base, in_plane)


@njit(cache=True, nogil=True, inline='always')
def _gather_window_row(values, taken, values_before, taken_before, p, even, odd):
    """(even, odd) plus one window row's terms, for the inputs of a row (kx = 0 at offset p,
    lane l's in-plane offset): lane l of ``even`` (input column 2 l from the block's first)
    adds the output before's dy where its mask took it (its kx = 2: ``values_before`` and
    ``taken_before``, the outputs shifted one lane), then its own output's (its kx = 0); lane l
    of ``odd`` (column 2 l + 1), its own output's (kx = 1). A term the mask did not take is
    not added (``vadd_if_eq``: the sums begin at +0)."""
    even = vadd_if_eq(vadd_if_eq(even, taken_before, p, values_before), taken, p, values)
    return even, vadd_if_eq(odd, taken, vadd(p, wfull(np.float32(1.0))), values)


@njit(cache=True, nogil=True, inline='always')
def _lanes_masked_by_relu(t, x, at, count):
    """:func:`_masked_by_relu` of t's first ``count`` lanes (x read there alone: a masked load)."""
    if x is not None:
        zero = wzero()
        return vmul(t, vwhere_gt(wload_lanes(x, at, 0, count, zero), zero, wfull(np.float32(1.0)), zero))
    return t


@njit(cache=True, nogil=True, inline='always')
def _store_gathered_row(gathered, d, columns, even, odd):
    """gathered[d:d + columns] (at most 32) = the even and odd columns interleaved."""
    low, high = winterleave(even, odd)
    wstore_lanes(gathered, d, low, columns)
    wstore_lanes(gathered, d + 16, high, columns - 16)


@njit(cache=True, nogil=True, inline='always')
def _copy_gathered_plane(gathered, source, in_plane, dx, start, x):
    """dx[start:start + in_plane] = gathered[source:source + in_plane] in whole vectors (the
    last one masked), each times 1 where x > 0 else 0 where x is not None (the ReLU below's
    backward). (The gathers' rows stored into dx as they were made, masked at the row's end,
    went slower in-net than this copy from scratch: AlexNet's pool5 11.2-11.6 against
    16.7-17.9 GB/s.)"""
    for q in range(0, in_plane, 16):
        count = min(16, in_plane - q)
        wstore_lanes(dx, start + q, _lanes_masked_by_relu(wload(gathered, source + q), x, start + q, count), count)


@njit(cache=True, nogil=True, inline='always')
def _gather_down_the_plane(load, store, dy, mask, at, offset, first, count, p, target, d, span, height, width,
                           out_h, out_w):
    """One block of :func:`_gather_3x3_planes` (or one pair of planes of
    :func:`_max_pool_gather_3x3_pairs`) down the plane's output rows from dy[at] and mask[at]:
    ``load(array, at, offset, first, end, fill)`` loads an output row's lanes (``count`` of
    them; shifted one lane, from ``first``), ``store(target, d, span, even, odd)`` stores an
    input row's sums (p: lane l's in-plane offset of tap kx = 0 in the first input row)."""
    zero, none = wzero(), wfull(np.float32(-1.0))
    row, two_rows = wfull(np.float32(width)), wfull(np.float32(2 * width))
    even = odd = zero  # the terms of input row 2 c from output row c - 1
    for c in range(out_h):
        values, taken = load(dy, at, offset, 0, count, zero), load(mask, at, offset, 0, count, none)
        values_before = load(dy, at - 1, offset, first, count + 1, zero)
        taken_before = load(mask, at - 1, offset, first, count + 1, none)
        even, odd = _gather_window_row(values, taken, values_before, taken_before, p, even, odd)
        store(target, d, span, even, odd)
        if 2 * c + 1 < height:
            even, odd = _gather_window_row(values, taken, values_before, taken_before, vadd(p, row), zero, zero)
            store(target, d + width, span, even, odd)
        even, odd = _gather_window_row(values, taken, values_before, taken_before, vadd(p, two_rows), zero, zero)
        p = vadd(p, two_rows)
        at += out_w
        d += 2 * width
    for r in range(2 * out_h, height):  # the last output row's third window row, then rows below
        store(target, d, span, even, odd)
        even = odd = zero
        d += width


@njit(cache=True, nogil=True, inline='always')
def _block_outputs(array, at, offset, first, end, fill):
    """``wload_lanes(array, at, first, end, fill)`` in :func:`~.simd.wload_halves`' arguments
    (``offset`` unused): a block's outputs of a row."""
    return wload_lanes(array, at, first, end, fill)


@njit(cache=True, nogil=True, inline='always')
def _pair_outputs(array, at, offset, first, end, fill):
    """:func:`~.simd.wload_halves`: two planes' outputs of a row (the second ``offset`` on)."""
    return wload_halves(array, at, offset, first, end, fill)


@njit(cache=True, nogil=True, inline='always')
def _gather_3x3_planes(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w, through_scratch):
    """:func:`max_pool_backward` of 3 x 3 windows at stride 2 without padding (AVX-512), by
    gathering: blocks of 32 input columns going down each plane, a block's columns as its 16
    even and 16 odd ones, so that input column 2 l + k of a window row is tap kx = k of output
    l of the block's outputs (and kx = 2 of output l - 1 for k = 0). An output row's dy and mask
    are loaded once (and once shifted one lane) and give its three window rows' terms
    (:func:`_gather_window_row`); input row 2 c adds output row c - 1's third window row's then
    output row c's first's, so each input adds its terms in Caffe's output order from +0, and
    is stored once (:func:`_store_gathered_row`), where the scatter zeroed dx and then
    read-modified-wrote an input per output. Rows below the last window: +0. With
    ``through_scratch`` (a constant) a plane is gathered in scratch and copied to dx in whole
    vectors (:func:`_copy_gathered_plane`); else into dx, the ReLU below's mask after each
    plane."""
    gathered = np.empty(in_plane + 16 if through_scratch else 1, np.float32)  # (+ the last copy's load)
    target = gathered if through_scratch else dx
    for plane in range(planes):
        in_base, out_base = plane * in_plane, plane * out_plane
        base = 0 if through_scratch else in_base
        for block in range((width + 31) // 32):
            first = 1 if block == 0 else 0  # the block's lane 0 has no output before it in the row
            _gather_down_the_plane(_block_outputs, _store_gathered_row, dy, mask, out_base + 16 * block, 0, first,
                                   out_w - 16 * block, wramp(np.float32(32 * block), np.float32(2.0)), target,
                                   base + 32 * block, min(32, width - 32 * block), height, width, out_h, out_w)
        if through_scratch:
            _copy_gathered_plane(gathered, 0, in_plane, dx, in_base, x)
        else:
            _mask_plane_by_relu(dx, x, in_base, in_plane)


@njit(cache=True, nogil=True)
def _max_pool_gather_3x3(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w):
    """:func:`_gather_3x3_planes` into dx: planes wider than :data:`GATHER_3X3_SCRATCH_UP_TO`."""
    _gather_3x3_planes(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w, False)


@njit(cache=True, nogil=True)
def _max_pool_gather_3x3_scratch(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w):
    """:func:`_gather_3x3_planes` through scratch: planes 17 to :data:`GATHER_3X3_SCRATCH_UP_TO`
    wide."""
    _gather_3x3_planes(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w, True)


@njit(cache=True, nogil=True)
def _max_pool_gather_3x3_pairs(dy, mask, planes, in_plane, out_plane, dx, x, height, width, out_h, out_w):
    """:func:`_max_pool_gather_3x3` of planes at most 16 wide, two planes a vector (lanes 0 .. 7
    the first plane's, 8 .. 15 the second's: ``wload_halves``), each plane's row one block of
    its 8 even and 8 odd columns, the two planes gathered in scratch and then copied to dx in
    whole vectors (stored into dx row by row, masked, AlexNet's pool5 took 83-87 us hot against
    the scatter's 132-155, but in-net 11.2-11.6 GB/s against 14.7-15.4); an odd last plane
    scatters (:func:`_max_pool_backward`)."""
    columns = np.empty(16, np.float32)
    for lane in range(16):
        columns[lane] = 2 * (lane % 8)
    second = in_plane + 16  # where the second plane starts in scratch (a row's store spans 16 floats)
    pair = np.empty(second + in_plane + 16, np.float32)
    for plane in range(0, planes - 1, 2):
        _gather_down_the_plane(_pair_outputs, _store_gathered_pair_row, dy, mask, plane * out_plane, out_plane, 1,
                               out_w, wload(columns, 0), pair, 0, second, height, width, out_h, out_w)
        _copy_gathered_plane(pair, 0, in_plane, dx, plane * in_plane, x)
        _copy_gathered_plane(pair, second, in_plane, dx, (plane + 1) * in_plane, x)
    if planes % 2:
        last = planes - 1
        if x is None:
            _max_pool_backward(dy[last * out_plane:], mask[last * out_plane:], 1, in_plane, out_plane,
                               dx[last * in_plane:], None)
        else:
            _max_pool_backward(dy[last * out_plane:], mask[last * out_plane:], 1, in_plane, out_plane,
                               dx[last * in_plane:], x[last * in_plane:])


@njit(cache=True, nogil=True, inline='always')
def _store_gathered_pair_row(pair, d, second, even, odd):
    """Two planes' rows (lanes 0 .. 7 and 8 .. 15 of even and odd, interleaved) at pair[d:] and
    pair[second + d:], sixteen floats each (the next row's store overwrites what lies past this
    one's width)."""
    low, high = winterleave(even, odd)
    wstore(pair, d, low)
    wstore(pair, second + d, high)


GATHER_3X3 = WIDE
"""Whether max pooling's backward of 3 x 3 windows at stride 2 without padding gathers
(AVX-512) instead of scattering: :func:`_max_pool_gather_3x3_pairs` below
:data:`GATHER_3X3_FROM` columns, :func:`_max_pool_gather_3x3_scratch` up to
:data:`GATHER_3X3_SCRATCH_UP_TO`, :func:`_max_pool_gather_3x3` beyond."""

GATHER_3X3_SCRATCH_UP_TO = 32
"""The widest planes :func:`_max_pool_gather_3x3_scratch` takes: in-net, alternated,
CIFAR10-quick's 32-wide pool1 25.1-27.5 -> 28.4-29.9 GB/s through scratch, AlexNet's 55-wide
pool1 19.2-19.9 -> 16.6-18.9 GB/s."""

GATHER_3X3_FROM = 17
"""The narrowest planes gathered 32 columns a block (:func:`_max_pool_gather_3x3_scratch`,
:func:`_max_pool_gather_3x3`); narrower ones would leave most of them idle and go two planes a
vector (hot, 4096 planes 16 wide: the scatter 168-177 us, 32 columns a block 202, two planes a
vector 145-150; AlexNet's 13 x 13 pool5 as the scatter hot, 133-138 us, and in-net,
alternated, 15.0-15.4 -> 16.7-17.9 GB/s)."""

GATHER_VECTORS = WIDE
"""Whether max pooling's backward of 2 x 2 windows at stride 2 without padding gathers by flat
vectors (:func:`_max_pool_gather_vectors`; AVX-512) where :func:`_gather_vectors` has a table."""

GATHER_VECTORS_UP_TO = 1024
"""The largest planes (inputs) gathered by flat vectors: their tables (136 bytes a vector) stay
in the L1 cache beside the planes."""


@functools.lru_cache(maxsize=64)
def _gather_vectors(height, width, out_h, out_w):
    """The tables of :func:`_max_pool_gather_vectors` for 2 x 2 windows at stride 2 without
    padding: a plane's inputs in vectors of sixteen from 16 v (the last from in_plane - 16),
    input (r, c) under window (r // 2, c // 2) if there is one; ``bases[v]``, the first of the
    sixteen outputs vector v reads (within the plane); ``picks[16 v + l]``, lane l's output less
    that base (int32); ``positions[16 v + l]``, lane l's in-plane offset as float32, or -2 where
    no window holds it (no mask is -2). None for planes of fewer than 16 inputs or outputs or
    more than ``GATHER_VECTORS_UP_TO`` inputs, and where a vector's outputs span 16 or more."""
    in_plane, out_plane = height * width, out_h * out_w
    if not 16 <= in_plane <= GATHER_VECTORS_UP_TO or out_plane < 16:
        return None
    inputs = np.minimum(np.arange(0, in_plane, 16), in_plane - 16)[:, None] + np.arange(16)
    rows, columns = np.divmod(inputs, width)
    inside = (rows // 2 < out_h) & (columns // 2 < out_w)
    outputs = (rows // 2) * out_w + columns // 2
    bases = np.minimum(np.where(inside, outputs, out_plane).min(axis=1), out_plane - 16)
    picks = np.where(inside, outputs - bases[:, None], 0)
    if picks.max() > 15:
        return None
    return bases.astype(np.int64), picks.astype(np.int32).reshape(-1), \
        np.where(inside, inputs, -2).astype(np.float32).reshape(-1)


@njit(cache=True, nogil=True)
def _max_pool_gather_vectors(dy, mask, planes, in_plane, out_plane, dx, x, bases, picks, positions):
    """:func:`_max_pool_gather` by flat vectors (the tables of :func:`_gather_vectors`): each
    sixteen inputs of a plane, in whatever rows they lie, pick their windows' dy and mask from
    the sixteen outputs from their base (one permute each) and are stored once, dy where the
    mask is their position, else +0 (+0 + dy: Caffe's bits); given x, times the backward of the
    ReLU below as they are stored. dx is written in order, whole lines, where the blocks of
    :func:`_max_pool_gather` went down a plane's columns."""
    zero, one = wfull(np.float32(0.0)), wfull(np.float32(1.0))
    for plane in range(planes):
        in_base, out_base = plane * in_plane, plane * out_plane
        for v in range(bases.size):
            at, k = out_base + bases[v], 16 * v
            values, taken = wload(dy, at), wload(mask, at)
            g = vadd_where_eq(zero, wpermute2(taken, taken, picks, k), wload(positions, k),
                              wpermute2(values, values, picks, k))
            d = in_base + min(k, in_plane - 16)
            if x is not None:
                g = vmul(g, vwhere_gt(wload(x, d), zero, one, zero))
            wstore(dx, d, g)


@njit(cache=True, nogil=True)
def _max_pool_backward(dy, mask, planes, in_plane, out_plane, dx, x):
    """:func:`max_pool_backward`, a plane at a time: its argmaxes made int32 in one vector pass
    first (the scatter then loads each as an integer, where converting it there took two
    instructions on the scatter's path: CIFAR10-quick's pool1, hot, 13.2 -> 10.3 us for 64
    planes), its dx zeroed, then each dy added at its argmax in output order. (Fetching the
    next plane's lines meanwhile, dx for writing, had made CIFAR10-quick's pool1 alone, inputs
    evicted first, 2.2 -> 1.8 ms on an earlier host; on a Zen 4 it made it 0.75 -> 1.25 ms and
    AlexNet's pool1 1.4 -> 2.0 ms, hot too, and spread over the scatter, 1.5 ms.)"""
    picks = np.empty(out_plane, np.int32)
    for plane in range(planes):
        in_base = plane * in_plane
        out_base = plane * out_plane
        for p in range(out_plane):
            picks[p] = np.int32(mask[np.uint64(out_base + p)])
        for p in range(in_plane):
            dx[np.uint64(in_base + p)] = 0.0
        for p in range(out_plane):
            pick = picks[p]
            if pick >= 0:
                at = np.uint64(in_base + np.int64(pick))
                dx[at] = dx[at] + dy[np.uint64(out_base + p)]
        _mask_plane_by_relu(dx, x, in_base, in_plane)


@njit(cache=True, nogil=True, inline='always')
def _ave_pool_lanes(load, full, splat, L, x, planes, in_plane, width, kh, kw, starts, offsets, sizes, y):
    """Average pooling L (8 or 16) planes at a time as vector lanes: each output's float32 sum
    over its window's taps in row-major order (from the table; at constant steps where the
    window is inside the image), divided by its size."""
    out_plane = starts.size - 1
    xt = np.empty(in_plane * L, np.float32)
    yt = np.empty(out_plane * L, np.float32)
    for first in range(0, planes, L):
        lanes = min(L, planes - first)
        _to_lanes(x, first, lanes, in_plane, xt, L)
        for o in range(out_plane):
            _prefetch_next_planes(x, first, in_plane, out_plane, o, L)
            total = full(np.float32(0.0))
            if _inside(starts, o, kh, kw):
                for ky in range(kh):
                    for kx in range(kw):
                        total = vadd(total, load(xt, (offsets[starts[o]] + ky * width + kx) * L))
            else:
                for t in range(starts[o], starts[o + 1]):
                    total = vadd(total, load(xt, offsets[t] * L))
            vstore(yt, o * L, vdiv(total, splat(sizes, o)))
        _from_lanes(yt, first, lanes, out_plane, y, L)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_3x3(x, planes, in_plane, width, starts, offsets, sizes, y):
    _ave_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, 3, 3, starts, offsets, sizes, y)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_3x3_wide(x, planes, in_plane, width, starts, offsets, sizes, y):
    _ave_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, 3, 3, starts, offsets, sizes, y)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_2x2(x, planes, in_plane, width, starts, offsets, sizes, y):
    _ave_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, 2, 2, starts, offsets, sizes, y)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_2x2_wide(x, planes, in_plane, width, starts, offsets, sizes, y):
    _ave_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, 2, 2, starts, offsets, sizes, y)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_any(x, planes, in_plane, width, kh, kw, starts, offsets, sizes, y):
    _ave_pool_lanes(vload, vfull, vsplat, 8, x, planes, in_plane, width, kh, kw, starts, offsets, sizes, y)


@njit(cache=True, nogil=True)
def _ave_pool_lanes_any_wide(x, planes, in_plane, width, kh, kw, starts, offsets, sizes, y):
    _ave_pool_lanes(wload, wfull, wsplat, 16, x, planes, in_plane, width, kh, kw, starts, offsets, sizes, y)


# One plane a vector (AVX-512; planes of at most 64 inputs and 16 outputs: LeNet's pool2,
# CIFAR10-quick's pool3): the plane's inputs are four wide vectors, its outputs the lanes of one,
# each window tap one pick from the four (:func:`wpick`, by the table of :func:`_plane_picks`),
# the taps in row-major window order, a tap outside the image as a repeat of the nearest one
# inside (max: it wins nothing that one does not; :func:`wpermute4`, no select) or +0 (average:
# the sum starts at +0, so adding +0 leaves its bits alone). Hot, one thread:
# LeNet's pool2 forward 0.033 -> 0.024 ms, CIFAR10-quick's pool3 0.103 -> 0.062 against plane
# lanes; in-net, passes alternated, 0.083 -> 0.073 and 0.091 -> 0.069, and LeNet's pool2 0.061
# -> 0.049 with the input prefetched 8 KB ahead (``PLANE_AHEAD``, ``AT_ONCE_FROM``).
# Row pairs (AVX-512; planes at most 16 wide, rows of at most 8 outputs: CIFAR10-quick's pool2,
# AlexNet's pool5): output rows 2 c and 2 c + 1 are the lanes of one vector, in output order;
# each window row ky is two loads (that row of each output row's window, sixteen floats from
# its first column; rows outside the image clamped, their taps picked as outside, or for max
# pooling as repeats) and each tap one pick from their 32 floats (:func:`wpick2`, or
# :func:`wpermute2` for max pooling, by the tables of :func:`_pair_picks`). Repeats instead of
# the select of -FLT_MAX, hot, one thread, alternated: LeNet's 8 x 8 max pool2 27-31 -> 24-29
# us, CIFAR10-quick's max twin 161-200 -> 153-181; AlexNet's pool5 as before. Hot, one
# thread, against plane lanes / rows: CIFAR10-quick's pool2 forward 0.119 -> 0.090 ms (its max
# pooling twin 0.187 -> 0.121), AlexNet's pool5 0.137 -> 0.114; in-net, passes alternated,
# 0.202 -> 0.134 and 0.189 -> 0.160. Single rows (planes at most 32 wide, rows of at most 16
# outputs: LeNet's and CIFAR10-quick's pool1) the same way, one output row a vector, its window
# row's two sixteen-float halves the two loads: hot, LeNet's pool1 0.153 -> 0.085 ms,
# CIFAR10-quick's pool1 0.73 -> 0.50 (average twin 0.88 -> 0.35); in-net, passes alternated,
# LeNet's pool1 0.31 -> 0.175 ms, CIFAR10-quick's 0.81 / 0.84 (its 13 MB input from memory:
# both at the copy's speed). Max pooling by window rows instead (below), in-net, alternated with
# the code before: CIFAR10-quick's pool1 1.25-1.61 -> 0.70-0.99 ms (with its ReLU now fused
# into the stores), LeNet's 0.145-0.150 -> 0.124. All bodies take one signature (see
# :func:`_pool_small_planes`).
@njit(cache=True, nogil=True, inline='always')
def _top(v, relu):
    """Outputs as stored in y: v, or v through the ReLU fused after the pooling (``relu``)."""
    return vrelu(v) if relu else v


@njit(cache=True, nogil=True, inline='always')
def _max_plane_vector(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, positions, y, mask, o, per, relu):
    """Plane x[at:at + 64]'s max pooling outputs into y[o:o + 16], argmaxes into mask."""
    v0, v1, v2, v3 = wload(x, at), wload(x, at + 16), wload(x, at + 32), wload(x, at + 48)
    lowest = wfull(_LOWEST)
    best, index = lowest, wfull(np.float32(-1.0))
    for t in range(0, picks.size, 16):
        v = wpermute4(v0, v1, v2, v3, picks, t)
        index = vwhere_gt(v, best, wload(positions, t), index)
        best = vwhere_gt(v, best, v, best)
    vstore(y, o, _top(best, relu))
    vstore(mask, o, index)


@njit(cache=True, nogil=True, inline='always')
def _ave_plane_vector(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, sizes, y, mask, o, per, relu):
    """Plane x[at:at + 64]'s average pooling outputs into y[o:o + 16] (mask unused)."""
    v0, v1, v2, v3 = wload(x, at), wload(x, at + 16), wload(x, at + 32), wload(x, at + 48)
    zero = wfull(np.float32(0.0))
    total = zero
    for t in range(0, picks.size, 16):
        total = vadd(total, wpick(v0, v1, v2, v3, picks, t, zero))
    vstore(y, o, _top(vdiv(total, wload(sizes, 0)), relu))


@njit(cache=True, nogil=True, inline='always')
def _ave_plane_vector_by_parity(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, sizes, y, mask, o, per,
                                relu):
    """Plane x[at:at + 64]'s average pooling outputs into y[o:o + 16] by row parity (the tables of
    :func:`_parity_picks`): its even rows and its odd rows are first made two 32-float pairs of
    vectors (four picks from the plane; planes 8 wide: two rows loaded into each, CIFAR10-quick's
    pool3 alone, hot, 65-70 -> 59 us), so that each tap, whose window row has one parity in
    every lane, is one pick from two vectors (:func:`wpick2`) where it was one from four."""
    if width == 8:  # each pair of rows of one parity: two halves loaded into one vector
        even0, even1 = wload_rows(x, at, 16), wload_rows(x, at + 32, 16)
        odd0, odd1 = wload_rows(x, at + 8, 16), wload_rows(x, at + 40, 16)
    else:
        v0, v1, v2, v3 = wload(x, at), wload(x, at + 16), wload(x, at + 32), wload(x, at + 48)
        even0, even1 = wpermute4(v0, v1, v2, v3, picks, 0), wpermute4(v0, v1, v2, v3, picks, 16)
        odd0, odd1 = wpermute4(v0, v1, v2, v3, picks, 32), wpermute4(v0, v1, v2, v3, picks, 48)
    zero = wfull(np.float32(0.0))
    total = zero
    for ky in range(kh):
        a, b = (odd0, odd1) if (ky - ph) % 2 else (even0, even1)
        for kx in range(kw):
            total = vadd(total, wpick2(a, b, picks, 64 + 16 * (ky * kw + kx), zero))
    vstore(y, o, _top(vdiv(total, wload(sizes, 0)), relu))


# One plane a vector by row parity, 3 x 3 and 2 x 2 windows compiled as constants (their taps
# unroll), else any window. CIFAR10-quick's 8 x 8 pool3 (6400 planes) alone, hot, one thread:
# 73-74 -> 65 us against one plane a vector from four (a replica without the prefetch: 56 us;
# with the window not compiled in: 67).
@njit(cache=True, nogil=True)
def _ave_pool_parity_plane_vectors_3x3(x, planes, height, width, ph, out_h, out_w, picks, sizes, y, ahead, relu):
    _pool_small_planes(_ave_plane_vector_by_parity, False, x, planes, height, width, 3, 3, ph, 2, out_h, out_w, 1, 0,
                       64, 16, picks, sizes, y, y, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_parity_plane_vectors_2x2(x, planes, height, width, ph, out_h, out_w, picks, sizes, y, ahead, relu):
    _pool_small_planes(_ave_plane_vector_by_parity, False, x, planes, height, width, 2, 2, ph, 2, out_h, out_w, 1, 0,
                       64, 16, picks, sizes, y, y, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_parity_plane_vectors_any(x, planes, height, width, kh, kw, ph, out_h, out_w, picks, sizes, y, ahead,
                                       relu):
    _pool_small_planes(_ave_plane_vector_by_parity, False, x, planes, height, width, kh, kw, ph, 2, out_h, out_w, 1,
                       0, 64, 16, picks, sizes, y, y, ahead, relu)


_AVE_PARITY_PLANE_VECTORS = (_ave_pool_parity_plane_vectors_2x2, _ave_pool_parity_plane_vectors_3x3,
                             _ave_pool_parity_plane_vectors_any)


@njit(cache=True, nogil=True, inline='always')
def _pool_small_planes(one_plane, masked, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, front, reach,
                       stored, picks, table, y, mask, ahead, relu):
    """Every plane through ``one_plane`` (one of the bodies above and below: ``table`` the
    argmax positions for max pooling, the window sizes for average pooling), which reads from
    ``front`` floats before a plane's first input to ``reach`` floats after it and stores up to
    ``stored`` from its first output; the input prefetched ``ahead`` floats on. A plane that
    would read outside x or store past y goes through a scratch plane; the others store their
    spare lanes over the next plane's outputs, which that plane then writes."""
    in_plane, out_plane = height * width, out_h * out_w
    first = min(planes, -(-front // in_plane))
    plane = first
    while plane < planes and plane * in_plane + reach <= x.size and plane * out_plane + stored <= y.size:
        if (plane + 1) * in_plane + ahead <= x.size:
            for line in range(0, in_plane, 16):
                prefetch(x, plane * in_plane + ahead + line)
        one_plane(x, plane * in_plane, height, width, kh, kw, ph, sh, out_h, out_w, picks, table, y, mask,
                  plane * out_plane, per, relu)
        plane += 1
    xs = np.zeros(front + max(reach, in_plane), np.float32)
    ys, ms = np.empty(max(stored, out_plane), np.float32), np.empty(max(stored, out_plane), np.float32)
    for k in range(first + planes - plane):  # the planes before first, then those from plane on
        scratch = k if k < first else plane + k - first
        for i in range(in_plane):
            xs[front + i] = x[scratch * in_plane + i]
        one_plane(xs, front, height, width, kh, kw, ph, sh, out_h, out_w, picks, table, ys, ms, 0, per, relu)
        for o in range(out_plane):
            y[scratch * out_plane + o] = ys[o]
            if masked:
                mask[scratch * out_plane + o] = ms[o]


@njit(cache=True, nogil=True)
def _max_pool_plane_vectors(x, planes, height, width, out_h, out_w, picks, positions, y, mask, ahead, relu):
    _pool_small_planes(_max_plane_vector, True, x, planes, height, width, 0, 0, 0, 0, out_h, out_w, 4, 0, 64, 16,
                       picks, positions, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_plane_vectors(x, planes, height, width, out_h, out_w, picks, sizes, y, ahead, relu):
    _pool_small_planes(_ave_plane_vector, False, x, planes, height, width, 0, 0, 0, 0, out_h, out_w, 4, 0, 64, 16,
                       picks, sizes, y, y, ahead, relu)


@njit(cache=True, nogil=True, inline='always')
def _clamped_row(row, height):
    """The nearest row of the image (a window row outside it is loaded from there; its taps
    are picked as outside)."""
    return min(max(row, 0), height - 1)


@njit(cache=True, nogil=True, inline='always')
def _window_rows(x, at, c, ky, height, width, ph, sh, per):
    """Window row ky of chunk c's output rows, the two sixteen-float sources of its picks: of
    row pairs (``per`` 2) each output row's, from its first column; of single rows (1) the two
    halves of the one row."""
    first = _clamped_row(per * c * sh - ph + ky, height) * width
    second = _clamped_row(per * c * sh - ph + ky + sh, height) * width if per == 2 else first + 16
    return wload(x, at + first), wload(x, at + second)


@njit(cache=True, nogil=True, inline='always')
def _max_row_pairs(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, positions, y, mask, o, per, relu):
    lowest = wfull(_LOWEST)
    for c in range((out_h + per - 1) // per):
        best, index = lowest, wfull(np.float32(-1.0))
        for ky in range(kh):
            va, vb = _window_rows(x, at, c, ky, height, width, ph, sh, per)
            for kx in range(kw):
                k = 16 * ((c * kh + ky) * kw + kx)
                v = wpermute2(va, vb, picks, k)
                index = vwhere_gt(v, best, wload(positions, k), index)
                best = vwhere_gt(v, best, v, best)
        vstore(y, o + per * c * out_w, _top(best, relu))
        vstore(mask, o + per * c * out_w, index)


@njit(cache=True, nogil=True, inline='always')
def _max_row_pairs_by_offsets(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, bases, y, mask, o, per,
                              relu):
    """:func:`_max_row_pairs` (``per`` 2) where no window is padded (ph = pw = 0): tap kx's
    picks are the same in every window row and chunk (``picks[kx * 16 + l]``, a few vectors
    that stay in registers), the rows' starts come from the table after them (clamped rows
    without the arithmetic: 119-124 -> 106-107 us below), and the argmax is kept as the tap's
    offset in its window, a constant, made a position by adding each lane's window start
    (``bases[c * 16 + l]``) as the chunk is stored; -1 stays where no tap beat -FLT_MAX. A tap
    past the image's right or bottom edge repeats an earlier one of its window, so it never
    wins. The same bits with two loads a tap fewer: AlexNet's 13 x 13 pool5 alone, hot, 143-178
    -> 106-107 us (a stream of its bytes: 60-63)."""
    lowest, none = wfull(_LOWEST), wfull(np.float32(-1.0))
    for c in range((out_h + per - 1) // per):
        best, index = lowest, none
        for ky in range(kh):
            rows = 16 * kw + 2 * (c * kh + ky)
            va, vb = wload(x, at + picks[rows]), wload(x, at + picks[rows + 1])
            for kx in range(kw):
                v = wpermute2(va, vb, picks, 16 * kx)
                index = vwhere_gt(v, best, wfull(np.float32(ky * width + kx)), index)
                best = vwhere_gt(v, best, v, best)
        vstore(y, o + per * c * out_w, _top(best, relu))
        vstore(mask, o + per * c * out_w, vwhere_gt(index, none, vadd(index, wload(bases, 16 * c)), none))


@njit(cache=True, nogil=True, inline='always')
def _ave_row_pairs(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, sizes, y, mask, o, per, relu):
    zero = wfull(np.float32(0.0))
    for c in range((out_h + per - 1) // per):
        total = zero
        for ky in range(kh):
            va, vb = _window_rows(x, at, c, ky, height, width, ph, sh, per)
            for kx in range(kw):
                total = vadd(total, wpick2(va, vb, picks, 16 * ((c * kh + ky) * kw + kx), zero))
        vstore(y, o + per * c * out_w, _top(vdiv(total, wload(sizes, 16 * c)), relu))


@njit(cache=True, nogil=True, inline='always')
def _pool_row_pairs(one_plane, masked, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, table, y,
                    mask, ahead, relu):
    """:func:`_pool_small_planes` by row pairs (``per`` 2) or single rows (1): the last row
    loaded from its first column (32 floats for single rows), the last chunk's lanes stored
    from its first output."""
    _pool_small_planes(one_plane, masked, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, 0,
                       (height - 1) * width + 48 - 16 * per, per * ((out_h - 1) // per) * out_w + 16, picks, table, y,
                       mask, ahead, relu)


# Row-pair kernels: 3 x 3 and 2 x 2 windows compiled as constants (their tap loops unroll;
# CIFAR10-quick's pool2 forward alone 0.142 -> 0.087 ms), else any window; each compiled on
# first use.
@njit(cache=True, nogil=True)
def _max_pool_row_pairs_3x3(x, planes, height, width, ph, sh, out_h, out_w, per, picks, positions, y, mask, ahead,
                            relu):
    _pool_row_pairs(_max_row_pairs, True, x, planes, height, width, 3, 3, ph, sh, out_h, out_w, per, picks, positions,
                    y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_row_pairs_2x2(x, planes, height, width, ph, sh, out_h, out_w, per, picks, positions, y, mask, ahead,
                            relu):
    _pool_row_pairs(_max_row_pairs, True, x, planes, height, width, 2, 2, ph, sh, out_h, out_w, per, picks, positions,
                    y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_row_pairs_any(x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, positions, y, mask,
                            ahead, relu):
    _pool_row_pairs(_max_row_pairs, True, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, positions,
                    y, mask, ahead, relu)


# Row pairs by tap offsets: two output rows a vector always (``per`` 2 compiled in).
@njit(cache=True, nogil=True)
def _max_pool_row_pairs_by_offsets_3x3(x, planes, height, width, ph, sh, out_h, out_w, per, picks, bases, y, mask,
                                       ahead, relu):
    _pool_row_pairs(_max_row_pairs_by_offsets, True, x, planes, height, width, 3, 3, ph, sh, out_h, out_w, 2, picks,
                    bases, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_row_pairs_by_offsets_2x2(x, planes, height, width, ph, sh, out_h, out_w, per, picks, bases, y, mask,
                                       ahead, relu):
    _pool_row_pairs(_max_row_pairs_by_offsets, True, x, planes, height, width, 2, 2, ph, sh, out_h, out_w, 2, picks,
                    bases, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_row_pairs_by_offsets_any(x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, bases, y,
                                       mask, ahead, relu):
    _pool_row_pairs(_max_row_pairs_by_offsets, True, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, 2,
                    picks, bases, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_row_pairs_3x3(x, planes, height, width, ph, sh, out_h, out_w, per, picks, sizes, y, ahead, relu):
    _pool_row_pairs(_ave_row_pairs, False, x, planes, height, width, 3, 3, ph, sh, out_h, out_w, per, picks, sizes,
                    y, y, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_row_pairs_2x2(x, planes, height, width, ph, sh, out_h, out_w, per, picks, sizes, y, ahead, relu):
    _pool_row_pairs(_ave_row_pairs, False, x, planes, height, width, 2, 2, ph, sh, out_h, out_w, per, picks, sizes,
                    y, y, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_row_pairs_any(x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, sizes, y, ahead, relu):
    _pool_row_pairs(_ave_row_pairs, False, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, sizes,
                    y, y, ahead, relu)


# Single rows by window rows (max pooling): each input row's window-row maxima over the kw
# column taps, sixteen outputs a vector, then each output row's over its kh window rows; an
# input row two output rows share (stride kh - 1) is reduced once, and no tap needs the select
# of an outside value (3 x 3 windows at stride 2: 22 compares, maxima and selects an output row
# where the taps one by one took 36). CIFAR10-quick's pool1 alone, one thread, its input just
# written and its outputs evicted, alternated: 0.94-1.03 -> 0.59-0.76 ms, where a stream of its
# bytes takes 0.56-0.65 (the taps one by one were bound by their instructions: as slow with the
# arrays in L3).
@njit(cache=True, nogil=True, inline='always')
def _window_row_max(x, at, row, width, kw, picks, positions, p0, p1, p2, lowest):
    """For input row ``row`` of the plane at x[at:]: each lane's largest tap over its window's kw
    columns (at least -FLT_MAX: a NaN or a value not above it is no winner) and that tap's
    in-plane offset, the first of equal ones in window order. p0 .. p2: the first three taps'
    columns (``positions``' first vectors, loaded once a plane)."""
    first = at + row * width
    va, vb = wload(x, first), wload(x, first + 16)
    v = wpermute2(va, vb, picks, 0)
    best, index = vwhere_gt(v, lowest, v, lowest), p0
    for kx in range(1, kw):
        v = wpermute2(va, vb, picks, 16 * kx)
        column = p1 if kx == 1 else p2 if kx == 2 else wload(positions, 16 * kx)
        index = vwhere_gt(v, best, column, index)
        best = vwhere_gt(v, best, v, best)
    return best, vadd(index, wfull(np.float32(row * width)))


@njit(cache=True, nogil=True, inline='always')
def _max_single_rows(x, at, height, width, kh, kw, ph, sh, out_h, out_w, picks, positions, y, mask, o, per,
                     relu):
    """Plane x[at:]'s max pooling, one output row a vector (``per`` 1): Caffe's first maximum in
    row-major window order is the first maximum over the window rows, in order, of each row's
    first maximum (strict > at both steps). Rows outside the image repeat the nearest inside
    row (in the window, next to the clamped ones), as :func:`_row_picks` repeats columns: a
    repeat never wins. A window whose largest tap is not above -FLT_MAX gives -FLT_MAX and -1,
    as Caffe's loop starting there. A window's first row, where it is the last row of the
    window before (stride kh - 1), is not reduced again."""
    lowest = wfull(_LOWEST)
    p0, p1, p2 = wload(positions, 0), wload(positions, 16 * min(1, kw - 1)), wload(positions, 16 * min(2, kw - 1))
    last = -1
    last_best = last_index = lowest
    for c in range(out_h):
        row = _clamped_row(c * sh - ph, height)
        if row != last:
            last_best, last_index = _window_row_max(x, at, row, width, kw, picks, positions, p0, p1, p2, lowest)
        best, index = last_best, last_index
        for ky in range(1, kh):
            row = _clamped_row(c * sh - ph + ky, height)
            last_best, last_index = _window_row_max(x, at, row, width, kw, picks, positions, p0, p1, p2, lowest)
            index = vwhere_gt(last_best, best, last_index, index)
            best = vwhere_gt(last_best, best, last_best, best)
        last = row
        vstore(y, o + c * out_w, _top(best, relu))
        vstore(mask, o + c * out_w, vwhere_gt(best, lowest, index, wfull(np.float32(-1.0))))


@njit(cache=True, nogil=True)
def _max_pool_single_rows_3x3(x, planes, height, width, ph, sh, out_h, out_w, per, picks, positions, y, mask, ahead,
                              relu):
    _pool_row_pairs(_max_single_rows, True, x, planes, height, width, 3, 3, ph, sh, out_h, out_w, per, picks,
                    positions, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_single_rows_2x2(x, planes, height, width, ph, sh, out_h, out_w, per, picks, positions, y, mask, ahead,
                              relu):
    _pool_row_pairs(_max_single_rows, True, x, planes, height, width, 2, 2, ph, sh, out_h, out_w, per, picks,
                    positions, y, mask, ahead, relu)


@njit(cache=True, nogil=True)
def _max_pool_single_rows_any(x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks, positions, y, mask,
                              ahead, relu):
    _pool_row_pairs(_max_single_rows, True, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, per, picks,
                    positions, y, mask, ahead, relu)


_SINGLE_ROWS = (_max_pool_single_rows_2x2, _max_pool_single_rows_3x3, _max_pool_single_rows_any)


# Wide rows by window rows (max pooling, AVX-512; 3 x 3 windows at stride 2 on planes
# wider than 32): the reduction of :func:`_max_single_rows` on blocks of sixteen outputs of a
# row; a row two windows share is reduced once, its maxima carried to the next output row in a
# scratch vector a block. Each tap of a block's window row is one permute of the 32 floats from
# the block's first column (:func:`_wide_row_picks`). Loading each tap's own 32 floats instead
# (no select for the float after them) was slower: 550 -> 720 ns a 55 x 55 plane, hot.
@njit(cache=True, nogil=True, inline='always')
def _wide_row_max(x, row, offset, width, kw, picks, k, positions, p, lowest):
    """Window row x[row:row + width]'s taps for one block (in-plane offset ``offset`` at the
    row's first column): each lane's largest tap over its window's kw columns (at least
    -FLT_MAX) and that tap's in-plane offset, the first of equal ones in window order
    (``picks[k:]`` and ``positions[p:]``: the block's part of :func:`_wide_row_picks`' tables).
    Each tap is one permute of the 32 floats from the block's first column, the last tap one
    pick of them or of the float after them (in the row)."""
    base = picks[k]
    va, vb = wload(x, row + base), wload(x, row + base + 16)
    v = wpermute2(va, vb, picks, k + 16)
    best, index = vwhere_gt(v, lowest, v, lowest), wload(positions, p)
    for kx in range(1, kw):
        if kx == kw - 1:  # the only tap whose picks reach the float after the 32
            v = wpick2(va, vb, picks, k + 16 * (kx + 1), wsplat(x, row + min(base + 32, width - 1)))
        else:
            v = wpermute2(va, vb, picks, k + 16 * (kx + 1))
        index = vwhere_gt(v, best, wload(positions, p + 16 * kx), index)
        best = vwhere_gt(v, best, v, best)
    return best, vadd(index, wfull(np.float32(offset)))


@njit(cache=True, nogil=True, inline='always')
def _pool_wide_rows(x, planes, height, width, kh, kw, ph, sh, out_h, out_w, picks, positions, y, mask, relu):
    """Every plane's max pooling by blocks of sixteen outputs of a row, output rows in turn: each
    output's first maximum over its window rows, in order, of their :func:`_wide_row_max`
    (rows outside the image repeat the nearest inside one, as :func:`_max_single_rows` has it).
    The next plane's input is prefetched a few lines an output row (all 1536 planes of AlexNet's
    pool1, hot, one thread: 1250-1330 -> 860-950 us; prefetched at once as the plane starts,
    in-net: 1.53-1.59 -> 2.05-2.13 ms)."""
    lowest, none = wfull(_LOWEST), wfull(np.float32(-1.0))
    blocks = picks.size // (16 * (kw + 1))
    carried = np.empty(32 * blocks, np.float32)  # a block's maxima and offsets of the row shared
    in_plane, out_plane = height * width, out_h * out_w
    per_row = -(-in_plane // (16 * out_h))
    for plane in range(planes):
        at, o = plane * in_plane, plane * out_plane
        last = -1
        for c in range(out_h):
            if plane + 1 < planes:
                _prefetch_rows_ahead(x, at + in_plane, in_plane, c * per_row, per_row)
            first = _clamped_row(c * sh - ph, height)
            shared = first == last
            last = _clamped_row(c * sh - ph + kh - 1, height)
            for b in range(blocks):
                k, p = 16 * (kw + 1) * b, 16 * kw * b
                if shared:
                    best, index = wload(carried, 32 * b), wload(carried, 32 * b + 16)
                else:
                    best, index = _wide_row_max(x, at + first * width, first * width, width, kw, picks, k, positions, p,
                                                lowest)
                for ky in range(1, kh):
                    row = _clamped_row(c * sh - ph + ky, height)
                    row_best, row_index = _wide_row_max(x, at + row * width, row * width, width, kw, picks, k,
                                                        positions, p, lowest)
                    index = vwhere_gt(row_best, best, row_index, index)
                    best = vwhere_gt(row_best, best, row_best, best)
                    if ky == kh - 1:
                        wstore(carried, 32 * b, row_best)
                        wstore(carried, 32 * b + 16, row_index)
                at_out = o + c * out_w + min(16 * b, out_w - 16)
                wstore(y, at_out, _top(best, relu))
                wstore(mask, at_out, vwhere_gt(best, lowest, index, none))


@njit(cache=True, nogil=True)
def _max_pool_wide_rows_3x3(x, planes, height, width, ph, sh, out_h, out_w, picks, positions, y, mask, relu):
    _pool_wide_rows(x, planes, height, width, 3, 3, ph, sh, out_h, out_w, picks, positions, y, mask, relu)


_MAX_ROW_PAIRS_BY_OFFSETS = (_max_pool_row_pairs_by_offsets_2x2, _max_pool_row_pairs_by_offsets_3x3,
                             _max_pool_row_pairs_by_offsets_any)
_ROW_PAIRS = {False: (_max_pool_row_pairs_2x2, _max_pool_row_pairs_3x3, _max_pool_row_pairs_any),
              True: (_ave_pool_row_pairs_2x2, _ave_pool_row_pairs_3x3, _ave_pool_row_pairs_any)}  # by ``average``


# Blocks by window rows (max pooling, eight lanes: CPUs without AVX-512): the reduction of
# :func:`_max_single_rows` on blocks of eight outputs of a row, a block's output rows in turn so
# that the row two windows share (stride kh - 1) is reduced once; the taps of a window row are
# loads at constant steps (stride 2: the even elements, in swizzled lane order), and a column
# outside the image reads as -FLT_MAX. Zen 3, one thread, alternated with the rows kernel:
# CIFAR10-quick's pool1 (3200 32 x 32 planes) alone 1.65-1.86 -> 1.11-1.37 ms (its 13 MB in and
# 6.5 MB out at a 64 MB copy's speed), 64 planes hot 34-38 -> 24-28 us (the rows kernel's chain
# of nine compare-and-selects a block was its bound: as slow hot as from memory); in-net, its
# input just written, with its ReLU, pass by pass: 2.45 -> 2.05 ms (median), on two threads
# 1.25 -> 0.92; AlexNet's 27 x 27 pool2 1.73 -> 1.64. The block and the window row are called,
# not inlined: 20 s to compile inlined, 2.6 s so (the rows kernel 3.4 s), the same speed.
@njit(nogil=True)
def _window_row_max8(x, start, offset, ox, kw, pw, sw, width, masked, lowest):
    """Outputs ox .. ox + 7 of a row (lanes in :func:`_row_taps8`'s order) over the input row
    whose window-row taps start at x[start] (in-plane offset ``offset`` at the row's first
    column): each lane's largest tap over its window's kw columns (at least -FLT_MAX: a NaN or
    a value not above it is no winner), and its in-plane offset less the lane's first column,
    the first of equal ones in window order. With ``masked``, columns outside the image read
    as -FLT_MAX."""
    v = _row_taps8(x, start, sw, 0)
    if masked:
        v = _inside_columns(_in_order8, vfull, _ramp8, 8, v, ox, 0, pw, sw, width, lowest)
    best, index = vwhere_gt(v, lowest, v, lowest), vfull(np.float32(0.0))
    for kx in range(1, kw):
        v = _row_taps8(x, start + kx, sw, 0)
        if masked:
            v = _inside_columns(_in_order8, vfull, _ramp8, 8, v, ox, kx, pw, sw, width, lowest)
        index = vwhere_gt(v, best, vfull(np.float32(kx)), index)
        best = vwhere_gt(v, best, v, best)
    return best, vadd(index, vfull(np.float32(offset)))


@njit(nogil=True)
def _max_block_by_window_rows(x, at, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, ox, y, mask, o, relu,
                              masked):
    """Outputs ox .. ox + 7 of every output row of the plane at x[at:] (outputs from y[o]):
    each output row's first maximum over its window rows, in order, of their
    :func:`_window_row_max8`; rows outside the image repeat the nearest inside one (next to it
    in the window: a repeat never wins), and an output row's first window row, where it is the
    last of the row before, is not reduced again."""
    lowest = vfull(_LOWEST)
    columns = vramp(np.float32(ox * sw - pw), np.float32(sw))
    left = at + ox * sw - pw
    last = -1
    last_best = last_index = lowest
    for c in range(out_h):
        row = _clamped_row(c * sh - ph, height)
        if row != last:
            last_best, last_index = _window_row_max8(x, left + row * width, row * width, ox, kw, pw, sw, width, masked,
                                                     lowest)
        best, index = last_best, last_index
        for ky in range(1, kh):
            row = _clamped_row(c * sh - ph + ky, height)
            last_best, last_index = _window_row_max8(x, left + row * width, row * width, ox, kw, pw, sw, width, masked,
                                                     lowest)
            index = vwhere_gt(last_best, best, last_index, index)
            best = vwhere_gt(last_best, best, last_best, best)
        last = row
        best, index = _in_order8(best, sw), _in_order8(index, sw)
        vstore(y, o + c * out_w + ox, _top(best, relu))
        vstore(mask, o + c * out_w + ox, vwhere_gt(best, lowest, vadd(index, columns), vfull(np.float32(-1.0))))


@njit(cache=True, nogil=True, inline='always')
def _max_blocks_by_window_rows(x, at, height, width, kh, kw, ph, sh, out_h, out_w, columns, table, y, mask, o, per,
                               relu):
    """Plane x[at:]'s max pooling by :func:`_max_block_by_window_rows`, eight outputs of a row
    a block (the last block of a row overlapping the one before); ``columns``: (pw, sw), the
    window's column pad and stride (``table`` and ``per`` unused: the small planes' one
    signature)."""
    pw, sw = columns
    for b in range((out_w + 7) // 8):
        ox = min(8 * b, out_w - 8)
        _max_block_by_window_rows(x, at, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, ox, y, mask, o, relu,
                                  ox * sw - pw < 0 or (ox + 7) * sw - pw + kw > width)


@njit(cache=True, nogil=True, inline='always')
def _max_pool_blocks(x, planes, height, width, kh, kw, ph, pw, sh, sw, out_h, out_w, y, mask, ahead, relu):
    """:func:`_pool_small_planes` by :func:`_max_blocks_by_window_rows`: reads from pw floats
    before a plane's first input to its last row's last block's last tap's load."""
    _pool_small_planes(_max_blocks_by_window_rows, True, x, planes, height, width, kh, kw, ph, sh, out_h, out_w, 1, pw,
                       (height - 1) * width + (out_w - 8) * sw - pw + kw - 1 + 8 * sw, out_h * out_w, (pw, sw), y, y,
                       mask, ahead, relu)


# 3 x 3 windows only, compiled as constants (the window's loops unroll): with the window a
# variable, CIFAR10-quick's pool1 took 68 us for 64 hot planes, against 24 us so and 31 us by rows.
@njit(cache=True, nogil=True)
def _max_pool_blocks_3x3(x, planes, height, width, ph, pw, sh, sw, out_h, out_w, y, mask, ahead, relu):
    _max_pool_blocks(x, planes, height, width, 3, 3, ph, pw, sh, sw, out_h, out_w, y, mask, ahead, relu)


# Blocks for average pooling (eight lanes, CPUs without AVX-512): eight outputs of a row a
# vector, each lane adding its window's taps in Caffe's row-major order (window rows cannot be
# shared as in max pooling: the sum runs on through them). A window row's three taps are two
# loads and two shuffles (evens and odds) and one load and shuffle more at stride 2, three loads
# at stride 1; a tap outside the image adds +0 instead, which leaves the sum's bits alone (it
# starts at +0 and so is never -0), as Caffe skipping it. Which taps are inside, and the
# divisors, are the same for every plane: a table made once a geometry (:func:`_ave_block_table`)
# holds them. Zen 3, one thread, alternated with the plane-lane kernel:
# CIFAR10-quick's 16 x 16 pool2 (3200 planes) hot 92-164 -> 72-101 ns a plane, in-net 0.82-0.93
# -> 0.55-0.69 ms (two threads 0.62 -> 0.49 ms). (Its 8 x 8 pool3 by blocks of two rows of four
# outputs was no faster in `time`: 0.243 ms against 0.245, median of seven runs each.) The taps'
# loads and keeps are called, not inlined: Numba inlining them took the kernel 10 s to compile,
# 3.4 s so, and LLVM inlines them still.
@njit(nogil=True)
def _row_taps3(x, at, sw, keep0, keep1, keep2, total):
    """total plus the three taps of one window row, in column order: lanes in
    :func:`_row_taps8`'s order, their windows' first columns at x[at]; each tap kept where its
    ``keep`` lanes are all ones (:func:`~.simd.vkeep`), +0 where zeros."""
    if sw == 2:
        first, second = vload_evens_odds_swizzled(x, at)
        third = vload_even_swizzled(x, at + 2)
    else:
        first, second, third = vload(x, at), vload(x, at + 1), vload(x, at + 2)
    return vadd(vadd(vadd(total, vkeep(first, keep0)), vkeep(second, keep1)), vkeep(third, keep2))


@njit(nogil=True)
def _edge_row_taps3(x, left, row, height, width, sw, table, keep, total):
    """:func:`_row_taps3` of image row ``row`` for an output row with some window rows outside
    the image, the windows' first columns at x[left] of each row: a row outside is loaded from
    the nearest row inside, and the taps are kept as table[keep:], table[keep + 8:] and
    table[keep + 16:] say."""
    return _row_taps3(x, left + _clamped_row(row, height) * width, sw, vload(table, keep), vload(table, keep + 8),
                      vload(table, keep + 16), total)


_BLOCK_FLOATS, _ROW_FLOATS = 32, 80  # the table's floats a block and a block's output row


@functools.lru_cache(maxsize=64)
def _ave_block_table(height, width, ph, pw, sh, sw, out_h, out_w):
    """What :func:`_ave_blocks3` takes for this geometry (made on its first call, then kept:
    1.7 ms for a 16 x 16 plane, 6 for 32 x 32), flat float32, lanes in
    :func:`_row_taps8`'s order where they are taps': for each block, whether each of its three
    taps' columns is in the image (all ones bits, :func:`~.simd.vkeep`, or zeros) and the
    divisors of windows wholly inside the image's rows (in output order); then for each block
    and output row, its divisors (window sizes clipped to the padded image) and by window row
    and column whether each lane's tap is in the image, rows too."""
    order = [0, 1, 4, 5, 2, 3, 6, 7] if sw == 2 else list(range(8))  # output lane at each tap lane

    def bits(inside):
        return np.where(inside[order], np.uint32(0xffffffff), np.uint32(0)).view(np.float32)

    def sizes(top, lefts):
        return ((min(top + 3, height + ph) - top) * (np.minimum(lefts + 3, width + pw) - lefts)).astype(np.float32)
    lefts = [min(8 * b, out_w - 8) * sw - pw + sw * np.arange(8) for b in range((out_w + 7) // 8)]
    table = [np.concatenate([bits((left + kx >= 0) & (left + kx < width)) for kx in range(3)] + [sizes(0, left)])
             for left in lefts]
    for left in lefts:
        for c in range(out_h):
            top = c * sh - ph
            table += [sizes(top, left)] + [bits((0 <= top + ky < height) & (left + kx >= 0) & (left + kx < width))
                                           for ky in range(3) for kx in range(3)]
    return np.concatenate(table)


@njit(cache=True, nogil=True, inline='always')
def _ave_blocks3(x, at, height, width, kh, kw, ph, sh, out_h, out_w, columns, table, y, mask, o, per, relu):
    """Plane x[at:]'s 3 x 3 average pooling, eight outputs of a row a block (the last block of a
    row overlapping the one before): each lane's float32 sum over its window, divided by its
    divisor (``table``: :func:`_ave_block_table`'s). ``columns``: (pw, sw); ``kh``, ``kw``,
    ``mask`` and ``per`` are the small planes' one signature's. The output rows whose window
    rows are all inside the image go straight through; the others (a few at the top and bottom)
    take their window rows' keeps and divisors from the table. Each way is a loop of its own: an
    inlined call taking an array in a branch would count the array's references each time."""
    pw, sw = columns
    blocks = (out_w + 7) // 8
    inner_from = min(out_h, -(-ph // sh))
    inner_to = max(inner_from, min(out_h, (height - 3 + ph) // sh + 1))
    zero = vfull(np.float32(0.0))
    for b in range(blocks):
        ox = min(8 * b, out_w - 8)
        left = at + ox * sw - pw
        base = b * _BLOCK_FLOATS
        keep0, keep1, keep2 = vload(table, base), vload(table, base + 8), vload(table, base + 16)
        inner_sizes = vload(table, base + 24)
        for c in range(inner_from, inner_to):
            row = left + (c * sh - ph) * width
            total = _row_taps3(x, row, sw, keep0, keep1, keep2, zero)
            total = _row_taps3(x, row + width, sw, keep0, keep1, keep2, total)
            total = _row_taps3(x, row + 2 * width, sw, keep0, keep1, keep2, total)
            vstore(y, o + c * out_w + ox, _top(vdiv(_in_order8(total, sw), inner_sizes), relu))
        for e in range(out_h - (inner_to - inner_from)):
            c = e if e < inner_from else e + inner_to - inner_from
            top, keeps = c * sh - ph, blocks * _BLOCK_FLOATS + (b * out_h + c) * _ROW_FLOATS
            total = _edge_row_taps3(x, left, top, height, width, sw, table, keeps + 8, zero)
            total = _edge_row_taps3(x, left, top + 1, height, width, sw, table, keeps + 32, total)
            total = _edge_row_taps3(x, left, top + 2, height, width, sw, table, keeps + 56, total)
            vstore(y, o + c * out_w + ox, _top(vdiv(_in_order8(total, sw), vload(table, keeps)), relu))


@njit(cache=True, nogil=True, inline='always')
def _ave_pool_blocks(x, planes, height, width, ph, pw, sh, sw, out_h, out_w, table, y, ahead, relu):
    """:func:`_pool_small_planes` by :func:`_ave_blocks3`: reads from pw floats before a plane's
    first input to its last row's last block's last tap's load."""
    _pool_small_planes(_ave_blocks3, False, x, planes, height, width, 3, 3, ph, sh, out_h, out_w, 1, pw,
                       (height - 1) * width + (out_w - 8) * sw - pw + 2 + 8 * sw, out_h * out_w, (pw, sw), table, y,
                       y, ahead, relu)


# The column stride compiled in (one kernel each): with it a variable, every window row
# branched on it (64 hot 16 x 16 planes: 74 against 98 ns a plane).
@njit(cache=True, nogil=True)
def _ave_pool_blocks_3x3_stride_1(x, planes, height, width, ph, pw, sh, out_h, out_w, table, y, ahead, relu):
    _ave_pool_blocks(x, planes, height, width, ph, pw, sh, 1, out_h, out_w, table, y, ahead, relu)


@njit(cache=True, nogil=True)
def _ave_pool_blocks_3x3_stride_2(x, planes, height, width, ph, pw, sh, out_h, out_w, table, y, ahead, relu):
    _ave_pool_blocks(x, planes, height, width, ph, pw, sh, 2, out_h, out_w, table, y, ahead, relu)


def _by_blocks(height, width, kh, kw, ph, pw, sh, sw, out_h, out_w):
    """Whether pooling of this geometry goes by blocks where :data:`BLOCKS_BY_WINDOW_ROWS`: 3 x 3
    windows at row stride 1 or 2 (max pooling: windows share a row) and column stride 1 or 2,
    planes at most ``BLOCKS_UP_TO`` wide with rows of eight outputs or more, and no last window
    wholly past the image (:func:`_last_windows_reach_the_image`)."""
    return ((kh, kw) == (3, 3) and sh <= 2 and sw <= 2 and width <= BLOCKS_UP_TO and out_w >= 8
            and _last_windows_reach_the_image(height, width, ph, pw, sh, sw, out_h, out_w))


@njit(cache=True, nogil=True, inline='always')
def _gathered(load, zero, L, shares, covers, p, terms):
    """Input p's gradient in L lanes: its covering outputs' shares added in order (the zero
    terms that pad ``covers`` change no bit: x + 0 is x, and Caffe starts from a zero too)."""
    total = zero
    for j in range(terms):
        total = vadd(total, load(shares, covers[p, j] * L))
    return total


@njit(cache=True, nogil=True, inline='always')
def _halves8(v):
    """An eight-lane vector as the one half it has (see :func:`_ave_pool_backward`)."""
    return v, v


@njit(cache=True, nogil=True, inline='always')
def _masked_by_relu(load, t, x, at, zero, one):
    """t times 1 where x[at + lane] > 0, else times 0 (the backward of the ReLU below,
    :func:`~.relu.relu_backward`'s rule; x loaded by ``load``); t where x is None (a type of
    its own: the kernels compile without the mask)."""
    if x is not None:
        return vmul(t, vwhere_gt(load(x, at), zero, one, zero))
    return t


@njit(cache=True, nogil=True, inline='always')
def _ave_pool_backward(load, full, splat, halves, L, dy, planes, terms, sizes, covers, dx, x):
    """:func:`ave_pool_backward` L (8 or 16: ``halves`` splits a vector of that width in
    eight-lane halves) planes at a time as vector lanes: each output's share dy / size once,
    then every input gathers its ``terms`` shares (a fixed count, so the loop unrolls where it
    is a constant); eight inputs' vectors are transposed straight into their planes (each
    eight-lane half into eight planes), whose next group's lines are fetched for writing
    meanwhile (dx is seldom in the caches: CIFAR10-quick's pool2 backward in-net about 15%
    faster), through the ReLU below's backward where x (its bottom data) is not None."""
    in_plane, out_plane = covers.shape[0], sizes.size
    shares = np.zeros((out_plane + 1) * L, np.float32)  # the last vector: the zero term
    spill = np.empty(L, np.float32)
    zero = full(np.float32(0.0))
    zero8, one8 = vfull(np.float32(0.0)), vfull(np.float32(1.0))
    for first in range(0, planes, L):
        lanes = min(L, planes - first)
        _to_lanes(dy, first, lanes, out_plane, shares, L)
        for o in range(out_plane):
            vstore(shares, o * L, vdiv(load(shares, o * L), splat(sizes, o)))
        base = first * in_plane
        p = 0
        if lanes == L:
            while p + 8 <= in_plane:
                if p % 16 == 0:
                    for r in range(L, 2 * L):
                        if base + r * in_plane + p < dx.size:
                            prefetch_to_write(dx, base + r * in_plane + p)
                g = (halves(_gathered(load, zero, L, shares, covers, p, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 1, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 2, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 3, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 4, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 5, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 6, terms)),
                     halves(_gathered(load, zero, L, shares, covers, p + 7, terms)))
                for half in range(L // 8):
                    t = vtranspose(g[0][half], g[1][half], g[2][half], g[3][half], g[4][half], g[5][half],
                                   g[6][half], g[7][half])
                    for r in range(8):
                        at = base + (half * 8 + r) * in_plane + p
                        vstore(dx, at, _masked_by_relu(vload, t[r], x, at, zero8, one8))
                p += 8
        for q in range(p, in_plane):
            vstore(spill, 0, _gathered(load, zero, L, shares, covers, q, terms))
            for lane in range(lanes):
                at = base + lane * in_plane + q
                dx[at] = spill[lane] if x is None else spill[lane] * (np.float32(1.0) if x[at] > 0 else np.float32(0.0))


# by the most outputs covering one input: 4 (3 x 3 windows at stride 2, 2 x 2 at stride 1),
# 1 (windows that do not overlap, global pooling), any; eight or sixteen (``_wide``) planes
@njit(cache=True, nogil=True)
def _ave_pool_backward_4(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(vload, vfull, vsplat, _halves8, 8, dy, planes, 4, sizes, covers, dx, x)


@njit(cache=True, nogil=True)
def _ave_pool_backward_4_wide(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(wload, wfull, wsplat, whalves, 16, dy, planes, 4, sizes, covers, dx, x)


@njit(cache=True, nogil=True)
def _ave_pool_backward_1(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(vload, vfull, vsplat, _halves8, 8, dy, planes, 1, sizes, covers, dx, x)


@njit(cache=True, nogil=True)
def _ave_pool_backward_1_wide(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(wload, wfull, wsplat, whalves, 16, dy, planes, 1, sizes, covers, dx, x)


@njit(cache=True, nogil=True)
def _ave_pool_backward_any(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(vload, vfull, vsplat, _halves8, 8, dy, planes, covers.shape[1], sizes, covers, dx, x)


@njit(cache=True, nogil=True)
def _ave_pool_backward_any_wide(dy, planes, sizes, covers, dx, x):
    _ave_pool_backward(wload, wfull, wsplat, whalves, 16, dy, planes, covers.shape[1], sizes, covers, dx, x)


_AVE_POOL_BACKWARD = {4: (_ave_pool_backward_4, _ave_pool_backward_4_wide),
                      1: (_ave_pool_backward_1, _ave_pool_backward_1_wide)}


@njit(cache=True, nogil=True, inline='always')
def _store_rows(k, s, terms, y, height, width, above, e0, e1, own, dx, at, x, zero, one):
    """The plane rows y .. y + s - 1 (those inside the plane) that output row m holds (y, its
    window's first row): a row that row m - 1's window holds too (the first k - s) adds m's
    column terms e0, e1 to m - 1's sum ``above``, in Caffe's order; the next rows are m's sum
    ``own``; rows under no window (k < s) are zero."""
    for r in range(s):
        if 0 <= y + r < height:
            if r < k - s:
                t = vadd(above, e0)
                if terms == 2:
                    t = vadd(t, e1)
            elif r < k:
                t = own
            else:
                t = zero
            offset = at + (y + r) * width
            wstore(dx, offset, _masked_by_relu(wload, t, x, offset, zero, one))


@njit(cache=True, nogil=True, inline='always')
def _plane_by_output_rows(k, s, terms, shares, height, width, ph, out_h, starts, picks, dx, at, x, zero, one):
    """One plane's gradient, output row by output row: its column terms are permutes of the
    plane's shares, and its sum, carried to the next output row, is the first term of the rows
    the two windows share. Each row's sixteen lanes run past it into the next row, stored
    after it."""
    above = zero
    for m in range(out_h):
        low, high = wload(shares, starts[m]), wload(shares, starts[m] + 16)
        e0 = wpick2(low, high, picks, m * terms * 16, zero)
        own = vadd(zero, e0)
        e1 = zero
        if terms == 2:
            e1 = wpick2(low, high, picks, (m * terms + 1) * 16, zero)
            own = vadd(own, e1)
        _store_rows(k, s, terms, m * s - ph, height, width, above, e0, e1, own, dx, at, x, zero, one)
        above = own
    _store_rows(k, s, terms, out_h * s - ph, height, width, above, zero, zero, zero, dx, at, x, zero, one)


@njit(cache=True, nogil=True, inline='always')
def _ave_pool_backward_rows(k, s, dy, planes, height, width, ph, out_h, sizes, starts, picks, dx, x):
    """:func:`ave_pool_backward` by output rows (square k x k windows at stride s, k <= 2 s: a
    row is held by at most two windows' rows, a column by at most two of a row's windows; the
    tables of :func:`_backward_rows`), each row of a plane one sixteen-lane vector: a plane's
    shares dy / size once, then per output row its column terms (permutes of the shares), its
    sum, and the rows it holds, stored once each, through the ReLU below's backward where x
    (its bottom data) is not None. The last plane, whose last row's vector would run past dx,
    goes by way of a plane of scratch."""
    terms = -(-k // s)
    out_plane, in_plane = sizes.size, height * width
    shares = np.zeros(out_plane + 32, np.float32)  # 32 past the last: every start's two vectors
    scratch = np.zeros(in_plane + 16, np.float32)
    zero, one = wfull(np.float32(0.0)), wfull(np.float32(1.0))
    stored = min(height, max(0, (out_h + 1) * s - ph)) * width  # the rows below: under no window
    for plane in range(planes):
        o = 0
        while o + 16 <= out_plane:
            wstore(shares, o, vdiv(wload(dy, plane * out_plane + o), wload(sizes, o)))
            o += 16
        for q in range(o, out_plane):
            shares[q] = dy[plane * out_plane + q] / sizes[q]
        at = plane * in_plane
        if plane < planes - 1:
            _plane_by_output_rows(k, s, terms, shares, height, width, ph, out_h, starts, picks, dx, at, x, zero, one)
        else:
            _plane_by_output_rows(k, s, terms, shares, height, width, ph, out_h, starts, picks, scratch, 0, None, zero,
                                  one)
            for q in range(stored):  # (not through _mask_plane_by_relu: a slower loop of planes)
                dx[at + q] = scratch[q] if x is None else scratch[q] * (np.float32(1.0) if x[at + q] > 0
                                                                         else np.float32(0.0))
        for q in range(at + stored, at + in_plane):
            dx[q] = np.float32(0.0)


# by the window, at stride 2 (``covers``: for the reference only)
@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_rows_3x3(dy, planes, height, width, ph, out_h, sizes, covers, starts, picks, dx, x):
    _ave_pool_backward_rows(3, 2, dy, planes, height, width, ph, out_h, sizes, starts, picks, dx, x)


@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_rows_2x2(dy, planes, height, width, ph, out_h, sizes, covers, starts, picks, dx, x):
    _ave_pool_backward_rows(2, 2, dy, planes, height, width, ph, out_h, sizes, starts, picks, dx, x)


_AVE_POOL_BACKWARD_ROWS = {3: _ave_pool_backward_rows_3x3, 2: _ave_pool_backward_rows_2x2}


@njit(cache=True, nogil=True, inline='always')
def _gathered_plane(shares, terms, picks, chunks, dx, at, x, zero, one):
    """One plane's gradient, sixteen inputs a vector: each input's ``terms`` covering shares
    (permutes of the plane's shares; a pick of 16 or more is a zero term) added in order."""
    for c in range(chunks):
        total = zero
        for j in range(terms):
            total = vadd(total, wpermute2(shares, zero, picks, (c * terms + j) * 16))
        wstore(dx, at + 16 * c, _masked_by_relu(wload, total, x, at + 16 * c, zero, one))


@njit(cache=True, nogil=True, inline='always')
def _ave_pool_backward_plane_vectors(terms, dy, planes, sizes, in_plane, picks, dx, x):
    """:func:`ave_pool_backward` one plane a vector (AVX-512; :func:`_backward_plane_picks`):
    a plane's shares are one sixteen-lane vector, dy / size, and each vector of sixteen inputs
    adds its inputs' covering shares picked from it (CIFAR10-quick's 8 x 8 pool3 alone, hot:
    0.09 ms by plane lanes, 0.06 this way), through the ReLU below's backward where x is not
    None. Each plane's last vector runs into the next plane, stored after it; the last plane
    goes by way of scratch."""
    out_plane = sizes.size
    chunks = -(-in_plane // 16)
    zero, one = wfull(np.float32(0.0)), wfull(np.float32(1.0))
    divisors = np.ones(16, np.float32)
    divisors[:out_plane] = sizes
    last = np.zeros(16, np.float32)
    scratch = np.zeros(chunks * 16, np.float32)
    for plane in range(planes):
        at = plane * out_plane
        if at + 16 <= dy.size:  # (the load and copy in an inlined function: a 2x slower loop)
            shares = vdiv(wload(dy, at), wload(divisors, 0))
        else:
            for q in range(out_plane):
                last[q] = dy[at + q]
            shares = vdiv(wload(last, 0), wload(divisors, 0))
        at = plane * in_plane
        if at + chunks * 16 <= dx.size:
            _gathered_plane(shares, terms, picks, chunks, dx, at, x, zero, one)
        else:
            _gathered_plane(shares, terms, picks, chunks, scratch, 0, None, zero, one)
            for q in range(in_plane):  # (as in _ave_pool_backward_rows)
                dx[at + q] = scratch[q] if x is None else scratch[q] * (np.float32(1.0) if x[at + q] > 0
                                                                         else np.float32(0.0))


# by the most outputs covering one input, as _AVE_POOL_BACKWARD
@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_plane_vectors_4(dy, planes, sizes, covers, picks, dx, x):
    _ave_pool_backward_plane_vectors(4, dy, planes, sizes, covers.shape[0], picks, dx, x)


@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_plane_vectors_1(dy, planes, sizes, covers, picks, dx, x):
    _ave_pool_backward_plane_vectors(1, dy, planes, sizes, covers.shape[0], picks, dx, x)


@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_plane_vectors_any(dy, planes, sizes, covers, picks, dx, x):
    _ave_pool_backward_plane_vectors(covers.shape[1], dy, planes, sizes, covers.shape[0], picks, dx, x)


@njit(cache=True, nogil=True, error_model='numpy')
def _ave_pool_backward_by_parity(dy, planes, sizes, covers, shifts, phases, dx, x):
    """:func:`ave_pool_backward` one plane a vector by parity (AVX-512; the tables of
    :func:`_backward_parity_picks`): input (2 c + a, 2 j + b) of a 3 x 3 window at stride 2 lies
    under output (c, j) and, where a or b is 0, under the outputs above and to the left of it,
    so each parity of row and column sums the plane's shares and its shifts by one output to
    the left, above, above-left (three permutes), in output order, and each vector of sixteen
    inputs picks its inputs from the four sums (two permutes), where one plane a vector
    (:func:`_ave_pool_backward_plane_vectors`) added each input's four covering shares, a
    permute each. Masked loads and stores keep each plane's vectors within it."""
    out_plane, in_plane = sizes.size, covers.shape[0]
    zero, one = wzero(), wfull(np.float32(1.0))
    divisors = np.ones(16, np.float32)
    divisors[:out_plane] = sizes
    for plane in range(planes):
        shares = vdiv(wload_lanes(dy, plane * out_plane, 0, out_plane, zero), wload(divisors, 0))
        left, above, above_left = (wpermute2(shares, zero, shifts, 0), wpermute2(shares, zero, shifts, 16),
                                   wpermute2(shares, zero, shifts, 32))
        even_rows_even_columns = vadd(vadd(vadd(vadd(zero, above_left), above), left), shares)
        even_rows_odd_columns = vadd(vadd(zero, above), shares)
        odd_rows_even_columns = vadd(vadd(zero, left), shares)
        odd_rows_odd_columns = vadd(zero, shares)
        at = plane * in_plane
        for v in range(phases.size // 16):
            count = in_plane - 16 * v
            gathered = wpermute4(even_rows_even_columns, even_rows_odd_columns, odd_rows_even_columns,
                                 odd_rows_odd_columns, phases, 16 * v)
            d = at + 16 * v
            if count >= 16:  # (masked, CIFAR10-quick's pool3 alone took 57-62 us, hot, against 44-47)
                wstore(dx, d, _masked_by_relu(wload, gathered, x, d, zero, one))
            else:
                wstore_lanes(dx, d, _lanes_masked_by_relu(gathered, x, d, count), count)


_AVE_POOL_BACKWARD_PLANE_VECTORS = {4: _ave_pool_backward_plane_vectors_4, 1: _ave_pool_backward_plane_vectors_1}


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
