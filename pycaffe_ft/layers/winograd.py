"""Winograd convolution F(2x2, r x r) for stride-1 3x3 and 5x5 kernels: the fast path of
:class:`~pycaffe_ft.layers.convolution.ConvolutionLayer`.

Per 2 x 2 tile of outputs it multiplies (r+1)**2 transformed values instead of 4*r*r, i.e.
2.25x (3x3) and 2.8x (5x5) fewer multiply-adds than im2col + GEMM, for a float32 error of
~2e-7 (3x3, like im2col) and ~1.5e-6 (5x5) of the output's scale; which passes the layer
gives it is decided in ``ConvolutionLayer.algorithms``. The backward pass reuses it: the
bottom diff is the stride-1 convolution of the top diff (padded by r-1-pad) with the
flipped, transposed weights, and the weight gradient is
F(r x r, 2 x 2) on the same tiles, the transformed products summed over every tile of the
batch by one GEMM per position before the inverse transform.

The Toom-Cook matrices are derived here exactly (rationals); the kernels in
:mod:`pycaffe_ft.kernels.winograd` have them written out, and :func:`toom_cook` is what
the tests check those against.
"""
import functools
from fractions import Fraction

import numpy as np

from ..aligned import aligned_empty
from ..intra_op import gemm, image_chunks, num_threads, run_chunks, scratch, sum_in_chunk_order
from ..kernels import numpy_references as references, winograd as kernels
from ..kernels.small_gemm import batched_gemm_function
from ..kernels.tiered import call
from ..proto import caffe_pb2

__all__ = ['Winograd', 'toom_cook']

POINTS = {4: (0, 1, -1), 6: (0, 1, -1, Fraction(1, 2), -2)}
"""The interpolation points (plus infinity) for alpha = 4 and 6. For F(2, 5), 1/2 and -2 had
the smallest float32 error of the pairs tried (from +-1/4 ... +-4): 1.8e-6 of the output's
scale with 64 channels, against 3.8e-6 for +-1/2 and 5e-6 for +-2 (im2col: 5e-7)."""

MIN_CHANNELS = 16
"""Below this many input or output channels per group, the GEMMs over the channels are too
thin for the transforms to pay: im2col is used."""

SMALL_PRODUCTS = 96 * 96
"""Up to this many weights per position (input x output channels per group, the outputs a
multiple of 8) the per-position products run in :func:`~pycaffe_ft.kernels.small_gemm.batched_gemm`
rather than OpenBLAS: 32 x 32 (CIFAR10-quick) at 66 against 31 GFLOP/s, 64 x 64 at 63
against 39, 96 x 96 even (61 / 57), 128 x 128 slower (53 / 60), on one Zen 3 core."""

SMALL_WEIGHT_PRODUCTS = 64 * 64
"""The same for the weight gradient's products (output x input channels per group, summed
over the tiles, the input channels a multiple of 8): 32 x 32 at 28-31 against 18 GFLOP/s
(OpenBLAS), 64 x 32 at 35 against 22; 128 x 48 no better."""

STEP_VALUES = 1 << 17
"""Transformed values (images x tiles x positions x channels) a step of the pipelines
(:func:`~pycaffe_ft.kernels.winograd.convolve_images`, ``weight_products``) works on, so that
they stay in the core's cache from the transform to the products (and back). CIFAR10-quick's
conv2 at one thread: forward 9.0 -> 7.35 ms, weight gradient 8.6 -> 7.5 ms against the whole
chunk at once; 2^15-2^16 no better, 2^18 and up slower."""

MIN_OUTPUTS = 256
"""Below this many output positions per pass (images x height x width), transforming the
weights (every pass: they may have changed) costs more than Winograd saves: ResNet-50's
7x7 512-channel 3x3 convolutions at batch 1 took 51 ms instead of 4 ms by im2col."""

OUTPUTS_PER_CHANNEL = 4
"""Wider layers need more positions to pay: at least this many per channel (the larger of
the input and output channels per group), up to WIDE_MIN_OUTPUTS. One Zen 3 thread, ms,
Winograd against im2col, forward; forward + backward: 512 -> 512 channels on 7 x 7 at 8
images (392 positions) 47 / 25; 121 / 92, at 16 images 64 / 48; 162 / 157, at 32 images 90 /
103; 246 / 326; 256 channels on 14 x 14 at 2 images 8.6 / 5.7; 22.6 / 18.1, at 4 images 13.1 /
11.1; 34.4 / 36.6, at 8 images 19 / 23; 53 / 73; 128 channels on 14 x 14 at 2 images 2.6 / 1.7;
7.9 / 5.6, on 28 x 28 at 1 image 2.7 / 2.9; 7.6 / 9.1; 64 channels on 14 x 14 at 2 images 0.6
/ 0.65; 1.6 / 1.6."""

BANDS_AT_BATCH_1 = 4
"""A pass over one image on more than one thread runs in this many bands of output rows (whole
tile rows each, so that every tile and its products are those of the whole image), which the
threads share: a single image in one chunk kept the second thread idle (ResNet-50's res2 and
res3 3 x 3 layers at batch 1, 19 ms of a 99 ms forward on two threads). On one thread the
bands cost more than they save (the rows above and below each band transformed twice, and the
calls): 64 channels on 56 x 56, one thread, 9% slower."""

MIN_BAND_TILE_ROWS = 4
"""Fewer bands where a band would have fewer tile rows than this (the per-call costs)."""

WEIGHT_TRANSFORM_PARTS, MIN_PART_PAIRS = 4, 8192
"""The weight transform splits its (out, in) pairs into this many parts over the threads (each
pair is its own float64 chain: the same bits), none under MIN_PART_PAIRS pairs: it runs on
every pass, and at batch 1 it was a fifth of ResNet-50's 128-channel 3 x 3 layers' time (128 x
128 pairs, two threads: 0.45 -> 0.29 ms; 64 x 64 in two parts took longer than in one)."""

WIDE_MIN_OUTPUTS = 1536
"""The most positions OUTPUTS_PER_CHANNEL asks for (512 channels on 14 x 14 at 8 images,
1568 positions: 83 / 99; 222 / 304 ms)."""


def _tiered(name):
    """``kernels.<name>``, run as its NumPy reference while it compiles in the background
    (:func:`~pycaffe_ft.kernels.tiered.call`)."""
    kernel, reference = getattr(kernels, name), getattr(references, name)
    return lambda *args: call(kernel, reference, *args)


(_weight_tiles, _to_channels_last, _tile_transform, _convolve_images, _tile_inverse, _from_channels_last,
 _weight_products, _weight_gradient_from_tiles) = map(_tiered, (
    'weight_tiles', 'to_channels_last', 'tile_transform', 'convolve_images', 'tile_inverse', 'from_channels_last',
    'weight_products', 'weight_gradient_from_tiles'))


def toom_cook(m, r):
    """(A^T (m, alpha), G (alpha, r), B^T (alpha, alpha)) of F(m, r) as Fractions, such that
    the correlation y = A^T [(G g) * (B^T d)] for every d (alpha) and g (r)."""
    alpha = m + r - 1
    points = [Fraction(p) for p in POINTS[alpha]]
    a_t = [[Fraction(0)] * alpha for _ in range(m)]
    g = [[Fraction(0)] * r for _ in range(alpha)]
    for j, f in enumerate(points):
        norm = Fraction(1)
        for other in points:
            if other != f:
                norm *= f - other
        for i in range(m):
            a_t[i][j] = f ** i
        for k in range(r):
            g[j][k] = f ** k / norm
    a_t[m - 1][alpha - 1] = Fraction(1)
    g[alpha - 1][r - 1] = Fraction(1)
    return a_t, g, _solve_b_t(a_t, g, m, r)


def _solve_b_t(a_t, g, m, r):
    """B^T from sum_j A^T[i, j] G[j, k] B^T[j, l] = [l == i + k] (exact Gauss-Jordan)."""
    alpha = m + r - 1
    unknowns = alpha * alpha
    system = []
    for i in range(m):
        for k in range(r):
            for l in range(alpha):
                row = [Fraction(0)] * (unknowns + 1)
                for j in range(alpha):
                    row[j * alpha + l] = a_t[i][j] * g[j][k]
                row[unknowns] = Fraction(int(l == i + k))
                system.append(row)
    pivot_of = []
    for col in range(unknowns):
        top = len(pivot_of)
        pick = next(rr for rr in range(top, len(system)) if system[rr][col] != 0)
        system[top], system[pick] = system[pick], system[top]
        system[top] = [v / system[top][col] for v in system[top]]
        for rr in range(len(system)):
            if rr != top and system[rr][col] != 0:
                factor = system[rr][col]
                system[rr] = [v - factor * p for v, p in zip(system[rr], system[top])]
        pivot_of.append(top)
    return [[system[pivot_of[j * alpha + l]][unknowns] for l in range(alpha)] for j in range(alpha)]


def _as_array(matrix):
    return np.array([[float(v) for v in row] for row in matrix], np.float64)


@functools.lru_cache(maxsize=None)
def _matrices(r):
    """(G (alpha, r): weights -> tiles, A^T (r, alpha) of F(r, 2): gradient tiles -> r x r), float64,
    derived once a kernel size (in Fractions: ~5 ms, which ResNet-50's 3x3 layers paid one by one)
    and shared by the plans (none writes them)."""
    return _as_array(toom_cook(2, r)[1]), _as_array(toom_cook(r, 2)[0])


class Winograd:
    """The Winograd plan of one convolution geometry (kernel r x r, pads, groups)."""

    def __init__(self, r, pad, group):
        self.r, self.alpha, self.pad, self.group = r, r + 1, pad, group
        self.in_kind = kernels.INPUT_6 if r == 5 else kernels.INPUT_4
        self.diff_kind = kernels.DIFF_6 if r == 5 else kernels.DIFF_4
        self.out_kind = kernels.OUTPUT_6 if r == 5 else kernels.OUTPUT_4
        self.g, self.weight_a_t = _matrices(r)
        self._partials = aligned_empty(0)  # the weight gradient's per-chunk sums, reused

    @staticmethod
    def pays(outputs, channels):
        """Whether a pass over ``outputs`` positions is worth the weight transform, for a layer
        of ``channels`` (input or output, the larger) per group."""
        return outputs >= max(MIN_OUTPUTS, min(OUTPUTS_PER_CHANNEL * channels, WIDE_MIN_OUTPUTS))

    @staticmethod
    def fast_products(in_channels, out_channels):
        """Whether the per-position products of a pass from ``in_channels`` to
        ``out_channels`` (per group) run in batched_gemm (see SMALL_PRODUCTS)."""
        return out_channels % 8 == 0 and in_channels * out_channels <= SMALL_PRODUCTS

    @staticmethod
    def applies(layer):
        """Whether ``layer`` (a set-up Convolution) is a stride-1, undilated 3x3 or 5x5
        convolution with pads below the kernel and enough channels per group, whose
        ``engine`` is not CAFFE (which asks for Caffe's own im2col + GEMM)."""
        if layer.layer_param.convolution_param.engine == caffe_pb2.ConvolutionParameter.CAFFE:
            return False
        r = layer.kernel[0]
        return (layer.kernel == (r, r) and r in (3, 5) and layer.stride == (1, 1)
                and layer.dilation == (1, 1) and max(layer.pad) <= r - 1
                and min(layer.channels, layer.num_output) >= MIN_CHANNELS * layer.group)

    # -- shapes ---------------------------------------------------------------------------------
    def _tiles(self, out_hw):
        return -(-out_hw[0] // 2), -(-out_hw[1] // 2)

    def _windows_hw(self, tiles):
        """(height, width) of the zero-padded image whose alpha x alpha windows at steps of 2
        make ``tiles`` (tiles_h, tiles_w)."""
        return 2 * (tiles[0] - 1) + self.alpha, 2 * (tiles[1] - 1) + self.alpha

    def _per_image(self, channels, k, tiles):
        """Transformed values per image of a pass from ``channels`` to ``k`` channels."""
        return self.alpha * self.alpha * tiles[0] * tiles[1] * max(channels, k)

    def _step(self, num, channels, k, tiles):
        """Images a step of the pipeline kernels takes (about STEP_VALUES transformed values)."""
        return max(1, min(num, STEP_VALUES // self._per_image(channels, k, tiles)))

    def _chunks(self, num, channels, k, out_hw):
        """Image ranges of about 2M transformed values (8M where OpenBLAS runs the products:
        AlexNet's 3x3 layers ran slower in the smaller chunks, CIFAR10-quick's faster; their
        backward at batch 16, one / two threads: 4M -> 8M values, 6 -> 3 chunks, conv3 64.7 ->
        61.6 / 40.1 -> 36.8 ms, conv5 41.2 -> 38.9 / 26.3 -> 23.4 ms)."""
        g = self.group
        target = 1 << 19 if self.fast_products(channels // g, k // g) else 1 << 21
        return image_chunks(num, self._per_image(channels, k, self._tiles(out_hw)), target=target)

    def transform_weights(self, w, flip=False):
        """(alpha*alpha, group, C_in/g, C_out/g) float32: G w G^T per (out, in) pair; with
        ``flip``, of the rotated, transposed weights (the bottom diff's convolution)."""
        g = self.group
        k, c = w.shape[:2]
        shape = (self.alpha * self.alpha, g) + ((k // g, c) if flip else (c, k // g))
        u = aligned_empty(int(np.prod(shape))).reshape(shape)
        w = np.ascontiguousarray(w)
        pairs = k * c
        parts = max(1, min(WEIGHT_TRANSFORM_PARTS, pairs // MIN_PART_PAIRS))
        run_chunks(lambda lo, hi: _weight_tiles(w, self.g, g, flip, u, lo, hi),
                   [(pairs * i // parts, pairs * (i + 1) // parts) for i in range(parts)])
        return u

    # -- the pieces -------------------------------------------------------------------------------
    def _input_tiles(self, x, channels, in_hw, pad, tiles, name):
        """Transformed input windows of the images ``x`` (n, C, H, W): (alpha^2, n*tiles, C)."""
        n, a = x.shape[0], self.alpha
        th, tw = tiles
        ph_, pw_ = self._windows_hw(tiles)
        image = scratch(name + '_image', n * ph_ * pw_ * channels)
        _to_channels_last(x.reshape(-1), n, channels, in_hw[0], in_hw[1], pad[0], pad[1], ph_, pw_, image)
        out = scratch(name, a * a * n * th * tw * channels)
        rows = scratch("wg_rows", ph_ * a * tw * channels)
        _tile_transform(image, n, ph_, pw_, channels, self.in_kind, a, th, tw, rows, out)
        return out.reshape(a * a, n * th * tw, channels)

    def _diff_tiles(self, dy, channels, out_hw, tiles):
        """Transformed 2 x 2 tiles of the top diff (n, K, OH, OW): (alpha^2, n*tiles, K)."""
        n, a = dy.shape[0], self.alpha
        th, tw = tiles
        image = scratch('wg_diff_image', n * 4 * th * tw * channels)
        _to_channels_last(dy.reshape(-1), n, channels, out_hw[0], out_hw[1], 0, 0, 2 * th, 2 * tw, image)
        out = scratch('wg_diff', a * a * n * th * tw * channels)
        rows = scratch('wg_rows', 2 * th * tw * a * channels)
        _tile_transform(image, n, 2 * th, 2 * tw, channels, self.diff_kind, a, th, tw, rows, out)
        return out.reshape(a * a, n * th * tw, channels)

    def _convolve(self, x, u, in_channels, out_channels, in_hw, pad, out_hw, out, bias=None, relu=False):
        """out (n, C_out, OH, OW) = the convolution of x (n, C_in, H, W) given transformed
        weights u (alpha^2, group, C_in/g, C_out/g), through a ReLU with ``relu``."""
        n, a, g = x.shape[0], self.alpha, self.group
        tiles = self._tiles(out_hw)
        ci, co = in_channels // g, out_channels // g
        use_bias = bias is not None
        if self.fast_products(ci, co):  # the whole pipeline in one kernel, a few images a step
            step = self._step(n, in_channels, out_channels, tiles)
            th, tw = tiles
            ph_, pw_ = self._windows_hw(tiles)
            count = step * th * tw
            result = scratch('wg_out', step * 4 * th * tw * out_channels)
            _convolve_images(
                x.reshape(-1), n, step, in_channels, in_hw[0], in_hw[1], pad[0], pad[1], ph_, pw_, self.in_kind,
                a, th, tw, u.reshape(-1), g, out_channels, self.out_kind, out_hw[0], out_hw[1],
                bias if use_bias else result[:1], use_bias, relu, out.reshape(-1),
                scratch('wg_tiles_image', step * ph_ * pw_ * in_channels), scratch('wg_rows', ph_ * a * tw * in_channels),
                scratch('wg_tiles', a * a * count * in_channels), scratch('wg_prod', a * a * count * out_channels),
                scratch('wg_half', 2 * a * tw * out_channels), result, batched_gemm_function())
            return
        count = n * tiles[0] * tiles[1]
        v = self._input_tiles(x, in_channels, in_hw, pad, tiles, 'wg_tiles')
        prod = scratch('wg_prod', a * a * count * out_channels).reshape(a * a, count, out_channels)

        def positions(first, last):  # the same BLAS calls on any thread, so the same bits
            for xi in range(first, last):
                for gi in range(g):
                    gemm(v[xi, :, gi * ci:(gi + 1) * ci], u[xi, gi], prod[xi, :, gi * co:(gi + 1) * co])
        # over the threads for one image; in order here where they already share image chunks
        run_chunks(positions, [(xi, xi + 1) for xi in range(a * a)])
        result = scratch('wg_out', n * 4 * tiles[0] * tiles[1] * out_channels)
        _tile_inverse(prod.reshape(-1), n, out_channels, self.out_kind, a, tiles[0], tiles[1],
                      scratch("wg_half", 2 * a * tiles[1] * out_channels), result)
        _from_channels_last(result, n, out_channels, 2 * tiles[0], 2 * tiles[1], out_hw[0], out_hw[1],
                            bias if use_bias else result[:1], use_bias, relu, out.reshape(-1))

    # -- what the layer calls ---------------------------------------------------------------------
    def forward(self, x, w, bias, y, in_hw, out_hw, relu=False):
        """y (N, K, OH, OW) = conv(x (N, C, H, W), w) + bias (None: no bias term), through a
        ReLU (negative slope 0) with ``relu``."""
        num, channels, k = x.shape[0], x.shape[1], w.shape[0]
        self._pass(x, self.transform_weights(w), in_hw, self.pad, out_hw, y, self._chunks(num, channels, k, out_hw),
                   bias, relu)

    def backward_data(self, dy, w, dx, in_hw, out_hw, after=None):
        """dx (N, C, H, W) = the gradient of the convolution for the top diff dy; then
        ``after(lo, hi)``, if given, for each range of images while it is in cache."""
        num, k, channels = dy.shape[0], dy.shape[1], dx.shape[1]
        pad = (self.r - 1 - self.pad[0], self.r - 1 - self.pad[1])
        self._pass(dy, self.transform_weights(w, flip=True), out_hw, pad, in_hw, dx,
                   self._chunks(num, channels, k, in_hw), after=after)

    def _pass(self, x, u, in_hw, pad, out_hw, out, chunks, bias=None, relu=False, after=None):
        """out = :meth:`_convolve` of x, the images in ``chunks`` over the threads; one image,
        on more than one thread, where its products run in batched_gemm, in bands of output
        rows (:meth:`_bands`: the same bits; OpenBLAS's products share the threads by position
        in :meth:`_convolve`); then ``after(lo, hi)`` for each range of images written."""
        num, in_channels = x.shape[:2]
        out_channels = out.shape[1]
        banded = num == 1 and num_threads() > 1 and self.fast_products(in_channels // self.group,
                                                                      out_channels // self.group)
        bands = self._bands(out_hw) if banded else [(0, out_hw[0])]
        if len(bands) == 1:
            def chunk(lo, hi):
                self._convolve(x[lo:hi], u, in_channels, out_channels, in_hw, pad, out_hw, out[lo:hi], bias, relu)
                if after is not None:
                    after(lo, hi)
            run_chunks(chunk, chunks)
            return

        def band(top, bottom):  # output rows, the top one even: the band's tiles are the image's
            rows = scratch('wg_band', out_channels * (bottom - top) * out_hw[1]).reshape(
                1, out_channels, bottom - top, out_hw[1])
            self._convolve(x, u, in_channels, out_channels, in_hw, (pad[0] - top, pad[1]),
                           (bottom - top, out_hw[1]), rows, bias, relu)
            out[:, :, top:bottom] = rows
        run_chunks(band, bands)
        if after is not None:
            after(0, 1)

    def _bands(self, out_hw):
        """One image's output rows in BANDS_AT_BATCH_1 bands of whole tile rows where it has
        MIN_BAND_TILE_ROWS a band, else in fewer (a power of two), else one."""
        tile_rows = self._tiles(out_hw)[0]
        count = BANDS_AT_BATCH_1
        while count > 1 and tile_rows < count * MIN_BAND_TILE_ROWS:
            count //= 2
        return [(2 * (tile_rows * i // count), min(out_hw[0], 2 * (tile_rows * (i + 1) // count)))
                for i in range(count)]

    def weight_gradient(self, x, dy, in_hw, out_hw):
        """The weight gradient (K, C/g, r, r), float32, summed over the images in chunk order
        (the same bits for any thread count)."""
        num, channels = x.shape[:2]
        k = dy.shape[1]
        a, g = self.alpha, self.group
        ci, co = channels // g, k // g
        tiles = self._tiles(out_hw)
        chunks = self._chunks(num, channels, k, out_hw)
        size = a * a * g * co * ci
        if self._partials.size < len(chunks) * size:  # kept: fresh pages cost ~0.3 ms a pass
            self._partials = aligned_empty(len(chunks) * size)
        index = {lo: i for i, (lo, _) in enumerate(chunks)}

        th, tw = tiles
        ph_, pw_ = self._windows_hw(tiles)
        step = self._step(num, channels, k, tiles)
        count = step * th * tw
        products = batched_gemm_function()

        def chunk(lo, hi):
            part = self._partials[index[lo] * size:(index[lo] + 1) * size].reshape((a * a, g, co, ci))
            if ci % 8 == 0 and ci * co <= SMALL_WEIGHT_PRODUCTS:  # a few images a step, in cache
                _weight_products(
                    x[lo:hi].reshape(-1), dy[lo:hi].reshape(-1), hi - lo, step, channels, in_hw[0], in_hw[1],
                    self.pad[0], self.pad[1], ph_, pw_, self.in_kind, self.diff_kind, a, th, tw, k, out_hw[0],
                    out_hw[1], g, part.reshape(-1),
                    scratch('wg_tiles_image', step * ph_ * pw_ * channels), scratch('wg_rows', ph_ * a * tw * channels),
                    scratch('wg_tiles', a * a * count * channels),
                    scratch('wg_diff_image', step * 4 * th * tw * k), scratch('wg_diff_rows', 2 * th * tw * a * k),
                    scratch('wg_diff', a * a * count * k), scratch('wg_more', size), products)
            else:
                vx = self._input_tiles(x[lo:hi], channels, in_hw, self.pad, tiles, 'wg_tiles')
                vg = self._diff_tiles(dy[lo:hi], k, out_hw, tiles)
                for xi in range(a * a):
                    for gi in range(g):
                        gemm(vg[xi, :, gi * co:(gi + 1) * co].T, vx[xi, :, gi * ci:(gi + 1) * ci],
                             part[xi, gi])
            return part
        total = sum_in_chunk_order(run_chunks(chunk, chunks))
        grad = np.empty((k, ci, self.r, self.r), np.float32)
        _weight_gradient_from_tiles(total.reshape(a, a, k, ci), self.weight_a_t, grad)
        return grad
