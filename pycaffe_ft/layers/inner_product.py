"""InnerProduct (fully connected): axis, transpose, bias_term; BLAS GEMM."""
import numpy as np

from ..registry import LAYERS
from .base import Layer

__all__ = ['InnerProductLayer']


@LAYERS.register('InnerProduct', v1_name='INNER_PRODUCT')
class InnerProductLayer(Layer):
    type = 'InnerProduct'
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        self.num_output = p.num_output
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        self.axis = bottom[0].canonical_axis(p.axis)
        self.k = bottom[0].count_range(self.axis)
        wshape = (self.k, self.num_output) if self.transpose else (self.num_output, self.k)
        shapes, fillers = [wshape], [p.weight_filler]
        if self.bias_term:
            shapes.append((self.num_output,))
            fillers.append(p.bias_filler)
        self.init_params(shapes, fillers)

    def reshape(self, bottom, top):
        axis = bottom[0].canonical_axis(self.layer_param.inner_product_param.axis)
        k = bottom[0].count_range(axis)
        if k != self.k:
            raise self.error('input size incompatible with inner product parameters: bottom '
                             'shape %s gives %d inputs per item, the weights expect %d'
                             % (list(bottom[0].shape), k, self.k))
        self.m = bottom[0].count_range(0, axis)
        top[0].reshape(bottom[0].shape[:axis] + (self.num_output,))

    def forward(self, bottom, top):
        x = bottom[0].data.reshape(self.m, self.k)
        w = self.blobs[0].data
        y = top[0].data.reshape(self.m, self.num_output)
        np.matmul(x, w if self.transpose else w.T, out=y)
        if self.bias_term:
            y += self.blobs[1].data

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.m, self.num_output)
        x = bottom[0].data.reshape(self.m, self.k)
        if self.param_propagate_down[0]:
            if self.transpose:
                self.blobs[0].diff[...] += x.T @ dy
            else:
                self.blobs[0].diff[...] += dy.T @ x
        if self.bias_term and self.param_propagate_down[1]:
            self.blobs[1].diff[...] += dy.sum(axis=0)
        if propagate_down[0]:
            w = self.blobs[0].data
            np.matmul(dy, w.T if self.transpose else w, out=bottom[0].diff.reshape(self.m, self.k))
