"""BatchNorm, Scale, Bias and MVN, with Caffe's stored-statistics conventions."""
import numpy as np

from ..intra_op import for_images
from ..kernels.channelwise import channel_moments, multiply_add, normalized_backward, scale_backward, \
    subtract_multiply
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer

__all__ = ['BatchNormLayer', 'ScaleLayer', 'BiasLayer', 'MVNLayer']

_NO_BIAS = np.zeros(1, np.float32)  # the bias argument of multiply_add without one


def _buffer_like(buffer, x):
    """``buffer`` if it has x's shape (kept between passes), else a new one."""
    return buffer if buffer is not None and buffer.shape == x.shape else np.empty_like(x)


@LAYERS.register('BatchNorm')
class BatchNormLayer(Layer):
    """Normalise per channel (axis 1) with batch statistics (TRAIN) or the stored ones.

    Blobs: un-normalised mean and variance accumulators and their scale factor:
    mean = blob0 / blob2, var = blob1 / blob2 (0 if blob2 == 0). With batch statistics each
    forward does blob2 = blob2 * maf + 1, blob0 = blob0 * maf + mean, blob1 = blob1 * maf +
    m/(m-1) * var. No affine part (Caffe uses a Scale layer), never writes param diffs.
    """
    type = 'BatchNorm'
    exact_num_bottom = 1
    exact_num_top = 1
    fuses_relu = True  # its forward applies the in-place ReLU after it (see Layer)

    def layer_setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        self.use_global_stats = p.use_global_stats if p.HasField('use_global_stats') \
            else self.phase == caffe_pb2.TEST
        self.maf = np.float32(p.moving_average_fraction)
        self.eps = np.float32(p.eps)
        self.channels = bottom[0].shape[1] if bottom[0].num_axes > 1 else 1
        self.init_params([(self.channels,), (self.channels,), (1,)], [None, None, None])
        for i in range(len(self.blobs)):
            if i == len(self.layer_param.param):
                self.layer_param.param.add(lr_mult=0.0)
            elif self.layer_param.param[i].lr_mult != 0:
                raise self.error('cannot configure batch normalization statistics as layer '
                                 'parameters (lr_mult must be 0)')
        self.stats_hook = None  # parallel trainers combine the statistics of virtual workers

    def reshape(self, bottom, top):
        if bottom[0].num_axes > 1 and bottom[0].shape[1] != self.channels:
            raise self.error('bottom has %d channels, the layer was set up for %d'
                             % (bottom[0].shape[1], self.channels))
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)

    def _geometry(self, blob):
        """(outer, inner): the bottom as (outer, channels, inner)."""
        outer = blob.shape[0] if blob.ndim else 1
        return outer, blob.size // max(outer * self.channels, 1)

    def forward(self, bottom, top):
        x = bottom[0].data
        src = x.reshape(-1)
        outer, inner = self._geometry(x)
        if self.use_global_stats:
            factor = self.blobs[2].data[0]
            factor = 0.0 if factor == 0 else 1.0 / factor
            mean = self.blobs[0].data * np.float32(factor)
            var = self.blobs[1].data * np.float32(factor)
        else:
            mean, var = np.empty(self.channels), np.empty(self.channels)
            for_images(lambda lo, hi: channel_moments(src, outer, self.channels, inner, lo, hi, mean, var),
                       self.channels, outer * inner)
            m = outer * inner
            correction = m / (m - 1.0) if m > 1 else 1.0
            if self.stats_hook is not None:
                self.stats_hook(self, mean, var * correction)
            else:
                self.blobs[2].data[0] = self.blobs[2].data[0] * self.maf + 1
                self.blobs[0].data[...] = self.blobs[0].data * self.maf + mean.astype(np.float32)
                self.blobs[1].data[...] = self.blobs[1].data * self.maf + (var * correction).astype(np.float32)
        self.inv_std = (1.0 / np.sqrt(np.asarray(var, np.float64) + self.eps)).astype(np.float32)
        keeping = not self.use_global_stats
        if keeping:
            self.x_norm = _buffer_like(getattr(self, 'x_norm', None), x)
        keep = self.x_norm.reshape(-1) if keeping else src
        shift, dst = np.asarray(mean, np.float32), top[0].data.reshape(-1)
        for_images(lambda lo, hi: subtract_multiply(src, dst, keep, lo, hi, self.channels, inner, shift,
                                                    self.inv_std, self.relu_on_top, keeping),
                   outer * self.channels, inner)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy, dx = top[0].diff.reshape(-1), bottom[0].diff.reshape(-1)
        outer, inner = self._geometry(top[0].diff)
        if self.use_global_stats:
            for_images(lambda lo, hi: multiply_add(dy, dx, dx, lo, hi, self.channels, inner, self.inv_std,
                                                   _NO_BIAS, False, False, False),
                       outer * self.channels, inner)
            return
        y = self.x_norm.reshape(-1)
        for_images(lambda lo, hi: normalized_backward(dy, y, dx, outer, self.channels, inner, lo, hi,
                                                      self.inv_std),
                   self.channels, outer * inner)


def _scale_geometry(layer, bottom, param_shape_from):
    """(outer, dim, inner, param shape) for Scale/Bias with axis/num_axes or a second bottom."""
    x = bottom[0]
    if param_shape_from is not None:
        shape = tuple(param_shape_from.shape)
        axis = x.canonical_axis(layer.axis_param) if x.num_axes else 0
        if tuple(x.shape[axis:axis + len(shape)]) != shape:
            raise layer.error('the second bottom\'s shape %s must match the first bottom\'s shape '
                              '%s from axis %d' % (list(shape), list(x.shape), axis))
    else:
        axis = x.canonical_axis(layer.axis_param) if x.num_axes else 0
        n = layer.num_axes_param
        if n < -1:
            raise layer.error('num_axes must be non-negative, or -1 for all remaining axes')
        end = x.num_axes if n == -1 else axis + n
        if end > x.num_axes:
            raise layer.error('axis %d + num_axes %d exceed the bottom\'s %d axes' % (axis, n, x.num_axes))
        shape = tuple(x.shape[axis:end])
    outer = x.count_range(0, axis)
    dim = int(np.prod(shape, dtype=np.int64))
    inner = x.count_range(axis + len(shape))
    return outer, dim, inner, shape


@LAYERS.register('Scale')
class ScaleLayer(Layer):
    """y = x * scale (+ bias), scale broadcast from ``axis`` over ``num_axes`` axes; the scale is
    a learned blob, or bottom 1."""
    type = 'Scale'
    min_num_bottom = 1
    max_num_bottom = 2
    exact_num_top = 1
    fuses_relu = True  # its forward applies the in-place ReLU after it (see Layer)

    def layer_setup(self, bottom, top):
        p = self.layer_param.scale_param
        self.axis_param, self.num_axes_param = p.axis, p.num_axes
        self.learned_scale = len(bottom) == 1
        shapes, fillers = [], []
        if self.learned_scale:
            shape = _scale_geometry(self, bottom, None)[3]
            shapes.append(shape)
            fillers.append(p.filler if p.HasField('filler') else caffe_pb2.FillerParameter(type='constant', value=1))
        if p.bias_term:
            shape = _scale_geometry(self, bottom, None if self.learned_scale else bottom[1])[3]
            shapes.append(shape)
            fillers.append(p.bias_filler)
        self.init_params(shapes, fillers)
        self.bias_index = len(shapes) - 1 if p.bias_term else None

    def reshape(self, bottom, top):
        self.outer, self.dim, self.inner, _ = _scale_geometry(
            self, bottom, None if self.learned_scale else bottom[1])
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)

    def _scale(self, bottom):
        return (self.blobs[0].data if self.learned_scale else bottom[1].data).reshape(-1)

    def _bias(self):
        return _NO_BIAS if self.bias_index is None else self.blobs[self.bias_index].data.reshape(-1)

    def forward(self, bottom, top):
        x = bottom[0].data
        keeping = top[0] is bottom[0]
        if keeping:
            self._x = _buffer_like(getattr(self, '_x', None), x)
        src, dst = x.reshape(-1), top[0].data.reshape(-1)
        keep = self._x.reshape(-1) if keeping else src
        scale, bias = self._scale(bottom), self._bias()
        for_images(lambda lo, hi: multiply_add(src, dst, keep, lo, hi, self.dim, self.inner, scale, bias,
                                               self.bias_index is not None, self.relu_on_top, keeping),
                   self.outer * self.dim, self.inner)

    def backward(self, top, propagate_down, bottom):
        need_bias = self.bias_index is not None and self.param_propagate_down[self.bias_index]
        need_scale = self.param_propagate_down[0] if self.learned_scale else propagate_down[1]
        if not (need_bias or need_scale or propagate_down[0]):
            return
        dy = top[0].diff.reshape(-1)
        x = (self._x if top[0] is bottom[0] else bottom[0].data).reshape(-1)
        dx = bottom[0].diff.reshape(-1) if propagate_down[0] else dy
        if self.learned_scale:
            scale_diff = self.blobs[0].diff.reshape(-1)
        else:
            scale_diff = bottom[1].diff.reshape(-1)
            if need_scale:
                scale_diff[...] = 0
        bias_diff = self.blobs[self.bias_index].diff.reshape(-1) if need_bias else scale_diff
        scale = self._scale(bottom)
        for_images(lambda lo, hi: scale_backward(dy, x, dx, self.outer, self.dim, self.inner, lo, hi, scale,
                                                 scale_diff, bias_diff, need_scale, need_bias, propagate_down[0]),
                   self.dim, self.outer * self.inner)


@LAYERS.register('Bias')
class BiasLayer(Layer):
    """y = x + bias, broadcast from ``axis`` over ``num_axes``; a learned blob or bottom 1."""
    type = 'Bias'
    min_num_bottom = 1
    max_num_bottom = 2
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.bias_param
        self.axis_param, self.num_axes_param = p.axis, p.num_axes
        self.learned = len(bottom) == 1
        if self.learned:
            self.init_params([_scale_geometry(self, bottom, None)[3]], [p.filler])

    def reshape(self, bottom, top):
        self.outer, self.dim, self.inner, _ = _scale_geometry(self, bottom, None if self.learned else bottom[1])
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        b = (self.blobs[0].data if self.learned else bottom[1].data).reshape(1, self.dim, 1)
        top[0].data.reshape(self.outer, self.dim, self.inner)[...] = \
            bottom[0].data.reshape(self.outer, self.dim, self.inner) + b

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.outer, self.dim, self.inner)
        if propagate_down[0] and top[0] is not bottom[0]:
            bottom[0].diff[...] = top[0].diff
        if self.learned and self.param_propagate_down[0]:
            self.blobs[0].diff.reshape(-1)[...] += dy.sum(axis=(0, 2), dtype=np.float64)
        elif not self.learned and propagate_down[1]:
            bottom[1].diff.reshape(-1)[...] = dy.sum(axis=(0, 2), dtype=np.float64)


@LAYERS.register('MVN', v1_name='MVN')
class MVNLayer(Layer):
    """Subtract the mean (and divide by std + eps) per item and channel, or per item."""
    type = 'MVN'
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        """Like Caffe, through the legacy num/channels/height/width accessors (1 for a missing
        axis): a 2-D (N, C) bottom gives an (N, C, 1, 1) top, normalised over 1 value per row
        unless across_channels."""
        p = self.layer_param.mvn_param
        b = bottom[0]
        legacy = (b.num, b.channels, b.height, b.width)
        self.rows = b.num if p.across_channels else b.num * b.channels
        if top[0] is not bottom[0]:
            top[0].reshape(legacy)

    def forward(self, bottom, top):
        p = self.layer_param.mvn_param
        x = bottom[0].data.reshape(self.rows, -1).astype(np.float64)
        mean = x.mean(axis=1, keepdims=True)
        y = x - mean
        if p.normalize_variance:
            var = (x * x).mean(axis=1, keepdims=True) - mean * mean
            self.denom = np.sqrt(np.maximum(var, 0)) + p.eps
            y = y / self.denom
        top[0].data.reshape(self.rows, -1)[...] = y

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        p = self.layer_param.mvn_param
        dy = top[0].diff.reshape(self.rows, -1).astype(np.float64)
        if p.normalize_variance:
            y = top[0].data.reshape(self.rows, -1).astype(np.float64)
            dim = dy.shape[1]
            g = y * (y * dy).sum(axis=1, keepdims=True) + dy.sum(axis=1, keepdims=True)
            g = (dy - g / dim) / self.denom
        else:
            g = dy - dy.mean(axis=1, keepdims=True)
        bottom[0].diff.reshape(self.rows, -1)[...] = g
