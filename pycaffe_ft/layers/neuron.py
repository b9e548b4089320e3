"""Elementwise neuron layers, with Caffe's exact forward/backward formulas (and its kinks)."""
import numpy as np

from ..intra_op import for_images, planes
from ..kernels.relu import relu_backward, relu_forward
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import NeuronLayer

__all__ = ['ReLULayer', 'SigmoidLayer', 'TanHLayer', 'AbsValLayer', 'BNLLLayer', 'ELULayer',
           'ClipLayer', 'ExpLayer', 'LogLayer', 'PowerLayer', 'SwishLayer', 'ThresholdLayer',
           'DropoutLayer', 'PReLULayer']

f32 = np.float32


def _elementwise(kernel, *arrays):
    """kernel(*flat slices) over ranges of (image, channel) planes on the intra-op threads, so
    that a single image splits too (arrays of one shape, C-contiguous; in place allowed:
    elementwise kernels)."""
    if arrays[0].size == 0:
        return
    rows = [planes(a) for a in arrays]
    for_images(lambda lo, hi: kernel(*(r[lo:hi].reshape(-1) for r in rows)), rows[0].shape[0], rows[0].shape[1])


class _SavedBottomNeuron(NeuronLayer):
    """A neuron layer whose backward reads the bottom data: when run in place, forward keeps a
    copy of the input so backward sees x, not y."""

    def saved_input(self, bottom, top):
        if top[0] is bottom[0]:
            self._x = np.array(bottom[0].data, copy=True)
            return self._x
        return bottom[0].data

    def input_for_backward(self, top, bottom):
        return self._x if top[0] is bottom[0] else bottom[0].data


@LAYERS.register('ReLU', v1_name='RELU')
class ReLULayer(NeuronLayer):
    """y = max(x, 0) + negative_slope * min(x, 0); backward uses the negative slope at x == 0."""
    type = 'ReLU'

    def forward(self, bottom, top):
        slope = self.layer_param.relu_param.negative_slope
        x = bottom[0].data
        if slope == 0:
            _elementwise(relu_forward, x, top[0].data)
        else:
            top[0].data[...] = np.where(x > 0, x, x * f32(slope))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        slope = self.layer_param.relu_param.negative_slope
        x = bottom[0].data  # in place this is the top data: the sign test is the same
        dy, dx = top[0].diff, bottom[0].diff
        if slope == 0:
            _elementwise(relu_backward, x, dy, dx)
        else:
            bottom[0].diff[...] = np.where(x > 0, dy, dy * f32(slope))


@LAYERS.register('Sigmoid', v1_name='SIGMOID')
class SigmoidLayer(NeuronLayer):
    type = 'Sigmoid'

    def forward(self, bottom, top):
        top[0].data[...] = f32(0.5) * np.tanh(f32(0.5) * bottom[0].data) + f32(0.5)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * y * (f32(1) - y)


@LAYERS.register('TanH', v1_name='TANH')
class TanHLayer(NeuronLayer):
    type = 'TanH'

    def forward(self, bottom, top):
        np.tanh(bottom[0].data, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * (f32(1) - y * y)


@LAYERS.register('AbsVal', v1_name='ABSVAL')
class AbsValLayer(_SavedBottomNeuron):
    type = 'AbsVal'

    def forward(self, bottom, top):
        x = self.saved_input(bottom, top)
        np.abs(x, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * np.sign(self.input_for_backward(top, bottom))


@LAYERS.register('BNLL', v1_name='BNLL')
class BNLLLayer(_SavedBottomNeuron):
    """y = log(1 + exp(x)) (stable form); backward clamps x at 50 inside exp."""
    type = 'BNLL'

    def forward(self, bottom, top):
        x = self.saved_input(bottom, top)
        top[0].data[...] = np.where(x > 0, x + np.log1p(np.exp(-np.abs(x))), np.log1p(np.exp(np.minimum(x, 0))))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            e = np.exp(np.minimum(self.input_for_backward(top, bottom), f32(50)))
            bottom[0].diff[...] = top[0].diff * e / (e + f32(1))


@LAYERS.register('ELU')
class ELULayer(_SavedBottomNeuron):
    type = 'ELU'

    def forward(self, bottom, top):
        alpha = f32(self.layer_param.elu_param.alpha)
        x = self.saved_input(bottom, top)
        top[0].data[...] = np.where(x > 0, x, alpha * (np.exp(np.minimum(x, 0)) - f32(1)))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            alpha = f32(self.layer_param.elu_param.alpha)
            x = self.input_for_backward(top, bottom)
            dy = top[0].diff
            bottom[0].diff[...] = np.where(x > 0, dy, dy * (top[0].data + alpha))


@LAYERS.register('Clip')
class ClipLayer(_SavedBottomNeuron):
    """Clamp to [min, max]; the gradient passes at the (inclusive) bounds."""
    type = 'Clip'

    def layer_setup(self, bottom, top):
        p = self.layer_param.clip_param
        if p.min > p.max:
            raise self.error('min (%g) must not be greater than max (%g)' % (p.min, p.max))

    def forward(self, bottom, top):
        p = self.layer_param.clip_param
        np.clip(self.saved_input(bottom, top), f32(p.min), f32(p.max), out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            p = self.layer_param.clip_param
            x = self.input_for_backward(top, bottom)
            bottom[0].diff[...] = top[0].diff * ((x >= f32(p.min)) & (x <= f32(p.max)))


@LAYERS.register('Exp', v1_name='EXP')
class ExpLayer(NeuronLayer):
    """y = base^(shift + scale * x) (base -1 means e)."""
    type = 'Exp'

    def layer_setup(self, bottom, top):
        p = self.layer_param.exp_param
        if p.base != -1 and p.base <= 0:
            raise self.error('base must be strictly positive, or -1 for e (got %g)' % p.base)
        log_base = 1.0 if p.base == -1 else np.log(p.base)
        self.inner_scale = f32(log_base * p.scale)
        self.outer_scale = f32(1.0 if p.shift == 0 else (np.exp(p.shift) if p.base == -1 else p.base ** p.shift))

    def forward(self, bottom, top):
        y = top[0].data
        y[...] = np.exp(bottom[0].data * self.inner_scale if self.inner_scale != 1 else bottom[0].data)
        if self.outer_scale != 1:
            y *= self.outer_scale

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            d = top[0].diff * top[0].data
            bottom[0].diff[...] = d * self.inner_scale if self.inner_scale != 1 else d


@LAYERS.register('Log')
class LogLayer(_SavedBottomNeuron):
    """y = log_base(shift + scale * x) (base -1 means e)."""
    type = 'Log'

    def layer_setup(self, bottom, top):
        p = self.layer_param.log_param
        if p.base != -1 and p.base <= 0:
            raise self.error('base must be strictly positive, or -1 for e (got %g)' % p.base)
        self.base_scale = f32(1.0 if p.base == -1 else 1.0 / np.log(p.base))
        self.scale, self.shift = f32(p.scale), f32(p.shift)

    def _inner(self, x):
        v = x * self.scale if self.scale != 1 else np.array(x, copy=True)
        if self.shift != 0:
            v += self.shift
        return v

    def forward(self, bottom, top):
        y = top[0].data
        y[...] = np.log(self._inner(self.saved_input(bottom, top)))
        if self.base_scale != 1:
            y *= self.base_scale

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            d = top[0].diff / self._inner(self.input_for_backward(top, bottom))
            factor = self.scale * self.base_scale
            bottom[0].diff[...] = d * factor if factor != 1 else d


@LAYERS.register('Power', v1_name='POWER')
class PowerLayer(_SavedBottomNeuron):
    """y = (shift + scale * x)^power, with Caffe's special cases in backward."""
    type = 'Power'

    def layer_setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power, self.scale, self.shift = f32(p.power), f32(p.scale), f32(p.shift)
        self.diff_scale = self.power * self.scale

    def forward(self, bottom, top):
        y = top[0].data
        if self.diff_scale == 0:
            y[...] = 1 if self.power == 0 else self.shift ** self.power
            return
        x = self.saved_input(bottom, top)
        v = x * self.scale if self.scale != 1 else np.array(x, copy=True)
        if self.shift != 0:
            v += self.shift
        y[...] = v ** self.power if self.power != 1 else v

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].diff
        if self.diff_scale == 0:
            dx[...] = 0
            return
        if self.power == 1:
            dx[...] = top[0].diff * self.diff_scale
            return
        x = self.input_for_backward(top, bottom)
        y = top[0].data
        if self.power == 2:
            g = x * (self.diff_scale * self.scale)
            if self.shift != 0:
                g += self.diff_scale * self.shift
        elif self.shift == 0:
            g = y / x * self.power
        else:
            v = x * self.scale if self.scale != 1 else np.array(x, copy=True)
            v += self.shift
            g = y / v
            if self.diff_scale != 1:
                g *= self.diff_scale
        dx[...] = top[0].diff * g


@LAYERS.register('Swish')
class SwishLayer(_SavedBottomNeuron):
    """y = x * sigmoid(beta * x)."""
    type = 'Swish'

    def forward(self, bottom, top):
        beta = f32(self.layer_param.swish_param.beta)
        x = self.saved_input(bottom, top)
        self._sig = f32(0.5) * np.tanh(f32(0.5) * beta * x) + f32(0.5)
        top[0].data[...] = x * self._sig

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            beta = f32(self.layer_param.swish_param.beta)
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * (beta * y + self._sig * (f32(1) - beta * y))


@LAYERS.register('Threshold', v1_name='THRESHOLD')
class ThresholdLayer(NeuronLayer):
    """y = 1 if x > threshold else 0 (strict). No backward, as in Caffe."""
    type = 'Threshold'

    def forward(self, bottom, top):
        t = f32(self.layer_param.threshold_param.threshold)
        top[0].data[...] = bottom[0].data > t

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error('Threshold has no backward (as in Caffe)')


@LAYERS.register('Dropout', v1_name='DROPOUT')
class DropoutLayer(NeuronLayer):
    """TRAIN: keep with probability 1 - ratio and scale by 1/(1 - ratio); TEST: identity.

    The mask comes from ``self.rng`` (set by the Net, or reseeded per iteration and virtual
    worker by the parallel trainer)."""
    type = 'Dropout'
    uses_rng = True

    def layer_setup(self, bottom, top):
        ratio = self.layer_param.dropout_param.dropout_ratio
        if not 0 <= ratio < 1:
            raise self.error('dropout_ratio must be in [0, 1), got %g' % ratio)
        self.ratio = f32(ratio)
        self.scale = f32(1.0 / (1.0 - ratio))

    def forward(self, bottom, top):
        if self.phase == caffe_pb2.TRAIN:
            self.mask = self.rng.random(bottom[0].shape, dtype=np.float32) >= self.ratio
            top[0].data[...] = bottom[0].data * self.mask * self.scale
        elif top[0] is not bottom[0]:
            top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.phase == caffe_pb2.TRAIN:
            bottom[0].diff[...] = top[0].diff * self.mask * self.scale
        elif top[0] is not bottom[0]:
            bottom[0].diff[...] = top[0].diff


@LAYERS.register('PReLU')
class PReLULayer(_SavedBottomNeuron):
    """Learned negative slope per channel (axis 1), or one shared slope (a 0-axis blob)."""
    type = 'PReLU'

    def layer_setup(self, bottom, top):
        p = self.layer_param.prelu_param
        if bottom[0].num_axes < 2:
            raise self.error('needs a bottom with at least 2 axes, got %s' % (list(bottom[0].shape),))
        self.channel_shared = p.channel_shared
        shape = () if p.channel_shared else (bottom[0].shape[1],)
        filler = p.filler if p.HasField('filler') else caffe_pb2.FillerParameter(type='constant', value=0.25)
        self.init_params([shape], [filler])

    def _slope(self, bottom):
        s = self.blobs[0].data
        if self.channel_shared:
            return s
        return s.reshape((1, -1) + (1,) * (bottom[0].num_axes - 2))

    def forward(self, bottom, top):
        x = self.saved_input(bottom, top)
        top[0].data[...] = np.where(x > 0, x, x * self._slope(bottom))

    def backward(self, top, propagate_down, bottom):
        x = self.input_for_backward(top, bottom)
        dy = top[0].diff
        neg = x <= 0
        if self.param_propagate_down[0]:
            g = dy * x * neg
            if self.channel_shared:
                self.blobs[0].diff[...] += g.sum(dtype=np.float64)
            else:
                axes = (0,) + tuple(range(2, g.ndim))
                self.blobs[0].diff[...] += g.sum(axis=axes, dtype=np.float64)
        if propagate_down[0]:
            bottom[0].diff[...] = np.where(neg, dy * self._slope(bottom), dy)
