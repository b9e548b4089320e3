"""InnerProduct (fully connected): axis, transpose, bias_term; BLAS GEMM."""
import numpy as np

from ..intra_op import gemm, matmul, run_chunks, scratch
from ..kernels.simd import WIDE
from ..kernels.small_gemm import batched_gemm_past_caches, batched_gemm_past_caches_reference, rows_streamed, \
    rows_streamed_reference, run_batched_gemm
from ..kernels.tiered import call
from ..registry import LAYERS
from .base import Layer

__all__ = ['InnerProductLayer']

SPLIT_BELOW = 1 << 26
"""Multiply-adds per product below which the backward's two products (weight and bottom
gradient) run whole, side by side, rather than each split over the threads in turn."""

OVERWRITE_FROM = 1 << 21
"""Weights from which a solver's backward writes the weight gradient whole after the clear
(:meth:`InnerProductLayer.overwritable_param_diffs`) by :func:`_weight_gradient`, rather than
adding it to zeros through BLAS: the clear's pass and BLAS's reading of the zeros back are
skipped. Batch 16, caches evicted first, clear + BLAS against written whole: AlexNet's fc6
(9216 -> 4096) 35.2 -> 16.3 ms on one thread, 24.5 -> 8.6 ms on two; fc7 15.8 -> 7.3 ms and
fc8 3.3 -> 1.7 ms on one. Smaller layers keep BLAS (their clear is cheap, and the product's
first compile would cost more than it saves)."""

ITEM_STRIPS_UP_TO = 128
"""Forwards of up to this many items, a multiple of 16, run by :func:`_by_item_strips`; the
others through BLAS (items as the operand streamed once below 64 items). One thread, us,
OpenBLAS against strips: LeNet's ip1 (64 x 800 -> 500) 690-830 -> 486-528; 128 x 800 -> 500
1200 -> 980; 64 x 9216 -> 4096 70.8 -> 48.9 ms; but 256 x 800 -> 500 2160 -> 2020 only, and 256 x
2048 -> 512 5.8 -> 6.9 ms."""

STREAMED_FROM = 1 << 24
"""Multiply-adds from which the bottom gradient dx = dy @ W (weights not transposed, inputs a
multiple of 32, AVX-512) goes by :func:`~pycaffe_ft.kernels.small_gemm.rows_streamed`, the weight
rows read once in chunks of 16, in blocks of ``STREAMED_COLUMNS`` inputs, rather than through
BLAS (where it does not run side by side with the weight gradient). Batch 16, one thread,
OpenBLAS against streamed: AlexNet's fc6 (9216 -> 4096) 28.4-29.2 -> 19.9 ms, fc7 12.7 -> 8.5
ms, fc8 3.0 -> 1.7-1.9 ms; without prefetching the next chunk's rows, fc6 25.8 ms. (CIFAR10-quick's
ip1 at 100 x 1024 -> 64, 6.6M, 0.18 -> 0.20 ms: left to BLAS.)"""

STREAMED_COLUMNS = 1024
"""Inputs a block of the streamed bottom gradient (one thread's call): fc6 at 256, 512, 1024,
2048 and all 9216: 23.5, 21.5, 19.9, 23.2 and 36.7 ms."""

SIDE_BY_SIDE_FROM = 1 << 21
"""Multiply-adds per product below which the two run one after the other on this thread: two
threads, LeNet's ip2 (64 x 500 -> 10, 0.3M) 21 us in turn against 55 side by side; CIFAR10-quick's
ip1 (100 x 1024 -> 64, 6.6M) 180 against 154."""


@LAYERS.register('InnerProduct', v1_name='INNER_PRODUCT')
class InnerProductLayer(Layer):
    type = 'InnerProduct'
    exact_num_bottom = 1
    exact_num_top = 1
    fuses_relu = True  # the ReLU above applied after the bias (see Layer)
    fuses_relu_backward = True  # the bottom diff is overwritten, then masked by the ReLU below

    def layer_setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        self.num_output = p.num_output
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        self.axis = bottom[0].canonical_axis(p.axis)
        self.k = bottom[0].count_range(self.axis)
        wshape = (self.k, self.num_output) if self.transpose else (self.num_output, self.k)
        shapes, fillers = [wshape], [p.weight_filler]
        if self.bias_term:
            shapes.append((self.num_output,))
            fillers.append(p.bias_filler)
        self.init_params(shapes, fillers)

    def reshape(self, bottom, top):
        axis = bottom[0].canonical_axis(self.layer_param.inner_product_param.axis)
        k = bottom[0].count_range(axis)
        if k != self.k:
            raise self.error('input size incompatible with inner product parameters: bottom '
                             'shape %s gives %d inputs per item, the weights expect %d'
                             % (list(bottom[0].shape), k, self.k))
        self.m = bottom[0].count_range(0, axis)
        top[0].reshape(bottom[0].shape[:axis] + (self.num_output,))

    def forward(self, bottom, top):
        x = bottom[0].data.reshape(self.m, self.k)
        w = self.blobs[0].data
        y = top[0].data.reshape(self.m, self.num_output)
        strips = self.m % 16 == 0 and self.m <= ITEM_STRIPS_UP_TO and not self.transpose
        if strips or self.m < 64:  # small batch: the weights are the operand to stream once
            y_t = scratch('ip_top_t', self.num_output * self.m).reshape(self.num_output, self.m)
            if strips:
                _by_item_strips(w, x, y_t)
            else:
                matmul(w.T if self.transpose else w, x.T, y_t)
            y[...] = y_t.T
        else:
            matmul(x, w if self.transpose else w.T, y)
        if self.bias_term:
            y += self.blobs[1].data
        self.relu_on_top_of(y)

    def overwritable_param_diffs(self):
        """The weights' diff, where there are at least :data:`OVERWRITE_FROM` weights."""
        return (0,) if self.num_output * self.k >= OVERWRITE_FROM else ()

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.m, self.num_output)
        x = bottom[0].data.reshape(self.m, self.k)
        w = self.blobs[0].data
        products = []
        if 0 in self.param_diffs_to_overwrite:
            self.param_diffs_to_overwrite.discard(0)
            _weight_gradient(x, dy, self.blobs[0].diff, self.transpose)
        elif self.param_propagate_down[0]:  # accumulated in place (BLAS beta = 1)
            products.append((x.T, dy, self.blobs[0].diff, True) if self.transpose else
                            (dy.T, x, self.blobs[0].diff, True))
        if propagate_down[0]:
            products.append((dy, w.T if self.transpose else w, bottom[0].diff.reshape(self.m, self.k), False))
        work = self.m * self.num_output * self.k
        if len(products) == 2 and SIDE_BY_SIDE_FROM <= work < SPLIT_BELOW:
            # two whole products side by side: two threads take one each (LeNet's ip1, 64 x 800 ->
            # 500: 0.54 ms, against 0.66 in column blocks one after the other; one thread 0.66
            # against 0.78); the same calls, so the same bits, at any thread count
            run_chunks(lambda i, _: gemm(*products[i]), [(0, 1), (1, 2)])
        else:
            if propagate_down[0] and WIDE and not self.transpose and self.k % 32 == 0 and work >= STREAMED_FROM:
                _bottom_gradient(*products.pop()[:3])
            for a, b, out, accumulate in products:
                matmul(a, b, out, accumulate=accumulate)
        if propagate_down[0]:
            self.mask_relu_below(bottom, 0, 0, bottom[0].shape[0])
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff[...] += dy.sum(axis=0)


def _bottom_gradient(dy, w, dx):
    """dx (M, K) = dy (M, N) @ w (N, K), K a multiple of 32, by
    :func:`~pycaffe_ft.kernels.small_gemm.rows_streamed`, in blocks of ``STREAMED_COLUMNS``
    inputs on the threads (each element's sum does not depend on the blocks)."""
    m, n = dy.shape
    k = w.shape[1]
    flat_dy, flat_w, flat_dx = dy.reshape(-1), w.reshape(-1), dx.reshape(-1)
    run_chunks(lambda lo, hi: call(rows_streamed, rows_streamed_reference, flat_dy, flat_w, flat_dx, m, n, k, lo, hi),
               [(lo, min(lo + STREAMED_COLUMNS, k)) for lo in range(0, k, STREAMED_COLUMNS)])


def _weight_gradient(x, dy, dw, transpose):
    """dw (num_output, K), or (K, num_output) with ``transpose``, = dy.T @ x (x.T @ dy),
    written whole (see :data:`OVERWRITE_FROM`): :func:`~pycaffe_ft.kernels.small_gemm.batched_gemm`
    over blocks of rows on the threads, each element one chain over the items (so the bits do
    not depend on the split); by non-temporal stores where the CPU has AVX-512 and dw's rows lie
    on 64-byte boundaries (:func:`~pycaffe_ft.kernels.small_gemm.batched_gemm_past_caches`: no
    line of dw read before it is written; AlexNet's fc6 at batch 16, one thread, alone: 22.7 ->
    14.4 ms, fc7 8.4 -> 6.2 ms)."""
    m = x.shape[0]
    a, b = (x, dy) if transpose else (dy, x)  # dw = a.T @ b
    rows, cols = a.shape[1], b.shape[1]
    flat_a, flat_b, flat_c = a.reshape(-1), b.reshape(-1), dw.reshape(-1)
    step = 12 * max(1, (1 << 20) // (12 * cols))  # ~4 MB of dw a chunk, whole blocks of 12 rows

    def chunk(lo, hi):
        if WIDE:  # (plain stores where dw's rows do not lie on 64-byte boundaries)
            call(batched_gemm_past_caches, batched_gemm_past_caches_reference, flat_a, lo, 1, rows, flat_b, 0, cols,
                 flat_c, lo * cols, cols, hi - lo, m, cols)
        else:
            run_batched_gemm(flat_a, lo, 0, 1, rows, flat_b, 0, 0, cols, flat_c, lo * cols, 0, cols, 1, hi - lo, m,
                             cols)
    run_chunks(chunk, [(lo, min(lo + step, rows)) for lo in range(0, rows, step)])


def _by_item_strips(w, x, y_t):
    """y_t (N, M) = w (N, K) @ x.T for M a multiple of 16 (at most ITEM_STRIPS_UP_TO): x
    transposed in strips of 32 items (16 where M is not a multiple of 32), blocks of weight rows
    by a strip in registers (:func:`~pycaffe_ft.kernels.small_gemm.batched_gemm`: 12 rows by
    32 items, 6 by 16; each output one chain over K, so the split between threads does not
    change the bits), the weights read once per strip; the rows in blocks of whole register
    blocks, at least two blocks (one a thread) and about 4 MB of weights each. OpenBLAS packs
    the weights on the way (AlexNet's fc6 at batch 16, alternated: one thread 39 -> 22 ms, two
    threads 22 -> 12.6 ms; fc7 at two threads 13.6 -> 9.1 ms; 32 items, one thread, 59 -> 43
    ms)."""
    n, k = w.shape
    m = x.shape[0]
    width = 32 if m % 32 == 0 else 16
    strips = scratch('ip_strips', m * k).reshape(m // width, k, width)  # strip s: its items transposed
    for s in range(m // width):
        strips[s] = x[width * s:width * (s + 1)].T
    flat_w, flat_strips, flat_y = w.reshape(-1), strips.reshape(-1), y_t.reshape(-1)
    rows = 12 * max(1, min((1 << 20) // (12 * k), -(-n // 24)))

    def chunk(lo, hi):
        run_batched_gemm(flat_w, lo * k, 0, k, 1, flat_strips, 0, width * k, width, flat_y, lo * m, width, m,
                         m // width, hi - lo, k, width)
    run_chunks(chunk, [(lo, min(lo + rows, n)) for lo in range(0, n, rows)])


@LAYERS.register('Embed')
class EmbedLayer(Layer):
    """Rows of a learned (input_dim, num_output) table indexed by the bottom's integers."""
    type = 'Embed'
    exact_num_bottom = 1
    exact_num_top = 1

    def allow_force_backward(self, bottom_index):
        return False

    def layer_setup(self, bottom, top):
        p = self.layer_param.embed_param
        if p.num_output <= 0 or p.input_dim <= 0:
            raise self.error('num_output and input_dim must be positive')
        self.num_output, self.input_dim, self.bias_term = p.num_output, p.input_dim, p.bias_term
        shapes, fillers = [(p.input_dim, p.num_output)], [p.weight_filler]
        if self.bias_term:
            shapes.append((p.num_output,))
            fillers.append(p.bias_filler)
        self.init_params(shapes, fillers)

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape + (self.num_output,))

    def _indices(self, bottom):
        idx = bottom[0].data.reshape(-1)
        index = idx.astype(np.int64)
        if np.any(index != idx) or (index.size and (index.min() < 0 or index.max() >= self.input_dim)):
            raise self.error('indices must be integers in [0, %d)' % self.input_dim)
        return index

    def forward(self, bottom, top):
        y = top[0].data.reshape(-1, self.num_output)
        y[...] = self.blobs[0].data[self._indices(bottom)]
        if self.bias_term:
            y += self.blobs[1].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error('cannot backpropagate to the index input')
        dy = top[0].diff.reshape(-1, self.num_output)
        if self.param_propagate_down[0]:
            np.add.at(self.blobs[0].diff, self._indices(bottom), dy)
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff[...] += dy.sum(axis=0)
