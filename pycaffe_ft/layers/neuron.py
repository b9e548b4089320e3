"""Elementwise neuron layers."""
import numpy as np

from ..registry import LAYERS
from .base import NeuronLayer

__all__ = ['ReLULayer']


@LAYERS.register('ReLU', v1_name='RELU')
class ReLULayer(NeuronLayer):
    """y = max(x, 0) + negative_slope * min(x, 0); backward uses the negative slope at x == 0."""
    type = 'ReLU'

    def forward(self, bottom, top):
        slope = self.layer_param.relu_param.negative_slope
        x = bottom[0].data
        if slope == 0:
            np.maximum(x, 0, out=top[0].data)
        else:
            top[0].data[...] = np.where(x > 0, x, x * np.float32(slope))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        slope = self.layer_param.relu_param.negative_slope
        x = bottom[0].data  # in place this is the top data: the sign test is the same
        dy = top[0].diff
        if slope == 0:
            np.multiply(dy, x > 0, out=bottom[0].diff)
        else:
            bottom[0].diff[...] = np.where(x > 0, dy, dy * np.float32(slope))
