"""Layer implementations; importing this package registers every layer type."""
from . import accuracy, convolution, inner_product, input, neuron, pooling, routing, softmax  # noqa: F401
from .base import Layer, LossLayer, NeuronLayer

__all__ = ['Layer', 'LossLayer', 'NeuronLayer']
