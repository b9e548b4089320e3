"""pycaffe's ``caffe.coord_map``: how spatial coordinates map between the tops of a NetSpec
net, and ``crop(top_from, top_like)``, the Crop layer that aligns one top with another (what
FCN-style segmentation nets use to undo their padding and upsampling).

A map is ``(axis, scale, shift)``: coordinate ``x`` of a layer's input lands at
``scale * x + shift`` in its output, on the spatial axes after ``axis`` (``axis`` None: the
layer does not care, as pointwise layers). Convolution, Pooling and Im2col scale by 1/stride,
Deconvolution by stride; Crop shifts by its offsets; the layers in ``PASS_THROUGH_LAYERS`` keep
coordinates. Anything else stops the walk (pycaffe's ``UndefinedMapException``).

Errors are pycaffe's kinds, typed: :class:`NoCoordMapError` is a ``RuntimeError`` (two tops
not connected through spatial layers), :class:`CropAlignmentError` an ``AssertionError`` (a crop
that would need scaling, a negative or a fractional offset).
"""
import collections

import numpy as np

from .errors import CaffeError
from .net_spec import layers as L

__all__ = ['PASS_THROUGH_LAYERS', 'UndefinedMapException', 'AxisMismatchException', 'NoCoordMapError',
           'CropAlignmentError', 'conv_params', 'crop_params', 'coord_map', 'compose', 'inverse',
           'coord_map_from_to', 'crop']

PASS_THROUGH_LAYERS = ['AbsVal', 'BatchNorm', 'Bias', 'BNLL', 'Dropout', 'Eltwise', 'ELU', 'Log', 'LRN',
                       'Exp', 'MVN', 'Power', 'ReLU', 'PReLU', 'Scale', 'Sigmoid', 'Split', 'TanH',
                       'Threshold']
IDENTITY = (None, 1, 0)


class UndefinedMapException(Exception):
    """A layer whose coordinate mapping is not defined (it ends the walk through the graph)."""


class AxisMismatchException(Exception):
    """Two maps on different axes cannot be composed."""


class NoCoordMapError(CaffeError, RuntimeError):
    """No coordinate mapping between two tops (not connected through spatial layers)."""


class CropAlignmentError(CaffeError, AssertionError):
    """A crop that cannot align its tops (scale not 1, negative or fractional offset)."""


def _spatial(params, name, stem, default):
    """A per-axis parameter as an array: ``name``, else ``stem_h``/``stem_w``, else default."""
    if name in params:
        return np.array(params[name], ndmin=1)
    if stem + '_h' in params or stem + '_w' in params:
        return np.array([params.get(stem + '_h', default), params.get(stem + '_w', default)])
    return np.array(default, ndmin=1)


def conv_params(fn):
    """(channel axis, stride, effective kernel extent, pad) of a Convolution, Deconvolution,
    Im2col or Pooling function; the extent counts dilation: (kernel - 1) * dilation + 1."""
    params = fn.params.get('convolution_param', fn.params.get('pooling_param', fn.params))
    if params.get('global_pooling'):
        raise UndefinedMapException  # the window is the whole input: no fixed mapping
    if 'kernel_size' not in params and 'kernel_h' not in params:
        raise UndefinedMapException
    kernel = _spatial(params, 'kernel_size', 'kernel', None)
    dilation = _spatial(params, 'dilation', 'dilation', 1)
    return (params.get('axis', 1), _spatial(params, 'stride', 'stride', 1), (kernel - 1) * dilation + 1,
            _spatial(params, 'pad', 'pad', 0))


def crop_params(fn):
    """(first cropped axis, offsets) of a Crop function (Caffe's defaults: axis 2, offset 0)."""
    params = fn.params.get('crop_param', fn.params)
    return params.get('axis', 2), np.array(params.get('offset', 0), ndmin=1)


def coord_map(fn):
    """The (axis, scale, shift) of one function; UndefinedMapException where there is none."""
    kind = fn.type_name
    if kind in ('Convolution', 'Pooling', 'Im2col'):
        axis, stride, extent, pad = conv_params(fn)
        return axis, 1 / stride, (pad - (extent - 1) / 2) / stride
    if kind == 'Deconvolution':
        axis, stride, extent, pad = conv_params(fn)
        return axis, stride, (extent - 1) / 2 - pad
    if kind == 'Crop':
        axis, offset = crop_params(fn)
        return axis - 1, 1, -offset  # the map's axis is the one before the first cropped axis
    if kind in PASS_THROUGH_LAYERS:
        return IDENTITY
    raise UndefinedMapException


def compose(base_map, next_map):
    """Apply ``base_map`` after ``next_map``: scales multiply, the inner shift is scaled."""
    (axis1, scale1, shift1), (axis2, scale2, shift2) = base_map, next_map
    if axis1 is not None and axis2 is not None and axis1 != axis2:
        raise AxisMismatchException('maps on axes %s and %s' % (axis1, axis2))
    return (axis2 if axis1 is None else axis1), scale1 * scale2, scale1 * shift2 + shift1


def inverse(coord_map):
    """The map back: x = (y - shift) / scale."""
    axis, scale, shift = coord_map
    return axis, 1 / scale, -shift / scale


def _walk_up(top):
    """(input top, map from that input to ``top``) for each input the walk follows: all of
    a function's inputs, except Crop's second (reference) input. None if undefined."""
    fn = top.fn
    try:
        step = coord_map(fn)
    except UndefinedMapException:
        return []
    inputs = fn.inputs[:1] if fn.type_name == 'Crop' else fn.inputs
    return [(bottom, step) for bottom in inputs]


def _ancestors(top):
    """Breadth first: every top reachable upwards from ``top`` and the map from it to ``top``,
    in the order met."""
    maps = collections.OrderedDict([(top, IDENTITY)])
    queue = collections.deque([top])
    while queue:
        current = queue.popleft()
        for bottom, step in _walk_up(current):
            if bottom not in maps:
                maps[bottom] = compose(maps[current], step)
                queue.append(bottom)
    return maps


def coord_map_from_to(top_from, top_to):
    """The map taking coordinates of ``top_from`` to those of ``top_to``, through their
    nearest common ancestor. NoCoordMapError (a RuntimeError) if they have none."""
    from_maps = _ancestors(top_from)
    for ancestor, to_map in _ancestors(top_to).items():
        if ancestor in from_maps:
            return compose(to_map, inverse(from_maps[ancestor]))
    raise NoCoordMapError('could not compute a coordinate map between the tops: are they connected '
                          'by spatial layers?')


def crop(top_from, top_like):
    """A Crop function cropping ``top_from`` to ``top_like``'s extent, with the offsets the
    coordinate map gives. CropAlignmentError (an AssertionError) when no crop can align them."""
    axis, scale, shift = coord_map_from_to(top_from, top_like)
    scale, shift = np.array(scale, ndmin=1), np.array(shift, ndmin=1)
    if not (scale == 1).all():
        raise CropAlignmentError('scale mismatch on crop (scale %s): the tops are not at the same resolution'
                                 % scale.tolist())
    if not (shift <= 0).all():
        raise CropAlignmentError('cannot crop a negative offset (%s): %s is smaller than the top to match'
                                 % ((-shift).tolist(), 'the top to crop'))
    if not (np.round(shift) == shift).all():
        raise CropAlignmentError('cannot crop a fractional offset (%s): the tops are misaligned by half a pixel'
                                 % (-shift).tolist())
    return L.Crop(top_from, top_like, crop_param=dict(axis=(axis if axis is not None else 1) + 1,
                                                      offset=[int(v) for v in -np.round(shift)]))
