"""Convolution (2-D, per-dimension pad/stride/kernel, dilation, group, bias) via im2col + BLAS."""
import numpy as np

from ..kernels.im2col import col2im, im2col
from ..registry import LAYERS
from .base import Layer
from .geometry import spatial_param

__all__ = ['ConvolutionLayer', 'BaseConvolutionLayer']


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
        self.is_1x1 = self.kernel == (1, 1) and self.stride == (1, 1) and self.pad == (0, 0)
        self.channels = bottom[0].shape[self.channel_axis]
        self.num_output = p.num_output
        if self.num_output <= 0:
            raise self.error('num_output must be positive')
        self.group = p.group
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
        self._col = np.zeros(0, np.float32)

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

    def _col_buffer(self):
        k = self.conv_in_channels * self.kernel[0] * self.kernel[1]
        p = self.col_hw[0] * self.col_hw[1]
        size = self.num * k * p
        if self._col.size < size:
            self._col = np.empty(size, np.float32)
        return self._col[:size].reshape(self.num, k, p)

    def _im2col(self, im):
        """im (N, C_in, H, W) -> col (N, C_in*kh*kw, out_h*out_w), a view if 1x1."""
        if self.is_1x1:
            return im.reshape(im.shape[0], im.shape[1], -1)
        col = self._col_buffer()
        im2col(im, self.kernel[0], self.kernel[1], self.pad[0], self.pad[1], self.stride[0],
               self.stride[1], self.dilation[0], self.dilation[1], self.col_hw[0], self.col_hw[1], col)
        return col

    def _col2im(self, col, im):
        if self.is_1x1:
            im.reshape(col.shape)[...] = col
            return
        col2im(col, self.kernel[0], self.kernel[1], self.pad[0], self.pad[1], self.stride[0],
               self.stride[1], self.dilation[0], self.dilation[1], self.col_hw[0], self.col_hw[1], im)

    def _grouped(self, w, a):
        """Per group g: W_g (O_g, K_g) @ a_g (N, K_g, P) -> (N, O, P)."""
        g = self.group
        if g == 1:
            return np.matmul(w, a)
        o, k = w.shape[0] // g, a.shape[1] // g
        return np.concatenate([np.matmul(w[i * o:(i + 1) * o], a[:, i * k:(i + 1) * k])
                               for i in range(g)], axis=1)

    def _weight_grad(self, dout, col, wdiff):
        """wdiff (O, K) += sum_n dout[n] (N, O, P) @ col[n].T, per group."""
        g = self.group
        o, k = dout.shape[1] // g, col.shape[1] // g
        for i in range(g):
            d = dout[:, i * o:(i + 1) * o]
            c = col[:, i * k:(i + 1) * k]
            wdiff[i * o:(i + 1) * o] += np.tensordot(d, c, axes=([0, 2], [0, 2]))


@LAYERS.register('Convolution', v1_name='CONVOLUTION')
class ConvolutionLayer(BaseConvolutionLayer):
    type = 'Convolution'

    def forward(self, bottom, top):
        w = self.blobs[0].data.reshape(self.num_output, -1)
        for b, t in zip(bottom, top):
            x = b.data.reshape((self.num, self.channels) + self.in_hw)
            col = self._im2col(x)
            y = t.data.reshape(self.num, self.num_output, -1)
            y[...] = self._grouped(w, col)
            if self.bias_term:
                y += self.blobs[1].data.reshape(1, -1, 1)

    def backward(self, top, propagate_down, bottom):
        w = self.blobs[0].data.reshape(self.num_output, -1)
        wdiff = self.blobs[0].diff.reshape(self.num_output, -1)
        for b, t, down in zip(bottom, top, propagate_down):
            dy = t.diff.reshape(self.num, self.num_output, -1)
            if self.bias_term and self.param_propagate_down[1]:
                self.blobs[1].diff[...] += dy.sum(axis=(0, 2))
            if self.param_propagate_down[0]:
                x = b.data.reshape((self.num, self.channels) + self.in_hw)
                self._weight_grad(dy, self._im2col(x), wdiff)
            if down:
                dcol = self._grouped_t(w, dy)
                self._col2im(dcol, b.diff.reshape((self.num, self.channels) + self.in_hw))

    def _grouped_t(self, w, dy):
        """Per group g: W_g.T (K_g, O_g) @ dy_g (N, O_g, P) -> (N, K, P)."""
        g = self.group
        o = w.shape[0] // g
        if g == 1:
            return np.matmul(w.T, dy)
        return np.concatenate([np.matmul(w[i * o:(i + 1) * o].T, dy[:, i * o:(i + 1) * o])
                               for i in range(g)], axis=1)
