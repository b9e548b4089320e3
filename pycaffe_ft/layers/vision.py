"""LRN (ACROSS_CHANNELS, WITHIN_CHANNEL) and SPP (spatial pyramid pooling)."""
import math

import numpy as np

from ..intra_op import for_images, scratch
from ..kernels import lrn as KL
from ..kernels import pooling as KP
from ..proto import caffe_pb2
from ..registry import LAYERS
from .base import Layer
from .pooling import PoolingLayer

__all__ = ['LRNLayer', 'SPPLayer']

_L = caffe_pb2.LRNParameter
_P = caffe_pb2.PoolingParameter


@LAYERS.register('LRN', v1_name='LRN')
class LRNLayer(Layer):
    """ACROSS_CHANNELS: y = x (k + alpha/n sum x^2)^-beta over n channels. WITHIN_CHANNEL (as
    Caffe builds it from AVE pooling with pad (n-1)/2): y = x (1 + alpha avg(x^2))^-beta."""
    type = 'LRN'
    exact_num_bottom = 1
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.lrn_param
        if p.local_size % 2 == 0:
            raise self.error('local_size must be odd, got %d' % p.local_size)
        self.size, self.alpha, self.beta, self.k = p.local_size, p.alpha, p.beta, p.k
        self.region = p.norm_region

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error('input must have 4 axes (N, C, H, W), got %s' % (list(bottom[0].shape),))
        top[0].reshape(bottom[0].shape)
        if getattr(self, 'scale', np.empty(0)).shape != bottom[0].shape:
            # kept while the shape holds: the net reshapes every pass, and a fresh array beyond
            # malloc's mmap threshold (32 MB) faults its pages in again on every pass
            self.scale = np.empty(bottom[0].shape, np.float32)
        if self.region != _L.ACROSS_CHANNELS:
            n, c, h, w = bottom[0].shape
            pad = (self.size - 1) // 2
            geometry = (h, w, self.size, self.size, pad, pad, 1, 1, h, w)
            self._geometry = (n * c,) + geometry + (KP.window_taps(*geometry),)

    def forward(self, bottom, top):
        x = bottom[0].data
        if self.region == _L.ACROSS_CHANNELS:
            n, c = x.shape[:2]
            x3, scale, y = x.reshape(n, c, -1), self.scale.reshape(n, c, -1), top[0].data.reshape(n, c, -1)
            f32 = np.float32
            for_images(lambda lo, hi: KL.lrn_across_forward(
                x3[lo:hi].reshape(-1), hi - lo, c, x3.shape[2], self.size, f32(self.alpha), f32(self.beta),
                f32(self.k), scale[lo:hi].reshape(-1), y[lo:hi].reshape(-1)), n, x[0].size)
            return
        sq = x * x
        avg = np.empty_like(x)
        KP.ave_pool_forward(sq.reshape(-1), *self._geometry, avg.reshape(-1))
        self.scale[...] = 1.0 + np.float32(self.alpha) * avg
        top[0].data[...] = x * self.scale ** np.float32(-self.beta)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, y, dy = bottom[0].data, top[0].data, top[0].diff
        if self.region == _L.ACROSS_CHANNELS:
            n, c = x.shape[:2]
            x3, y3, dy3 = x.reshape(n, c, -1), y.reshape(n, c, -1), dy.reshape(n, c, -1)
            scale, dx = self.scale.reshape(n, c, -1), bottom[0].diff.reshape(n, c, -1)
            f32 = np.float32
            # Caffe: 2. * alpha_ * beta_ / size_ with float alpha_, beta_, computed in double
            ratio_value = f32(2.0 * float(f32(self.alpha)) * float(f32(self.beta)) / self.size)
            plane = x3.shape[2]
            for_images(lambda lo, hi: KL.lrn_across_backward(
                x3[lo:hi].reshape(-1), y3[lo:hi].reshape(-1), scale[lo:hi].reshape(-1),
                dy3[lo:hi].reshape(-1), hi - lo, c, plane, self.size, f32(self.beta), ratio_value,
                dx[lo:hi].reshape(-1), scratch('lrn_ratio', c * plane), scratch('lrn_accum', plane)),
                n, x[0].size)
            return
        beta = np.float32(self.beta)
        d_avg = dy * x * (-beta) * self.scale ** (-beta - np.float32(1)) * np.float32(self.alpha)
        d_sq = np.empty_like(x)
        KP.ave_pool_backward(np.ascontiguousarray(d_avg).reshape(-1), self._geometry[0], self._geometry[-1],
                             d_sq.reshape(-1))
        bottom[0].diff[...] = dy * self.scale ** (-beta) + d_sq * 2 * x


@LAYERS.register('SPP')
class SPPLayer(Layer):
    """Spatial pyramid pooling: level l pools into 2^l x 2^l bins (kernel ceil(H/bins), pad
    (kernel*bins - H + 1)/2); levels are flattened and concatenated (one level: unflattened)."""
    type = 'SPP'
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.spp_param
        if bottom[0].num_axes != 4:
            raise self.error('input must have 4 axes (N, C, H, W), got %s' % (list(bottom[0].shape),))
        n, c, h, w = bottom[0].shape
        from ..blob import Blob
        self.levels = []
        for level in range(p.pyramid_height):
            bins = 2 ** level
            kh, kw = int(math.ceil(h / bins)), int(math.ceil(w / bins))
            ph, pw = (kh * bins - h + 1) // 2, (kw * bins - w + 1) // 2
            if ph >= kh or pw >= kw:
                raise self.error('input %dx%d is too small for %d pyramid levels' % (h, w, p.pyramid_height))
            lp = caffe_pb2.LayerParameter(name='%s_level%d' % (self.name, level), type='Pooling')
            lp.pooling_param.pool = p.pool
            lp.pooling_param.kernel_h, lp.pooling_param.kernel_w = kh, kw
            lp.pooling_param.pad_h, lp.pooling_param.pad_w = ph, pw
            lp.pooling_param.stride_h, lp.pooling_param.stride_w = kh, kw
            pool = PoolingLayer(lp, self.phase)
            out = Blob()
            pool.setup(bottom, [out])
            self.levels.append((pool, out))
        if p.pyramid_height == 1:
            top[0].reshape(self.levels[0][1].shape)
        else:
            top[0].reshape((n, sum(o.count // n for _, o in self.levels)))

    def forward(self, bottom, top):
        n = bottom[0].shape[0]
        parts = []
        for pool, out in self.levels:
            pool.forward(bottom, [out])
            parts.append(out.data.reshape(n, -1))
        top[0].data.reshape(n, -1)[...] = np.concatenate(parts, axis=1)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        n = bottom[0].shape[0]
        dy = top[0].diff.reshape(n, -1)
        total = np.zeros(bottom[0].shape, np.float32)
        offset = 0
        for pool, out in self.levels:
            size = out.count // n
            out.diff.reshape(n, -1)[...] = dy[:, offset:offset + size]
            offset += size
            pool.backward([out], [True], bottom)
            total += bottom[0].diff
        bottom[0].diff[...] = total
