"""Softmax and SoftmaxWithLoss (ignore_label, normalization modes, legacy ``normalize``)."""
import numpy as np

from ..kernels import softmax as K
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer, LossLayer

__all__ = ['SoftmaxLayer', 'SoftmaxWithLossLayer', 'loss_normalizer', 'normalization_mode']

_N = caffe_pb2.LossParameter


def normalization_mode(loss_param):
    """Caffe's choice: ``normalization`` if given, else legacy ``normalize`` (VALID/BATCH_SIZE)."""
    if not loss_param.HasField('normalization') and loss_param.HasField('normalize'):
        return _N.VALID if loss_param.normalize else _N.BATCH_SIZE
    return loss_param.normalization


def loss_normalizer(mode, outer, inner, valid_count):
    """Caffe's LossLayer::GetNormalizer (always at least 1)."""
    if mode == _N.FULL:
        n = outer * inner
    elif mode == _N.VALID:
        n = outer * inner if valid_count == -1 else valid_count
    elif mode == _N.BATCH_SIZE:
        n = outer
    else:
        n = 1
    return max(1.0, float(n))


def _three_axes(blob, axis):
    a = blob.canonical_axis(axis)
    return blob.count_range(0, a), blob.shape[a], blob.count_range(a + 1)


@LAYERS.register('Softmax', v1_name='SOFTMAX')
class SoftmaxLayer(Layer):
    type = 'Softmax'
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        self.dims = _three_axes(bottom[0], self.layer_param.softmax_param.axis)
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        K.softmax_forward(bottom[0].data.reshape(self.dims), top[0].data.reshape(self.dims))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            K.softmax_backward(top[0].data.reshape(self.dims), top[0].diff.reshape(self.dims),
                               bottom[0].diff.reshape(self.dims))


@LAYERS.register('SoftmaxWithLoss', v1_name='SOFTMAX_LOSS')
class SoftmaxWithLossLayer(LossLayer):
    """Softmax over ``softmax_param.axis`` then the multinomial logistic loss of the labels."""
    type = 'SoftmaxWithLoss'
    exact_num_top = None
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.has_ignore = lp.HasField('ignore_label')
        self.ignore_label = lp.ignore_label
        self.mode = normalization_mode(lp)
        self.prob = np.zeros(0, np.float32)

    def reshape(self, bottom, top):
        self.dims = _three_axes(bottom[0], self.layer_param.softmax_param.axis)
        outer, _, inner = self.dims
        if outer * inner != bottom[1].count:
            raise self.error('number of labels must match number of predictions; e.g., if '
                             'softmax axis == 1 and prediction shape is (N, C, H, W), label count '
                             '(number of labels) must be N*H*W, with integer values in {0, 1, ..., '
                             'C-1}. Prediction shape %s, label shape %s'
                             % (list(bottom[0].shape), list(bottom[1].shape)))
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape(bottom[0].shape)
        if self.prob.size != bottom[0].count:
            self.prob = np.zeros(bottom[0].count, np.float32)

    def _labels(self, bottom):
        outer, _, inner = self.dims
        return bottom[1].data.reshape(outer, inner)

    def forward(self, bottom, top):
        prob = self.prob.reshape(self.dims)
        K.softmax_forward(bottom[0].data.reshape(self.dims), prob)
        loss, count, bad = K.softmax_loss_forward(prob, self._labels(bottom), self.has_ignore,
                                                  self.ignore_label)
        if bad >= 0:
            raise self.error('label %r at position %d is outside [0, %d)' % (
                float(bottom[1].data.ravel()[bad]), bad, self.dims[1]))
        self.valid_count = count
        outer, _, inner = self.dims
        top[0].data[...] = loss / loss_normalizer(self.mode, outer, inner, count)
        if len(top) > 1:
            top[1].data[...] = prob.reshape(top[1].shape)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the label input')
        if not propagate_down[0]:
            return
        outer, _, inner = self.dims
        scale = float(top[0].diff) / loss_normalizer(self.mode, outer, inner, self.valid_count)
        K.softmax_loss_backward(self.prob.reshape(self.dims), self._labels(bottom), self.has_ignore,
                                self.ignore_label, scale, bottom[0].diff.reshape(self.dims))
