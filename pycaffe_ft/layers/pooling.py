"""Pooling: MAX (optional mask top), AVE, STOCHASTIC, global; Caffe's ceil rounding with the
last window clipped, or round_mode FLOOR."""
import math

import numpy as np

from ..aligned import aligned_empty
from ..intra_op import image_ranges, run_chunks
from ..kernels import pooling as K
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer
from .geometry import spatial_param

__all__ = ['PoolingLayer']

_P = caffe_pb2.PoolingParameter

SERIAL_BELOW = 1 << 19
"""Inputs of fewer values pool in one call, on one thread: split over two threads, LeNet's
pool2 (205K values) took 0.21 ms against 0.15 each way, CIFAR10-quick's pool3 (410K) 0.38
against 0.34 ms forward and backward; its pool2 (819K) gains a little from the split."""


@LAYERS.register('Pooling', v1_name='POOLING')
class PoolingLayer(Layer):
    type = 'Pooling'
    exact_num_bottom = 1
    min_num_top = 1
    max_num_top = 2

    @property
    def uses_rng(self):
        """Only STOCHASTIC pooling draws (reseeding MAX and AVE layers every iteration cost
        ~0.07 ms each)."""
        return self.layer_param.pooling_param.pool == _P.STOCHASTIC

    @property
    def selects_by_value(self):
        return self.method in (_P.MAX, _P.STOCHASTIC)

    def layer_setup(self, bottom, top):
        p = self.layer_param.pooling_param
        self.method = p.pool
        if len(top) == 2 and self.method != _P.MAX:
            raise self.error('only MAX pooling has a second (mask) top')
        self.global_pooling = p.global_pooling
        if self.global_pooling:
            if p.HasField('kernel_size') or p.HasField('kernel_h') or p.HasField('kernel_w'):
                raise self.error('with global_pooling: true the filter size cannot be specified')
        else:
            self.kernel = spatial_param(self, p, 'kernel_size', None)
        self.pad = spatial_param(self, p, 'pad', 0, allow_zero=True)
        self.stride = spatial_param(self, p, 'stride', 1)
        if self.global_pooling and (self.pad != (0, 0) or self.stride != (1, 1)):
            raise self.error('with global_pooling: true only pad = 0 and stride = 1 are allowed')
        if self.method == _P.STOCHASTIC and self.pad != (0, 0):
            raise self.error('padding is implemented only for AVE and MAX pooling')
        if not self.global_pooling and (self.pad[0] >= self.kernel[0] or self.pad[1] >= self.kernel[1]):
            raise self.error('pad %s must be smaller than the kernel %s' % (list(self.pad), list(self.kernel)))
        self.ceil = p.round_mode == _P.CEIL
        self._bound = {}  # 'forward' / 'backward' -> (the arrays, the chunks' calls): see _run
        self._reshaped = None  # the bottom's and tops' shapes after the last reshape

    def reshape(self, bottom, top):
        if self._reshaped == (bottom[0].shape,) + tuple(t.shape for t in top):
            return  # all below depends on the bottom's shape alone (the net reshapes every pass)
        self._bound.clear()  # the calls hold the old arrays: let them go
        if bottom[0].num_axes != 4:
            raise self.error('input must have 4 axes (N, C, H, W), got shape %s' % (list(bottom[0].shape),))
        n, c, h, w = bottom[0].shape
        if self.global_pooling:
            self.kernel = (h, w)
        out = []
        for size, k, s, p in zip((h, w), self.kernel, self.stride, self.pad):
            if self.ceil:
                o = int(math.ceil((size + 2 * p - k) / float(s))) + 1
            else:
                o = (size + 2 * p - k) // s + 1
            if p and (o - 1) * s >= size + p:
                o -= 1  # the last window would start inside the padding
            if o <= 0:
                raise self.error('kernel %s does not fit input %s' % (list(self.kernel), [h, w]))
            out.append(o)
        self.out_hw = tuple(out)
        top[0].reshape((n, c) + self.out_hw)
        if len(top) > 1:
            top[1].reshape((n, c) + self.out_hw)
        if self.method in (_P.MAX, _P.STOCHASTIC) and len(top) == 1 and \
                getattr(self, '_mask', np.empty(0)).shape != (n, c) + self.out_hw:
            self._mask = aligned_empty(n * c * self.out_hw[0] * self.out_hw[1]).reshape((n, c) + self.out_hw)
        geometry = (h, w) + self._args() + self.out_hw
        if self.method in (_P.MAX, _P.AVE) and getattr(self, '_taps_of', None) != geometry:
            self._taps, self._taps_of = K.window_taps(*geometry), geometry
        self._reshaped = (bottom[0].shape,) + tuple(t.shape for t in top)

    def _args(self):
        return (self.kernel[0], self.kernel[1], self.pad[0], self.pad[1], self.stride[0], self.stride[1])

    def forward(self, bottom, top):
        if self.method == _P.STOCHASTIC:
            k, s = self.kernel, self.stride
            if self.phase == caffe_pb2.TRAIN:
                u = self.rng.random(top[0].shape, dtype=np.float32)
                K.stochastic_pool_train(bottom[0].data, k[0], k[1], s[0], s[1], self.out_hw[0],
                                        self.out_hw[1], u, top[0].data, self._mask)
            else:
                K.stochastic_pool_test(bottom[0].data, k[0], k[1], s[0], s[1], self.out_hw[0],
                                       self.out_hw[1], top[0].data)
            return
        x, y = bottom[0].data, top[0].data
        mask = y if self.method == _P.AVE else top[1].data if len(top) > 1 else self._mask
        if self.method == _P.AVE:
            def arguments(lo, hi):
                return self._geometry(x, lo, hi) + (y[lo:hi].reshape(-1), self.relu_on_top)
            pool, bind = K.ave_pool_forward, K.ave_pool_forward_calls
        else:
            def arguments(lo, hi):
                return self._geometry(x, lo, hi) + (y[lo:hi].reshape(-1), mask[lo:hi].reshape(-1), self.relu_on_top)
            pool, bind = K.max_pool_forward, K.max_pool_forward_calls
        self._run('forward', (x, y, mask, self.relu_on_top), x.shape[0], x[0].size, pool, bind, arguments)

    fuses_relu_backward = True  # every method overwrites the bottom diff (see Layer)

    @property
    def fuses_relu(self):
        """MAX and AVE pooling apply a following in-place ReLU as the small-plane kernels store
        their outputs, else to each range of images while its outputs are in cache (see
        Layer.fuses_relu); the argmax mask is unchanged."""
        return self.method in (_P.MAX, _P.AVE)

    def _geometry(self, x, lo, hi):
        """Forward kernel arguments for images [lo, hi) of x (N, C, H, W): the flat input,
        planes, plane height and width, window geometry, output size and the window table."""
        return ((x[lo:hi].reshape(-1), (hi - lo) * x.shape[1], x.shape[2], x.shape[3]) + self._args() + self.out_hw
                + (self._taps,))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.method == _P.STOCHASTIC and self.phase != caffe_pb2.TRAIN:
            raise self.error('STOCHASTIC pooling has no backward in TEST phase (as in Caffe)')
        dy, dx = top[0].diff, bottom[0].diff
        x = bottom[0].data if self.relu_below == 0 else None  # the ReLU below: masked as dx is stored

        def relu_input(lo, hi):
            return None if x is None else x[lo:hi].reshape(-1)
        if self.method in (_P.MAX, _P.STOCHASTIC):
            mask = top[1].data if len(top) > 1 else self._mask

            def arguments(lo, hi):
                return (dy[lo:hi].reshape(-1), mask[lo:hi].reshape(-1), (hi - lo) * dx.shape[1], *dx.shape[2:],
                        *self._args(), *self.out_hw, dx[lo:hi].reshape(-1), relu_input(lo, hi))
            pool, bind = K.max_pool_backward, K.max_pool_backward_calls
        else:
            mask = None

            def arguments(lo, hi):
                return (dy[lo:hi].reshape(-1), (hi - lo) * dx.shape[1], self._taps, dx[lo:hi].reshape(-1),
                        relu_input(lo, hi))
            pool, bind = K.ave_pool_backward, K.ave_pool_backward_calls
        self._run('backward', (dy, mask, dx, x), dx.shape[0], dx[0].size, pool, bind, arguments)

    def _run(self, which, arrays, num, per_image, pool, bind, arguments):
        """``pool(*arguments(lo, hi))`` over the image ranges of :func:`~..intra_op.image_ranges`
        on the threads, by the calls ``bind`` (pool's ``*_calls`` counterpart in
        :mod:`..kernels.pooling`) bound to these ``arrays`` (and flags) on a first pass and kept
        while the same objects come again (a reshaped blob has new arrays); while a kernel
        compiles in the background (bind gives None), by ``pool`` with the arguments built anew."""
        kept = self._bound.get(which)
        if kept is not None and len(kept[0]) == len(arrays) and all(a is b for a, b in zip(kept[0], arrays)):
            run_chunks(_run_calls, kept[1])
            return
        self._bound.pop(which, None)
        ranges = image_ranges(num, per_image, SERIAL_BELOW)
        chunks = [bind(*arguments(lo, hi)) for lo, hi in ranges]
        if any(calls is None for calls in chunks):
            run_chunks(lambda lo, hi: pool(*arguments(lo, hi)), ranges)
            return
        self._bound[which] = (arrays, [(calls,) for calls in chunks])
        run_chunks(_run_calls, self._bound[which][1])


def _run_calls(calls):
    """Each ``(function, arguments)`` of ``calls``, in order."""
    for function, args in calls:
        function(*args)
