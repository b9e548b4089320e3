"""Caffe's weight fillers (FillerParameter.type): constant, uniform, gaussian (sparse),
positive_unitball, xavier, msra, bilinear.

A filler is ``fill(filler_param, array, rng)``: it overwrites ``array`` (float32, the blob's
shape) in place using the Generator ``rng``.
"""
import numpy as np

from .errors import LayerSetupError
from .registry import FILLERS

__all__ = ['fill']

_VARIANCE_NORM = {0: 'FAN_IN', 1: 'FAN_OUT', 2: 'AVERAGE'}


def fill(filler_param, array, rng):
    """Fill ``array`` in place as ``filler_param`` says (an empty blob, e.g. the weights of a
    convolution over zero channels, has nothing to fill: Caffe accepts it too)."""
    filler = FILLERS.get(filler_param.type, LayerSetupError)
    if array.size:
        filler(filler_param, array, rng)
    return array


def _uniform01(rng, shape):
    return rng.random(shape, dtype=np.float32)


def _normal(rng, shape):
    return rng.standard_normal(shape, dtype=np.float32)


def _fans(array):
    count = array.size
    if array.ndim < 1 or array.shape[0] == 0:
        raise LayerSetupError('xavier/msra fillers need a blob with a non-empty first axis, '
                              'got shape %s' % (list(array.shape),))
    fan_in = count // array.shape[0]
    fan_out = count // array.shape[1] if array.ndim > 1 and array.shape[1] else count
    return fan_in, fan_out


def _fan(filler_param, array):
    fan_in, fan_out = _fans(array)
    norm = _VARIANCE_NORM[filler_param.variance_norm]
    if norm == 'FAN_IN':
        return fan_in
    if norm == 'FAN_OUT':
        return fan_out
    return (fan_in + fan_out) / 2.0


@FILLERS.register('constant')
def _constant(p, array, rng):
    array[...] = p.value


@FILLERS.register('uniform')
def _uniform(p, array, rng):
    array[...] = _uniform01(rng, array.shape) * np.float32(p.max - p.min) + np.float32(p.min)


@FILLERS.register('gaussian')
def _gaussian(p, array, rng):
    array[...] = _normal(rng, array.shape) * np.float32(p.std) + np.float32(p.mean)
    if p.sparse >= 0:
        if array.ndim < 1 or array.shape[0] == 0:
            raise LayerSetupError('sparse gaussian filler needs a blob with a first axis')
        probability = p.sparse / float(array.shape[0])
        array *= _uniform01(rng, array.shape) < probability


@FILLERS.register('positive_unitball')
def _positive_unitball(p, array, rng):
    array[...] = _uniform01(rng, array.shape)
    rows = array.reshape(array.shape[0] if array.ndim else 1, -1)
    rows /= rows.sum(axis=1, keepdims=True)


@FILLERS.register('xavier')
def _xavier(p, array, rng):
    scale = np.float32(np.sqrt(3.0 / _fan(p, array)))
    array[...] = (_uniform01(rng, array.shape) * 2 - 1) * scale


@FILLERS.register('msra')
def _msra(p, array, rng):
    array[...] = _normal(rng, array.shape) * np.float32(np.sqrt(2.0 / _fan(p, array)))


@FILLERS.register('bilinear')
def _bilinear(p, array, rng):
    if array.ndim != 4 or array.shape[2] != array.shape[3]:
        raise LayerSetupError('bilinear filler needs a 4-axis blob with square kernels, got '
                              'shape %s' % (list(array.shape),))
    k = array.shape[3]
    f = int(np.ceil(k / 2.0))
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    axis = 1 - np.abs(np.arange(k) / f - c)
    array[...] = np.outer(axis, axis)
