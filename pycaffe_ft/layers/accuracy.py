"""Accuracy: top_k, ignore_label, axis, optional per-class accuracy top. Forward only."""
import numpy as np

from ..kernels.softmax import accuracy
from ..registry import LAYERS
from .base import Layer

__all__ = ['AccuracyLayer']


@LAYERS.register('Accuracy', v1_name='ACCURACY')
class AccuracyLayer(Layer):
    type = 'Accuracy'
    exact_num_bottom = 2
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        p = self.layer_param.accuracy_param
        self.top_k = p.top_k
        self.has_ignore = p.HasField('ignore_label')
        self.ignore_label = p.ignore_label

    def reshape(self, bottom, top):
        p = self.layer_param.accuracy_param
        if self.top_k > bottom[0].count // max(bottom[1].count, 1):
            raise self.error('top_k (%d) must be less than or equal to the number of classes'
                             % self.top_k)
        axis = bottom[0].canonical_axis(p.axis)
        self.dims = (bottom[0].count_range(0, axis), bottom[0].shape[axis],
                     bottom[0].count_range(axis + 1))
        if self.dims[0] * self.dims[2] != bottom[1].count:
            raise self.error('number of labels must match number of predictions (prediction '
                             'shape %s, label shape %s)' % (list(bottom[0].shape), list(bottom[1].shape)))
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((self.dims[1],))

    def forward(self, bottom, top):
        outer, channels, inner = self.dims
        hits_per_class = np.zeros(channels, np.int64)
        count_per_class = np.zeros(channels, np.int64)
        hits, counted, bad = accuracy(bottom[0].data.reshape(self.dims),
                                      bottom[1].data.reshape(outer, inner), self.top_k,
                                      self.has_ignore, self.ignore_label, hits_per_class,
                                      count_per_class)
        if bad >= 0:
            raise self.error('label %r at position %d is outside [0, %d)'
                             % (float(bottom[1].data.ravel()[bad]), bad, channels))
        top[0].data[...] = hits / counted if counted else 0.0
        if len(top) > 1:
            with np.errstate(invalid='ignore', divide='ignore'):
                top[1].data[...] = np.where(count_per_class == 0, 0.0,
                                            hits_per_class / np.maximum(count_per_class, 1))

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error('Accuracy has no backward (as in Caffe)')
