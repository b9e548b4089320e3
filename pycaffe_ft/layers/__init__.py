"""Layer implementations; importing this package registers every layer type."""
from . import (accuracy, arith, convolution, data_layer, data_sources, image_data,  # noqa: F401
               inner_product, input, loss, neuron, normalization, pooling, python_layer,
               recurrent, routing, softmax, vision)
from .base import Layer, LossLayer, NeuronLayer

__all__ = ['Layer', 'LossLayer', 'NeuronLayer']
