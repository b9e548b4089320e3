"""Convolution (2-D, per-dimension pad/stride/kernel, dilation, group, bias) via im2col + BLAS."""
import numpy as np

from ..intra_op import gemm, image_chunks, matmul, num_threads, run_chunks, scratch, sum_in_chunk_order
from ..kernels.direct_conv import direct_forward, direct_weight_gradient, weight_gradient_reference_ahead
from ..kernels.im2col import columns, columns_function, crop_planes, pad_planes
from ..kernels.im2col_chunks import backward_chunk, backward_chunk_ahead, patch_row_length
from ..kernels.simd import WIDE
from ..kernels.small_gemm import batched_gemm_function, run_batched_gemm
from ..kernels.tiered import await_ahead
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer
from .geometry import spatial_param
from .winograd import Winograd

__all__ = ['ConvolutionLayer', 'BaseConvolutionLayer']

DIRECT_MAX_TAPS = 75
"""Up to this many input values per output (channels x kernel area) a stride-1 convolution's
forward and weight gradient run directly (:mod:`pycaffe_ft.kernels.direct_conv`). One thread,
ms, im2col + GEMM against the direct kernels: CIFAR10-quick's conv1 (3 x 5 x 5, 100 images)
forward 14.4 -> 5.6, weight gradient 11.8 -> 8.1; LeNet's conv1 (1 x 5 x 5, 64 images)
forward 2.4 -> 0.45, weight gradient 1.0 -> 0.65."""

DIRECT_MAX_CHANNELS = 32
"""Forward passes that would otherwise run im2col (no Winograd: before a max pooling, or not
3x3/5x5) run directly up to this many input channels. One thread, im2col + GEMM against direct,
ms: LeNet's conv2 (20 -> 50, 5x5, 8x8 outputs, 64 images) 3.7 -> 2.8; 32 -> 32 5x5, 8x8 outputs,
64 images 4.9 -> 3.0; 16 -> 16 3x3, 32x32 outputs, 32 images 4.6 -> 3.7; but 64 -> 64 3x3, 16x16
outputs, 32 images 10.6 -> 10.7 and 128 -> 128 3x3, 8x8 outputs, 16 images 3.9 -> 5.0."""

DIRECT_MIN_KERNEL_WIDTH = 3
"""Narrower kernels never run directly: each input load of the direct kernels feeds only the
kernel's width of taps, and a 1 x 1 convolution is a GEMM on the bottom as it is (no column
buffer). One thread, Zen 3, ms, direct against im2col + GEMM (forward; forward + backward):
ResNet-50's res2a_branch1 (64 -> 256, 1 x 1, 56 x 56, one image) 7.0 -> 1.4; 10.8 -> 4.3, the
same at 16 images 120 -> 24; 172 -> 71; 16 -> 64, 1 x 1, 28 x 28, 16 images 2.1 -> 0.8; 3.9 ->
2.3; 16 -> 64, 2 x 2, 28 x 28, 16 images 5.0 -> 2.1; 9.4 -> 6.7. Widths 3 to 7 keep their gain
or tie (4 -> 32, 4 x 4: 1.0 against 1.25; 3 -> 64, 7 x 7: 12.6 against 13.3)."""

SMALL_PRODUCT_OUTPUTS = 64
"""Up to this many output channels (one group, AVX-512, ``engine`` not CAFFE, output planes a
multiple of 8 positions, one band) the im2col backward runs its products in batched_gemm's
register blocks rather than OpenBLAS, each chunk of images in one kernel call
(:mod:`~pycaffe_ft.kernels.im2col_chunks`). LeNet's conv2 (20 -> 50, 8 images), one thread:
weight gradient 200-220 us (OpenBLAS) -> 189. (Its forward that way, 216 us direct -> 172 alone,
made LeNet's steps 1.6% faster at one thread but 2.7% slower at two, and its compile doubled the
cold start: the forward stays direct.)"""


BAND_COLUMNS = 1 << 18
"""im2col lowers an image whose column buffer would hold more floats than this in bands of
output rows, each multiplied into its part of the top (the buffer stays in L2 and L3 while the
GEMM reads it), bands of at least BAND_MIN_COLUMNS columns. One thread, 16 images, alternated,
AlexNet's conv1 (11 x 11 stride 4, 363 x 3025 columns an image, four bands of 13-14 rows):
forward 84 -> 67 ms, weight gradient 82 -> 70 ms."""

BAND_MIN_COLUMNS = 512


class BaseConvolutionLayer(Layer):
    """Shared geometry and parameter setup of Convolution and Deconvolution."""
    min_num_bottom = 1
    min_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.convolution_param
        if len(bottom) != len(top):
            raise self.error('needs one top per bottom (%d bottoms, %d tops)' % (len(bottom), len(top)))
        self.channel_axis = bottom[0].canonical_axis(p.axis)
        spatial = bottom[0].num_axes - self.channel_axis - 1
        if spatial != 2:
            raise self.error('only 2-D convolution is supported (bottom shape %s gives %d spatial '
                             'axes)' % (list(bottom[0].shape), spatial))
        self.kernel = spatial_param(self, p, 'kernel_size', None)
        self.stride = spatial_param(self, p, 'stride', 1)
        self.pad = spatial_param(self, p, 'pad', 0, allow_zero=True)
        dil = list(p.dilation)
        if len(dil) not in (0, 1, 2):
            raise self.error('dilation must be given 0, 1 or 2 times')
        self.dilation = (tuple(dil) * 2)[:2] if len(dil) == 1 else (tuple(dil) if dil else (1, 1))
        self.channels = bottom[0].shape[self.channel_axis]
        self.num_output = p.num_output
        if self.num_output <= 0:
            raise self.error('num_output must be positive')
        self.group = p.group
        if self.group < 1:
            raise self.error('group must be at least 1, got %d' % self.group)
        if self.channels % self.group:
            raise self.error('number of input channels (%d) must be a multiple of group (%d)'
                             % (self.channels, self.group))
        if self.num_output % self.group:
            raise self.error('num_output (%d) must be a multiple of group (%d)'
                             % (self.num_output, self.group))
        if self.reverse_dimensions:
            conv_out, conv_in = self.channels, self.num_output
        else:
            conv_out, conv_in = self.num_output, self.channels
        self.conv_out_channels, self.conv_in_channels = conv_out, conv_in
        self.bias_term = p.bias_term
        shapes = [(conv_out, conv_in // self.group) + self.kernel]
        fillers = [p.weight_filler]
        if self.bias_term:
            shapes.append((self.num_output,))
            fillers.append(p.bias_filler)
        self.init_params(shapes, fillers)

    reverse_dimensions = False

    def output_shape(self, in_h, in_w):
        out = []
        for size, k, s, p, d in zip((in_h, in_w), self.kernel, self.stride, self.pad, self.dilation):
            ext = d * (k - 1) + 1
            out.append((size + 2 * p - ext) // s + 1)
        return tuple(out)

    def reshape(self, bottom, top):
        ax = self.channel_axis
        first = bottom[0].shape
        for b in bottom:
            if b.shape != first:
                raise self.error('all bottoms must have the same shape (%s vs %s)'
                                 % (list(first), list(b.shape)))
        if first[ax] != self.channels:
            raise self.error('input has %d channels, the layer was set up for %d'
                             % (first[ax], self.channels))
        self.num = int(np.prod(first[:ax], dtype=np.int64))
        self.in_hw = first[ax + 1:]
        self.out_hw = self.output_shape(*self.in_hw)
        if min(self.out_hw) <= 0:
            raise self.error('output size %s is not positive for input %s'
                             % (list(self.out_hw), list(first)))
        for t in top:
            t.reshape(first[:ax] + (self.num_output,) + self.out_hw)
        # im2col geometry: the "conv input" is the bottom for Convolution, the top for Deconvolution
        self.col_hw = self.in_hw if self.reverse_dimensions else self.out_hw
        self.im_hw = self.out_hw if self.reverse_dimensions else self.in_hw

    def _chunks(self, direct=False):
        """Image ranges processed together: about 512 GEMM columns (whole images, column
        buffer at most 4 MB), the sizes at which BLAS ran fastest here with the buffer still in
        cache, and at least ~8M multiply-adds so that small layers do not drown in per-chunk
        overhead (CIFAR10-quick's conv1, 2.5M per image: 22 -> 16 ms forward and backward at 4
        images a chunk instead of 1; 16 images: 26 ms). The ``direct`` kernels have no column
        buffer: a quarter of the batch each (CIFAR10-quick's conv1 weight gradient: 14.5 -> 11.5
        ms at 25 images a chunk instead of 4). Depends on the shapes only (partial sums combine
        the same for any thread count)."""
        if direct:
            return image_chunks(self.num, 1, target=self.num)
        plane = self.col_hw[0] * self.col_hw[1]
        per_image = self.conv_in_channels * self.kernel[0] * self.kernel[1] * plane
        macs = per_image * self.conv_out_channels // self.group
        images = max(-(-512 // plane), -(-(1 << 23) // max(macs, 1)))
        images = max(1, min(images, (1 << 20) // per_image))
        return image_chunks(self.num, per_image, target=images * per_image)

    def _padded(self, im):
        """(flat zero-padded planes of im (n, C, H, W), padded H, padded W): this thread's
        buffer, or im itself without padding."""
        n, c, h, w = im.shape
        ph, pw = self.pad
        if not (ph or pw):
            return im.reshape(-1), h, w
        src = scratch('conv_pad', n * c * (h + 2 * ph) * (w + 2 * pw))
        pad_planes(im.reshape(-1), n * c, h, w, ph, pw, src)
        return src, h + 2 * ph, w + 2 * pw

    def _im2col(self, im, rows=None, padded=None):
        """im (n, C_in, H, W) -> this thread's column buffer (C_in*kh*kw, n*P); with ``rows``
        (r0, r1), the columns of output rows r0 .. r1 - 1 only; ``padded``: what
        :meth:`_padded` made of im, if it has been called already."""
        n, c = im.shape[:2]
        k = c * self.kernel[0] * self.kernel[1]
        r0, r1 = rows or (0, self.col_hw[0])
        col = scratch('conv_col', k * n * (r1 - r0) * self.col_hw[1]).reshape(k, -1)
        src, hp, wp = padded or self._padded(im)
        columns(src[r0 * self.stride[0] * wp:], n, c, hp, wp, *self._kernel_geometry(r1 - r0), col.reshape(-1),
                col.shape[1], True)
        return col

    def _kernel_geometry(self, out_rows=None):
        return self.kernel + self.stride + self.dilation + (out_rows or self.col_hw[0], self.col_hw[1])

    def _bands(self):
        """Output-row ranges of one image that im2col lowers at a time: all rows, unless one
        image's column buffer passes BAND_COLUMNS; then even bands, each of at least
        BAND_MIN_COLUMNS columns and a buffer of at least about BAND_COLUMNS. Depends on the
        shapes only."""
        k = self.conv_in_channels * self.kernel[0] * self.kernel[1]
        out_h, out_w = self.col_hw
        rows = max(-(-BAND_MIN_COLUMNS // out_w), BAND_COLUMNS // (k * out_w))
        count = max(1, out_h // rows) if k * out_h * out_w > BAND_COLUMNS else 1
        return [(out_h * i // count, out_h * (i + 1) // count) for i in range(count)]

    def _one_image_each(self):
        """Chunks of one image (layers lowered in bands)."""
        return [(n, n + 1) for n in range(self.num)]

    def _col2im(self, col, im):
        """col (C_in*kh*kw, n*P) -> im (n, C_in, H, W), overwritten (through a padded buffer)."""
        n, c = im.shape[:2]
        (h, w), (ph, pw) = im.shape[2:], self.pad
        dst = im.reshape(-1)
        if ph or pw:
            dst = scratch('conv_pad', n * c * (h + 2 * ph) * (w + 2 * pw))
        columns(dst, n, c, h + 2 * ph, w + 2 * pw, *self._kernel_geometry(), col.reshape(-1), col.shape[1], False)
        if ph or pw:
            crop_planes(dst, n * c, h, w, ph, pw, im.reshape(-1))

    def _gemm(self, w, a, out=None, transpose_w=False, multiply=gemm):
        """Per group g: out_g = W_g (O_g, K_g) @ a_g (K_g, M) (or W_g.T @ a_g), written into
        ``out`` (rows of all groups; allocated when None) by ``multiply`` (intra_op's gemm, or
        its thread-splitting matmul)."""
        g = self.group
        o, k = w.shape[0] // g, w.shape[1]
        if out is None:
            out = np.empty(((k if transpose_w else o) * g, a.shape[1]), np.float32)
        if transpose_w and WIDE and multiply is gemm and a.flags.c_contiguous and out.flags.c_contiguous:
            # W_g.T @ a_g sums over the O_g output channels only, too short for OpenBLAS's
            # packing: batched_gemm's sixteen-lane blocks, LeNet's conv2 (500 x 50 times 50 x
            # 512), one thread: 0.19 -> 0.15 ms a chunk
            m = a.shape[1]
            run_batched_gemm(w.reshape(-1), 0, o * k, 1, k, a.reshape(-1), 0, o * m, m,
                             out.reshape(-1), 0, k * m, m, g, k, o, m)
            return out
        for i in range(g):
            wg = w[i * o:(i + 1) * o]
            if transpose_w:
                multiply(wg.T, a[i * o:(i + 1) * o], out[i * k:(i + 1) * k])
            else:
                multiply(wg, a[i * k:(i + 1) * k], out[i * o:(i + 1) * o])
        return out

    def _weight_grad(self, dout, col, wdiff):
        """wdiff (O, K) += dout (O, M) @ col (K, M).T, per group."""
        g = self.group
        o, k = dout.shape[0] // g, col.shape[0] // g
        for i in range(g):
            wdiff[i * o:(i + 1) * o] += dout[i * o:(i + 1) * o] @ col[i * k:(i + 1) * k].T


def to_channel_major(a, out=None):
    """(n, C, P) -> (C, n*P): a copy, or written into ``out``."""
    n, c, p = a.shape
    if out is None:
        return a.transpose(1, 0, 2).reshape(c, n * p)
    out.reshape(c, n, p)[...] = a.transpose(1, 0, 2)
    return out


def from_channel_major(m, out):
    """(C, n*P) -> out (n, C, P)."""
    n, c, p = out.shape
    out[...] = m.reshape(c, n, p).transpose(1, 0, 2)


@LAYERS.register('Convolution', v1_name='CONVOLUTION')
class ConvolutionLayer(BaseConvolutionLayer):
    """Each chunk of images (sized so its column buffer stays in cache) is lowered by im2col
    into a per-thread buffer and multiplied by the weights in one GEMM per group; chunks run on
    the intra-op threads. Weight and bias gradients are per-chunk partials added in chunk
    order, so the result does not depend on the thread count. Stride-1 3x3 and 5x5
    convolutions take Winograd (:mod:`.winograd`) where it keeps Caffe's results: see
    :meth:`forward` and :meth:`backward`; ``engine: CAFFE`` keeps im2col throughout."""
    type = 'Convolution'
    keep_5x5_rounding = False
    """Set by the data-parallel solver on its training net when it reduces gradients in buckets
    (``--overlap on``, two levels): no F(2x2, 5x5) forward either (see :meth:`backward`), so
    that a run that loses ranks stays within rounding of the failure-free one. Its default sum
    in worker order leaves it off: every run adds the same bits."""

    fuses_relu = True  # every forward path applies it while writing the top (see Layer)
    fuses_relu_backward = True  # and every backward path overwrites the bottom diffs

    def layer_setup(self, bottom, top):
        super().layer_setup(bottom, top)
        self.winograd = Winograd(self.kernel[0], self.pad, self.group) if Winograd.applies(self) else None

    def _direct_geometry(self):
        """Whether :mod:`~pycaffe_ft.kernels.direct_conv` can run this layer: stride 1, no
        dilation or groups, rows of at least 8 outputs, kernels at least DIRECT_MIN_KERNEL_WIDTH
        wide, ``engine`` not CAFFE."""
        p = self.layer_param.convolution_param
        return (p.engine != caffe_pb2.ConvolutionParameter.CAFFE and self.group == 1
                and self.stride == (1, 1) and self.dilation == (1, 1) and self.out_hw[1] >= 8
                and self.kernel[1] >= DIRECT_MIN_KERNEL_WIDTH)

    def algorithms(self):
        """(forward, backward): 'direct', 'Winograd F(2x2, rxr)' or 'im2col', what the passes
        use now ('direct' backward: the weight gradient; a bottom diff, if any, by im2col).

        Forward by Winograd only where nothing later picks by comparing values (see
        Layer.selects_by_value): flat image regions give exactly equal im2col sums, which max
        pooling must resolve as Caffe does. The direct forward runs the same chain of
        multiply-adds at every position, so equal patches keep equal sums there too: it runs
        layers of at most DIRECT_MAX_TAPS input values per output, and those of at most
        DIRECT_MAX_CHANNELS input channels that would take im2col. The direct weight gradient
        runs the first kind where the backward would take im2col. Backward: see
        :meth:`backward`."""
        forward, backward = self._fast_algorithms()
        if self._direct_geometry():
            taps = self.channels * self.kernel[0] * self.kernel[1]
            small = taps <= DIRECT_MAX_TAPS
            if small or (forward == 'im2col' and self.channels <= DIRECT_MAX_CHANNELS):
                forward = 'direct'
            if small and backward == 'im2col' and self.num_output >= 3 and taps >= 3:
                backward = 'direct'
        return forward, backward

    def backward_compiles(self):
        """The direct weight gradient's reference, or the im2col backward's chunk kernel and its
        C functions (see :meth:`backward`), for the backward this layer runs."""
        algorithm = self.algorithms()[1]
        if algorithm == 'direct' and self.param_propagate_down[0]:
            return weight_gradient_reference_ahead(self.in_hw[1] + 2 * self.pad[1], self.kernel[1], self.num_output)
        if algorithm == 'im2col' and self._small_products():
            return backward_chunk_ahead(self.stride[1], self.out_hw[1])
        return []

    def _small_products(self):
        """Whether the im2col backward runs as :mod:`~pycaffe_ft.kernels.im2col_chunks` (see
        SMALL_PRODUCT_OUTPUTS)."""
        p = self.layer_param.convolution_param
        return (WIDE and p.engine != caffe_pb2.ConvolutionParameter.CAFFE and self.group == 1
                and self.num_output <= SMALL_PRODUCT_OUTPUTS and (self.out_hw[0] * self.out_hw[1]) % 8 == 0
                and len(self._bands()) == 1)

    def _fast_algorithms(self):
        """(forward, backward) from 'Winograd F(2x2, rxr)' and 'im2col'."""
        positions = self.num * self.out_hw[0] * self.out_hw[1]
        if self.winograd is None or not Winograd.pays(positions, max(self.channels, self.num_output) // self.group):
            return 'im2col', 'im2col'
        name = 'Winograd F(2x2, %dx%d)' % self.kernel
        forward = 'im2col' if self.before_value_selection else name
        if self.kernel[0] == 3:
            return forward, name
        if self.keep_5x5_rounding:
            return 'im2col', 'im2col'
        ci, co = self.channels // self.group, self.num_output // self.group
        backward = Winograd.fast_products(ci, co) and Winograd.fast_products(co, ci)
        return forward, name if backward else 'im2col'

    def forward(self, bottom, top):
        bias = self.blobs[1].data if self.bias_term else None
        if self.algorithms()[0] == 'direct':
            self._direct_forward(bottom, top)
            return
        if self.algorithms()[0] != 'im2col':
            for b, t in zip(bottom, top):
                self.winograd.forward(b.data.reshape((self.num, self.channels) + self.in_hw),
                                      self.blobs[0].data, bias,
                                      t.data.reshape((self.num, self.num_output) + self.out_hw),
                                      self.in_hw, self.out_hw, self.relu_on_top)
            return
        w = self.blobs[0].data.reshape(self.num_output, -1)
        bands = self._bands()
        chunks = self._chunks() if len(bands) == 1 else self._one_image_each()
        # fewer chunks than threads (deploy at batch 1, one image not in bands: those go to
        # _bands_forward): the threads split each GEMM instead
        multiply = matmul if len(chunks) < num_threads() else gemm
        for b, t in zip(bottom, top):
            x = b.data.reshape((self.num, self.channels) + self.in_hw)
            y = t.data.reshape(self.num, self.num_output, -1)
            if self.num == 1 and len(bands) > 1:
                self._bands_forward(w, x, y, bias, bands)
                continue

            def chunk(lo, hi):
                padded = self._padded(x[lo:hi])
                for rows in bands:
                    if hi - lo == 1:
                        self._image_band(w, x[lo:hi], y[lo], rows, padded, bias, multiply)
                        continue
                    col = self._im2col(x[lo:hi], rows, padded)
                    out = scratch('conv_out', self.num_output * col.shape[1]).reshape(self.num_output, -1)
                    from_channel_major(self._gemm(w, col, out, multiply=multiply), y[lo:hi])
                    if self.bias_term:
                        y[lo:hi] += bias.reshape(1, -1, 1)
                self.relu_on_top_of(y[lo:hi])
            run_chunks(chunk, chunks)

    def _image_band(self, w, x, y, rows, padded, bias, multiply=gemm):
        """Output rows ``rows`` (r0, r1) of one image x (1, C, H, W) into its top y (O, P), the
        GEMM writing them in place: lowered (``padded``: what :meth:`_padded` made of x),
        multiplied by ``multiply``, plus the bias."""
        out_w = self.out_hw[1]
        out = y[:, rows[0] * out_w:rows[1] * out_w]
        self._gemm(w, self._im2col(x, rows, padded), out, multiply=multiply)
        if self.bias_term:
            out += bias.reshape(-1, 1)

    def _bands_forward(self, w, x, y, bias, bands):
        """The im2col forward of one image x (1, C, H, W) into y (1, O, P) whose output rows
        are lowered in ``bands``: the bands over the threads, each lowered and multiplied in one
        BLAS call on its own thread (the same calls on any thread count: the same bits, those
        one thread gave before), where splitting each band's product into column blocks over
        the threads left its lowering, bias and ReLU on one and gave other bits (ResNet-50's
        conv1 at batch 1, 4.6 ms on one thread and on two)."""
        padded = self._padded(x)
        run_chunks(lambda r0, r1: self._image_band(w, x, y[0], (r0, r1), padded, bias), bands)
        self.relu_on_top_of(y)

    def _direct_forward(self, bottom, top):
        weights = self.blobs[0].data.reshape(-1)
        bias = self.blobs[1].data if self.bias_term else weights[:1]
        for b, t in zip(bottom, top):
            x = b.data.reshape((self.num, self.channels) + self.in_hw)
            y = t.data.reshape(self.num, -1)

            def chunk(lo, hi):
                src, hp, wp = self._padded(x[lo:hi])
                direct_forward(src, hi - lo, self.channels, hp, wp, weights, self.num_output, *self.kernel, bias,
                               self.bias_term, y[lo:hi].reshape(-1), relu=self.relu_on_top)
            run_chunks(chunk, self._chunks(direct=True))

    def backward(self, top, propagate_down, bottom):
        # Winograd in the backward pass: 3x3 always (F(2x2, 3x3) rounds like im2col); 5x5 where
        # its products run in batched_gemm both ways (else im2col was faster: LeNet's conv2, 20
        # -> 50 channels, 17-21 against 11-12 ms; CIFAR10-quick's conv2 38-54 against 55 ms) and
        # not in a data-parallel training net that reduces in buckets: F(2x2, 5x5) rounds to ~1.5e-6 of the
        # result (im2col ~5e-7), and runs whose gradient reductions round differently (N ranks,
        # one process with N virtual workers, a run that lost ranks) then drift apart until a
        # max pooling picks another element: 1.1e-4 of max|w| after 20 LeNet iterations with
        # three ranks killed, against 2e-7 with im2col (its forward in training nets without a
        # later max pooling: 1e-3 against 1.3e-6 after 60 iterations of such a net, hence
        # keep_5x5_rounding)
        algorithm = self.algorithms()[1]
        winograd = self.winograd if algorithm.startswith('Winograd') else None
        winograd_w = winograd is not None and self.param_propagate_down[0]
        direct_w = algorithm == 'direct' and self.param_propagate_down[0]
        w = self.blobs[0].data.reshape(self.num_output, -1)
        wdiff = self.blobs[0].diff.reshape(self.num_output, -1)
        need_w = self.param_propagate_down[0] and not winograd_w
        need_b = self.bias_term and self.param_propagate_down[1]
        g, o, k = self.group, self.num_output // self.group, w.shape[1]
        plane, out_w = self.out_hw[0] * self.out_hw[1], self.out_hw[1]
        bands = [(0, self.out_hw[0])] if direct_w else self._bands()
        for index, (b, t, propagate) in enumerate(zip(bottom, top, propagate_down)):
            dy = t.diff.reshape(self.num, self.num_output, plane)
            x = b.data.reshape((self.num, self.channels) + self.in_hw)
            dx = b.diff.reshape((self.num, self.channels) + self.in_hw)
            if winograd_w:
                wdiff += winograd.weight_gradient(x, dy, self.in_hw, self.out_hw).reshape(wdiff.shape)
            if propagate and winograd is not None:
                winograd.backward_data(dy, self.blobs[0].data, dx, self.in_hw, self.out_hw,
                                       lambda lo, hi: self.mask_relu_below(bottom, index, lo, hi))
            down = propagate and winograd is None
            if not (need_w or need_b or down):
                continue
            chunks = self._chunks(direct=direct_w and not down) if len(bands) == 1 else self._one_image_each()
            if algorithm == 'im2col' and self._small_products():  # one kernel call a chunk
                self._small_backward_pass(x, dy, dx, need_w, need_b, down, chunks,
                                          lambda lo, hi: self.mask_relu_below(bottom, index, lo, hi))
                continue

            def chunk(lo, hi):
                bias_part = None
                if need_b and not direct_w:
                    bias_part = dy[lo:hi].sum(axis=2).sum(axis=0)
                w_part = None
                if direct_w:  # (O, K), as the weights; the bias gradient with them
                    w_part = np.empty_like(wdiff)
                    bias_part = np.empty(self.num_output if need_b else 0, np.float32)
                    src, hp, wp = self._padded(x[lo:hi])
                    direct_weight_gradient(src, hi - lo, self.channels, hp, wp, dy[lo:hi].reshape(-1),
                                           self.num_output, *self.kernel, w_part.reshape(-1), bias_part)
                if not (down or (need_w and not direct_w)):
                    return w_part, bias_part
                if hi - lo == 1:  # one image is channel-major already
                    dy_cm = dy[lo]
                else:
                    dy_cm = scratch('conv_out', self.num_output * (hi - lo) * plane).reshape(self.num_output, -1)
                    to_channel_major(dy[lo:hi], dy_cm)
                if need_w and not direct_w:  # (K_g, O_g) per group: the orientation BLAS runs fastest
                    w_part = np.empty((g, k, o), np.float32)
                    padded = self._padded(x[lo:hi])
                    for j, (r0, r1) in enumerate(bands):  # partial sums added band by band
                        col = self._im2col(x[lo:hi], (r0, r1), padded)
                        for i in range(g):
                            gemm(col[i * k:(i + 1) * k], dy_cm[i * o:(i + 1) * o, r0 * out_w:r1 * out_w].T, w_part[i],
                                 accumulate=j > 0)
                if down:
                    rows = self.conv_in_channels * self.kernel[0] * self.kernel[1]
                    col = scratch('conv_col', rows * dy_cm.shape[1]).reshape(rows, -1)
                    self._col2im(self._gemm(w, dy_cm, col, transpose_w=True), dx[lo:hi])
                    self.mask_relu_below(bottom, index, lo, hi)
                return w_part, bias_part
            w_parts, bias_parts = zip(*run_chunks(chunk, chunks))
            if direct_w:
                wdiff += sum_in_chunk_order(w_parts)
            elif need_w:
                total = sum_in_chunk_order(w_parts)
                for i in range(g):
                    wdiff[i * o:(i + 1) * o] += total[i].T
            if need_b:
                self.blobs[1].diff[...] += sum_in_chunk_order(bias_parts)

    def _small_backward_pass(self, x, dy, dx, need_w, need_b, down, chunks, after):
        """The im2col backward, one :func:`~pycaffe_ft.kernels.im2col_chunks.backward_chunk` a
        chunk of images (then ``after(lo, hi)`` where dx was written), the weight and bias
        gradients summed in chunk order. Padded images are bordered (x) and cropped (dx) here."""
        weights = self.blobs[0].data.reshape(-1)
        c, o, k = self.channels, self.num_output, weights.size // self.num_output
        plane = self.out_hw[0] * self.out_hw[1]
        row_length = patch_row_length(k, self.kernel[1])
        (h, w), (ph, pw) = self.in_hw, self.pad
        geometry = (c, h + 2 * ph, w + 2 * pw) + self.kernel + self.stride + self.dilation + tuple(self.out_hw)
        gemm, lower = batched_gemm_function(), columns_function(self.stride[1], self.out_hw[1])
        dy, dx_flat = dy.reshape(self.num, -1), dx.reshape(self.num, -1)

        def chunk(lo, hi):
            n, positions = hi - lo, (hi - lo) * plane
            w_part = np.empty((o, row_length) if need_w else 0, np.float32)
            bias_part = np.empty(o if need_b else 0, np.float32)
            grad = (scratch('conv_pad_diff', n * c * geometry[1] * geometry[2]) if ph or pw
                    else dx_flat[lo:hi].reshape(-1))
            backward_chunk(self._padded(x[lo:hi])[0] if need_w else x[lo:hi].reshape(-1), dy[lo:hi].reshape(-1), n,
                           *geometry, weights, o, need_w, row_length, w_part.reshape(-1), need_b, bias_part, down,
                           grad, scratch('conv_col', k * positions if down else 1),
                           scratch('conv_patch_rows', positions * row_length if need_w else 1),
                           scratch('conv_out', o * positions), gemm, lower)
            if down:
                if ph or pw:
                    crop_planes(grad, n * c, h, w, ph, pw, dx_flat[lo:hi].reshape(-1))
                after(lo, hi)
            return w_part[:, :k] if need_w else w_part, bias_part  # the columns past k hold anything
        await_ahead(backward_chunk)
        w_parts, bias_parts = zip(*run_chunks(chunk, chunks))
        if need_w:
            self.blobs[0].diff.reshape(o, k)[...] += sum_in_chunk_order(w_parts)
        if need_b:
            self.blobs[1].diff[...] += sum_in_chunk_order(bias_parts)


@LAYERS.register('Deconvolution', v1_name='DECONVOLUTION')
class DeconvolutionLayer(BaseConvolutionLayer):
    """The transpose of Convolution: out = stride*(in-1) + dilation*(k-1) + 1 - 2*pad;
    weights (C_in, num_output/group, kh, kw)."""
    type = 'Deconvolution'
    reverse_dimensions = True

    def output_shape(self, in_h, in_w):
        return tuple(s * (size - 1) + d * (k - 1) + 1 - 2 * p for size, k, s, p, d in
                     zip((in_h, in_w), self.kernel, self.stride, self.pad, self.dilation))

    def forward(self, bottom, top):
        w = self.blobs[0].data.reshape(self.channels, -1)
        for b, t in zip(bottom, top):
            x = b.data.reshape(self.num, self.channels, -1)
            y = t.data.reshape((self.num, self.num_output) + self.out_hw)
            for lo, hi in self._chunks():
                self._col2im(self._gemm(w, to_channel_major(x[lo:hi]), transpose_w=True), y[lo:hi])
            if self.bias_term:
                y += self.blobs[1].data.reshape(1, -1, 1, 1)

    def backward(self, top, propagate_down, bottom):
        w = self.blobs[0].data.reshape(self.channels, -1)
        wdiff = self.blobs[0].diff.reshape(self.channels, -1)
        for b, t, down in zip(bottom, top, propagate_down):
            dy = t.diff.reshape((self.num, self.num_output) + self.out_hw)
            if self.bias_term and self.param_propagate_down[1]:
                self.blobs[1].diff[...] += dy.sum(axis=(0, 2, 3))
            x = b.data.reshape(self.num, self.channels, -1)
            dx = b.diff.reshape(self.num, self.channels, -1)
            for lo, hi in self._chunks():
                dcol = self._im2col(dy[lo:hi])
                if self.param_propagate_down[0]:
                    self._weight_grad(to_channel_major(x[lo:hi]), dcol, wdiff)
                if down:
                    from_channel_major(self._gemm(w, dcol), dx[lo:hi])


@LAYERS.register('Im2col', v1_name='IM2COL')
class Im2colLayer(BaseConvolutionLayer):
    """Top (N, C*kh*kw, out_h, out_w): the convolution's column buffer, per image."""
    type = 'Im2col'
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.convolution_param
        self.channel_axis = bottom[0].canonical_axis(p.axis)
        if bottom[0].num_axes - self.channel_axis - 1 != 2:
            raise self.error('only 2-D im2col is supported (bottom shape %s)' % (list(bottom[0].shape),))
        self.kernel = spatial_param(self, p, 'kernel_size', None)
        self.stride = spatial_param(self, p, 'stride', 1)
        self.pad = spatial_param(self, p, 'pad', 0, allow_zero=True)
        dil = list(p.dilation)
        self.dilation = (tuple(dil) * 2)[:2] if len(dil) == 1 else (tuple(dil) if dil else (1, 1))
        self.channels = self.conv_in_channels = bottom[0].shape[self.channel_axis]
        self.num_output = self.channels * self.kernel[0] * self.kernel[1]
        self.group = 1
        self.conv_out_channels = 1  # no GEMM: chunks are sized by the column buffer alone

    def forward(self, bottom, top):
        x = bottom[0].data.reshape((self.num, self.channels) + self.in_hw)
        y = top[0].data.reshape(self.num, self.num_output, -1)
        for lo, hi in self._chunks():
            from_channel_major(self._im2col(x[lo:hi]), y[lo:hi])

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].diff.reshape(self.num, self.num_output, -1)
        dx = bottom[0].diff.reshape((self.num, self.channels) + self.in_hw)
        for lo, hi in self._chunks():
            self._col2im(to_channel_major(dy[lo:hi]), dx[lo:hi])
