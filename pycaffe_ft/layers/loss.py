"""Loss layers: EuclideanLoss, SigmoidCrossEntropyLoss, HingeLoss, InfogainLoss,
MultinomialLogisticLoss, ContrastiveLoss. (SoftmaxWithLoss lives in softmax.py.)

A loss top's diff holds its loss weight (set once at setup); every bottom gradient is scaled
by it, as in Caffe.
"""
import os

import numpy as np

from ..kernels import softmax as KS
from ..proto import caffe_pb2
from ..proto.io import read_blob_file
from ..registry import LAYERS
from .base import LossLayer
from .softmax import loss_normalizer, normalization_mode

__all__ = ['EuclideanLossLayer', 'SigmoidCrossEntropyLossLayer', 'HingeLossLayer',
           'InfogainLossLayer', 'MultinomialLogisticLossLayer', 'ContrastiveLossLayer']

_N = caffe_pb2.LossParameter


def _weight(top):
    return float(top[0].diff.reshape(-1)[0])


@LAYERS.register('EuclideanLoss', v1_name='EUCLIDEAN_LOSS')
class EuclideanLossLayer(LossLayer):
    """loss = sum((a - b)^2) / (2N); both bottoms get a gradient."""
    type = 'EuclideanLoss'

    def allow_force_backward(self, bottom_index):
        return True

    def reshape(self, bottom, top):
        if bottom[0].count_range(1) != bottom[1].count_range(1) or bottom[0].shape[0] != bottom[1].shape[0]:
            raise self.error('inputs must have the same dimension: %s vs %s'
                             % (list(bottom[0].shape), list(bottom[1].shape)))
        top[0].reshape(())

    def forward(self, bottom, top):
        self.diff = bottom[0].data - bottom[1].data.reshape(bottom[0].shape)
        n = bottom[0].shape[0]
        top[0].data[...] = np.dot(self.diff.ravel().astype(np.float64), self.diff.ravel()) / n / 2

    def backward(self, top, propagate_down, bottom):
        n = bottom[0].shape[0]
        for i, (b, down) in enumerate(zip(bottom, propagate_down)):
            if down:
                sign = 1.0 if i == 0 else -1.0
                b.diff[...] = (np.float32(sign * _weight(top) / n) * self.diff).reshape(b.shape)


@LAYERS.register('SigmoidCrossEntropyLoss', v1_name='SIGMOID_CROSS_ENTROPY_LOSS')
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Stable sigmoid cross-entropy; normalisation defaults to BATCH_SIZE; ignore_label compares
    int(target)."""
    type = 'SigmoidCrossEntropyLoss'

    def layer_setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.has_ignore = lp.HasField('ignore_label')
        self.ignore_label = lp.ignore_label
        if lp.HasField('normalization'):
            self.mode = lp.normalization
        elif lp.HasField('normalize'):
            self.mode = _N.VALID if lp.normalize else _N.BATCH_SIZE
        else:
            self.mode = _N.BATCH_SIZE

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise self.error('inputs must have the same count: %s vs %s'
                             % (list(bottom[0].shape), list(bottom[1].shape)))
        top[0].reshape(())
        self.outer = bottom[0].shape[0] if bottom[0].num_axes else 1
        self.inner = bottom[0].count // max(self.outer, 1)

    def _valid(self, bottom):
        t = bottom[1].data.reshape(-1)
        if not self.has_ignore:
            return None
        return t.astype(np.int64) != self.ignore_label

    def forward(self, bottom, top):
        x = bottom[0].data.reshape(-1).astype(np.float64)
        t = bottom[1].data.reshape(-1).astype(np.float64)
        pos = (x >= 0).astype(np.float64)
        losses = -(x * (t - pos) - np.log1p(np.exp(x - 2 * x * pos)))
        valid = self._valid(bottom)
        if valid is not None:
            losses = losses * valid
            count = int(valid.sum())
        else:
            count = x.size
        self.normalizer = loss_normalizer(self.mode, self.outer, self.inner, count if valid is not None else -1)
        top[0].data[...] = losses.sum() / self.normalizer

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the label input')
        if not propagate_down[0]:
            return
        x = bottom[0].data
        sig = np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5)
        g = (sig - bottom[1].data.reshape(x.shape)) * np.float32(_weight(top) / self.normalizer)
        valid = self._valid(bottom)
        if valid is not None:
            g *= valid.reshape(x.shape)
        bottom[0].diff[...] = g


@LAYERS.register('HingeLoss', v1_name='HINGE_LOSS')
class HingeLossLayer(LossLayer):
    """One-vs-all hinge loss; the margins live in bottom 0's diff between forward and backward
    (as in Caffe)."""
    type = 'HingeLoss'

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape[0]
        self.dim = bottom[0].count // self.num

    def _labels(self, bottom):
        lab = bottom[1].data.reshape(-1).astype(np.int64)
        if lab.size != self.num or lab.min() < 0 or lab.max() >= self.dim:
            raise self.error('labels must be %d integers in [0, %d)' % (self.num, self.dim))
        return lab

    def forward(self, bottom, top):
        d = bottom[0].diff.reshape(self.num, self.dim)
        d[...] = bottom[0].data.reshape(self.num, self.dim)
        rows = np.arange(self.num)
        lab = self._labels(bottom)
        d[rows, lab] *= -1
        np.maximum(0, 1 + d, out=d)
        if self.layer_param.hinge_loss_param.norm == caffe_pb2.HingeLossParameter.L1:
            loss = np.abs(d).sum(dtype=np.float64)
        else:
            loss = (d.astype(np.float64) ** 2).sum()
        top[0].data[...] = loss / self.num

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the label input')
        if not propagate_down[0]:
            return
        d = bottom[0].diff.reshape(self.num, self.dim)
        d[np.arange(self.num), self._labels(bottom)] *= -1
        scale = np.float32(_weight(top) / self.num)
        if self.layer_param.hinge_loss_param.norm == caffe_pb2.HingeLossParameter.L1:
            d[...] = np.sign(d) * scale
        else:
            d[...] = d * 2 * scale


@LAYERS.register('InfogainLoss', v1_name='INFOGAIN_LOSS')
class InfogainLossLayer(LossLayer):
    """Softmax over ``infogain_loss_param.axis`` then loss = -sum_k H[label, k] log p_k / norm.
    H comes from ``source`` (a binaryproto) or a third bottom; a second top gives the
    probabilities."""
    type = 'InfogainLoss'
    exact_num_bottom = None
    min_num_bottom = 2
    max_num_bottom = 3
    exact_num_top = None
    min_num_top = 1
    max_num_top = 2

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def layer_setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.has_ignore = lp.HasField('ignore_label')
        self.ignore_label = lp.ignore_label
        self.mode = normalization_mode(lp)
        if len(bottom) < 3:
            source = self.layer_param.infogain_loss_param.source
            if not source:
                raise self.error('needs the infogain matrix H: infogain_loss_param.source or a third bottom')
            if not os.path.exists(source):
                raise self.error('infogain matrix file "%s" not found (relative paths are relative to '
                                 'the working directory %s)' % (source, os.getcwd()))
            self.H = read_blob_file(source).astype(np.float32)

    def set_loss_weights(self, top):
        # Caffe: loss_weight 1 on the loss top only, none on the probability top.
        if not len(self.layer_param.loss_weight) and len(top) == 2:
            self.layer_param.loss_weight.extend([1.0, 0.0])
        super().set_loss_weights(top)

    def reshape(self, bottom, top):
        axis = bottom[0].canonical_axis(self.layer_param.infogain_loss_param.axis)
        self.dims = (bottom[0].count_range(0, axis), bottom[0].shape[axis], bottom[0].count_range(axis + 1))
        outer, channels, inner = self.dims
        if outer * inner != bottom[1].count:
            raise self.error('number of labels (%d) must match number of predictions (%d)'
                             % (bottom[1].count, outer * inner))
        H = bottom[2].data if len(bottom) > 2 else self.H
        if H.size != channels * channels:
            raise self.error('H must be %dx%d, has %d values' % (channels, channels, H.size))
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape(bottom[0].shape)

    def _H(self, bottom):
        outer, channels, inner = self.dims
        return (bottom[2].data if len(bottom) > 2 else self.H).reshape(channels, channels)

    def _labels(self, bottom):
        outer, channels, inner = self.dims
        lab = bottom[1].data.reshape(outer, inner).astype(np.int64)
        valid = lab != self.ignore_label if self.has_ignore else np.ones_like(lab, bool)
        if np.any(valid & ((lab < 0) | (lab >= channels))):
            raise self.error('labels must be in [0, %d)' % channels)
        return lab, valid

    def forward(self, bottom, top):
        outer, channels, inner = self.dims
        self.prob = np.empty((outer, channels, inner), np.float32)
        KS.softmax_forward(bottom[0].data.reshape(self.dims), self.prob)
        lab, valid = self._labels(bottom)
        H = self._H(bottom).astype(np.float64)
        logp = np.log(np.maximum(self.prob, KS.FLT_MIN)).astype(np.float64)  # (o, c, i)
        rows = H[np.where(valid, lab, 0)]  # (o, i, c)
        loss = -(rows * np.moveaxis(logp, 1, 2) * valid[..., None]).sum()
        self.count = int(valid.sum())
        self.normalizer = loss_normalizer(self.mode, outer, inner, self.count)
        top[0].data[...] = loss / self.normalizer
        if len(top) > 1:
            top[1].data[...] = self.prob.reshape(top[1].shape)

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down[1:]):
            raise self.error('cannot backpropagate to the labels or to H')
        if not propagate_down[0]:
            return
        lab, valid = self._labels(bottom)
        H = self._H(bottom).astype(np.float64)
        rows = np.moveaxis(H[np.where(valid, lab, 0)], 2, 1)  # (o, c, i)
        g = self.prob * rows.sum(axis=1, keepdims=True) - rows
        g *= valid[:, None, :] * (_weight(top) / self.normalizer)
        bottom[0].diff.reshape(self.dims)[...] = g


@LAYERS.register('MultinomialLogisticLoss', v1_name='MULTINOMIAL_LOGISTIC_LOSS')
class MultinomialLogisticLossLayer(LossLayer):
    """loss = -sum log(max(p[label], 1e-20)) / N for probabilities p."""
    type = 'MultinomialLogisticLoss'
    threshold = np.float32(1e-20)

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        self.num = bottom[0].shape[0]
        self.dim = bottom[0].count // self.num
        if bottom[1].count != self.num:
            raise self.error('one label per item expected, label shape %s' % (list(bottom[1].shape),))

    def _picked(self, bottom):
        lab = bottom[1].data.reshape(-1).astype(np.int64)
        if lab.min() < 0 or lab.max() >= self.dim:
            raise self.error('labels must be in [0, %d)' % self.dim)
        return lab, np.maximum(bottom[0].data.reshape(self.num, self.dim)[np.arange(self.num), lab], self.threshold)

    def forward(self, bottom, top):
        _, p = self._picked(bottom)
        top[0].data[...] = -np.log(p.astype(np.float64)).sum() / self.num

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the label input')
        if not propagate_down[0]:
            return
        lab, p = self._picked(bottom)
        d = bottom[0].diff.reshape(self.num, self.dim)
        d[...] = 0
        d[np.arange(self.num), lab] = np.float32(-_weight(top) / self.num) / p


@LAYERS.register('ContrastiveLoss', v1_name='CONTRASTIVE_LOSS')
class ContrastiveLossLayer(LossLayer):
    """loss = sum(sim ? d^2 : max(margin - d, 0)^2) / 2N (legacy: max(margin - d^2, 0))."""
    type = 'ContrastiveLoss'
    exact_num_bottom = 3

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def reshape(self, bottom, top):
        if bottom[0].shape != bottom[1].shape or bottom[0].count_range(1) != bottom[0].count // bottom[0].shape[0]:
            raise self.error('the two feature bottoms must have the same shape: %s vs %s'
                             % (list(bottom[0].shape), list(bottom[1].shape)))
        if bottom[2].count != bottom[0].shape[0]:
            raise self.error('the similarity bottom needs one value per pair, shape %s' % (list(bottom[2].shape),))
        top[0].reshape(())

    def forward(self, bottom, top):
        p = self.layer_param.contrastive_loss_param
        n = bottom[0].shape[0]
        self.diff = (bottom[0].data - bottom[1].data).reshape(n, -1)
        self.dist_sq = (self.diff.astype(np.float64) ** 2).sum(axis=1)
        self.sim = bottom[2].data.reshape(-1).astype(np.int64) != 0
        if p.legacy_version:
            dissimilar = np.maximum(p.margin - self.dist_sq, 0)
        else:
            dissimilar = np.maximum(p.margin - np.sqrt(self.dist_sq), 0) ** 2
        top[0].data[...] = np.where(self.sim, self.dist_sq, dissimilar).sum() / n / 2

    def backward(self, top, propagate_down, bottom):
        p = self.layer_param.contrastive_loss_param
        n = bottom[0].shape[0]
        for i, (b, down) in enumerate(zip(bottom[:2], propagate_down[:2])):
            if not down:
                continue
            alpha = (1.0 if i == 0 else -1.0) * _weight(top) / n
            if p.legacy_version:
                mdist = p.margin - self.dist_sq
                beta = np.where(mdist > 0, -alpha, 0.0)
            else:
                dist = np.sqrt(self.dist_sq)
                mdist = p.margin - dist
                beta = np.where(mdist > 0, -alpha * mdist / (dist + 1e-4), 0.0)
            coeff = np.where(self.sim, alpha, beta)
            b.diff.reshape(n, -1)[...] = coeff[:, None] * self.diff
