"""Layer implementations; importing this package registers every layer type."""
from . import (accuracy, arith, convolution, inner_product, input, neuron, normalization,  # noqa: F401
               pooling, routing, softmax, vision)
from .base import Layer, LossLayer, NeuronLayer

__all__ = ['Layer', 'LossLayer', 'NeuronLayer']
