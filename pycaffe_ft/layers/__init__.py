"""Layer implementations; importing this package registers every layer type."""
from . import (accuracy, arith, convolution, data_layer, data_sources, inner_product, input,  # noqa: F401
               loss, neuron, normalization, pooling, python_layer, recurrent, routing,
               softmax, vision)
from .base import Layer, LossLayer, NeuronLayer

__all__ = ['Layer', 'LossLayer', 'NeuronLayer']
