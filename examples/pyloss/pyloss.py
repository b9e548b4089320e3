"""A Euclidean loss written in Python, as Caffe's examples/pycaffe/layers/pyloss.py."""
import numpy as np

import pycaffe_ft as caffe


class EuclideanLossLayer(caffe.Layer):
    """Compute the Euclidean loss of two inputs, like Caffe's C++ EuclideanLossLayer."""

    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception('Need two inputs to compute distance.')

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise Exception('Inputs must have the same dimension.')
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = np.sum(self.diff ** 2) / bottom[0].num / 2.

    def backward(self, top, propagate_down, bottom):
        for i in range(2):
            if not propagate_down[i]:
                continue
            sign = 1 if i == 0 else -1
            bottom[i].diff[...] = sign * self.diff / bottom[i].num
