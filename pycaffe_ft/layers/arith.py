"""Eltwise (PROD, SUM with coeff, MAX), Reduction (SUM, ASUM, SUMSQ, MEAN) and ArgMax."""
import numpy as np

from ..intra_op import for_images, planes
from ..kernels.eltwise import weighted_sum
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer

__all__ = ['EltwiseLayer', 'ReductionLayer', 'ArgMaxLayer']

_E = caffe_pb2.EltwiseParameter
_R = caffe_pb2.ReductionParameter


@LAYERS.register('Eltwise', v1_name='ELTWISE')
class EltwiseLayer(Layer):
    """MAX: a > b ? a : b for the first two, later bottoms must be strictly greater to win."""
    type = 'Eltwise'
    min_num_bottom = 2
    exact_num_top = 1
    fuses_relu = True  # every operation applies the in-place ReLU after it (see Layer)

    @property
    def selects_by_value(self):
        return self.op == _E.MAX

    def layer_setup(self, bottom, top):
        p = self.layer_param.eltwise_param
        self.op = p.operation
        coeffs = list(p.coeff)
        if coeffs and self.op != _E.SUM:
            raise self.error('coeff is only for the SUM operation')
        if coeffs and len(coeffs) != len(bottom):
            raise self.error('give one coeff per bottom (%d bottoms, %d coeffs)' % (len(bottom), len(coeffs)))
        self.coeffs = [np.float32(c) for c in coeffs] or [np.float32(1)] * len(bottom)
        self.stable_prod_grad = p.stable_prod_grad

    def reshape(self, bottom, top):
        for b in bottom[1:]:
            if b.shape != bottom[0].shape:
                raise self.error('all bottoms must have the same shape: %s vs %s'
                                 % (list(bottom[0].shape), list(b.shape)))
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        y = top[0].data
        if self.op == _E.PROD:
            np.multiply(bottom[0].data, bottom[1].data, out=y)
            for b in bottom[2:]:
                y *= b.data
        elif self.op == _E.SUM and len(bottom) == 2:
            a, b = (planes(blob.data) for blob in bottom)
            out, (ca, cb) = planes(y), self.coeffs
            for_images(lambda lo, hi: weighted_sum(a[lo:hi].reshape(-1), b[lo:hi].reshape(-1), ca, cb,
                                                   out[lo:hi].reshape(-1), self.relu_on_top),
                       out.shape[0], out.shape[1])
            return
        elif self.op == _E.SUM:
            acc = bottom[0].data * self.coeffs[0]
            for b, c in zip(bottom[1:], self.coeffs[1:]):
                acc += b.data * c if c != 1 else b.data
            y[...] = acc
        else:
            a, b = bottom[0].data, bottom[1].data
            first = a > b
            self.mask = np.where(first, 0, 1).astype(np.int32)
            y[...] = np.where(first, a, b)
            for i, blob in enumerate(bottom[2:], 2):
                win = blob.data > y
                y[...] = np.where(win, blob.data, y)
                self.mask[win] = i
        self.relu_on_top_of(y)

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff
        for i, (b, down) in enumerate(zip(bottom, propagate_down)):
            if not down:
                continue
            if self.op == _E.PROD:
                if self.stable_prod_grad:
                    g = np.array(dy, copy=True)
                    for j, other in enumerate(bottom):
                        if j != i:
                            g *= other.data
                    b.diff[...] = g
                else:
                    b.diff[...] = dy * top[0].data / b.data
            elif self.op == _E.SUM:
                b.diff[...] = dy * self.coeffs[i] if self.coeffs[i] != 1 else dy
            else:
                b.diff[...] = dy * (self.mask == i)


@LAYERS.register('Reduction')
class ReductionLayer(Layer):
    """Reduce all axes from ``axis`` on: SUM, ASUM, SUMSQ or MEAN, times ``coeff``."""
    type = 'Reduction'
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.reduction_param
        self.axis = bottom[0].canonical_axis(p.axis) if bottom[0].num_axes else 0
        top[0].reshape(bottom[0].shape[:self.axis])
        self.num = bottom[0].count_range(0, self.axis)
        self.dim = bottom[0].count_range(self.axis)

    def forward(self, bottom, top):
        p = self.layer_param.reduction_param
        x = bottom[0].data.reshape(self.num, self.dim).astype(np.float64)
        if p.operation == _R.SUM:
            r = x.sum(axis=1)
        elif p.operation == _R.ASUM:
            r = np.abs(x).sum(axis=1)
        elif p.operation == _R.SUMSQ:
            r = (x * x).sum(axis=1)
        else:
            r = x.mean(axis=1) if self.dim else np.zeros(self.num)
        top[0].data[...] = (r * p.coeff).reshape(top[0].shape)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        p = self.layer_param.reduction_param
        g = top[0].diff.reshape(self.num, 1) * np.float32(p.coeff)
        x = bottom[0].data.reshape(self.num, self.dim)
        dx = bottom[0].diff.reshape(self.num, self.dim)
        if p.operation == _R.SUM:
            dx[...] = g
        elif p.operation == _R.ASUM:
            dx[...] = g * np.sign(x)
        elif p.operation == _R.SUMSQ:
            dx[...] = g * 2 * x
        else:
            dx[...] = g / np.float32(self.dim)


@LAYERS.register('ArgMax', v1_name='ARGMAX')
class ArgMaxLayer(Layer):
    """Indices (or values with out_max_val) of the top_k largest; equal values: larger index first."""
    type = 'ArgMax'
    exact_num_bottom = 1
    exact_num_top = 1
    selects_by_value = True

    def reshape(self, bottom, top):
        p = self.layer_param.argmax_param
        self.top_k = p.top_k
        if self.top_k < 1:
            raise self.error('top_k must be at least 1')
        self.has_axis = p.HasField('axis')
        shape = list(bottom[0].shape)
        if self.has_axis:
            self.axis = bottom[0].canonical_axis(p.axis)
            if self.top_k > shape[self.axis]:
                raise self.error('top_k (%d) exceeds the size of axis %d (%d)' % (self.top_k, self.axis, shape[self.axis]))
            shape[self.axis] = self.top_k
        else:
            dim = bottom[0].count_range(1)
            if self.top_k > dim:
                raise self.error('top_k (%d) exceeds the number of values per item (%d)' % (self.top_k, dim))
            shape = [shape[0], 2 if p.out_max_val else 1, self.top_k] + [1] * max(0, bottom[0].num_axes - 3)
            shape = shape[:max(3, bottom[0].num_axes)]
        top[0].reshape(shape)

    def forward(self, bottom, top):
        p = self.layer_param.argmax_param
        x = bottom[0].data
        if self.has_axis:
            moved = np.moveaxis(x, self.axis, -1)
            flat = moved.reshape(-1, moved.shape[-1])
        else:
            flat = x.reshape(x.shape[0], -1)
        n = flat.shape[1]
        # sort by (value, index) descending: lexsort ascending on (-index?) -> use keys
        order = np.lexsort((-np.arange(n)[None, :].repeat(flat.shape[0], 0), -flat.astype(np.float64)), axis=1)
        idx = order[:, :self.top_k]
        vals = np.take_along_axis(flat, idx, axis=1)
        if self.has_axis:
            out = vals if p.out_max_val else idx.astype(np.float32)
            out_shape = moved.shape[:-1] + (self.top_k,)
            top[0].data[...] = np.moveaxis(out.reshape(out_shape), -1, self.axis)
        elif p.out_max_val:
            top[0].data.reshape(x.shape[0], 2, self.top_k)[...] = np.stack([idx, vals], axis=1)
        else:
            top[0].data.reshape(x.shape[0], self.top_k)[...] = idx

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error('ArgMax has no backward (as in Caffe)')
