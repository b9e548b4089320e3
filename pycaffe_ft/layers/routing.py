"""Layers that route, reshape or select data: Split, Silence, Concat, Slice, Flatten, Reshape,
Tile, Crop, Filter, BatchReindex, Parameter."""
import numpy as np

from ..registry import LAYERS
from .base import Layer

__all__ = ['SplitLayer', 'SilenceLayer', 'ConcatLayer', 'SliceLayer', 'FlattenLayer',
           'ReshapeLayer', 'TileLayer', 'CropLayer', 'FilterLayer', 'BatchReindexLayer',
           'ParameterLayer']


@LAYERS.register('Split', v1_name='SPLIT')
class SplitLayer(Layer):
    """Every top shares the bottom's data; backward sums the top diffs."""
    type = 'Split'
    exact_num_bottom = 1
    min_num_top = 1

    def reshape(self, bottom, top):
        for t in top:
            if t is not bottom[0]:
                t.reshape(bottom[0].shape)
                t.share_data(bottom[0])

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        diff = bottom[0].diff
        diff[...] = top[0].diff
        for t in top[1:]:
            diff += t.diff


@LAYERS.register('Silence', v1_name='SILENCE')
class SilenceLayer(Layer):
    """Consumes bottoms, produces nothing; backward writes zero diffs."""
    type = 'Silence'
    min_num_bottom = 1
    exact_num_top = 0

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        for b, down in zip(bottom, propagate_down):
            if down:
                b.diff[...] = 0


def _outer_inner(blob, axis):
    return blob.count_range(0, axis), blob.count_range(axis + 1)


@LAYERS.register('Concat', v1_name='CONCAT')
class ConcatLayer(Layer):
    """Concatenate along ``axis`` (or legacy ``concat_dim``); one bottom shares its blob."""
    type = 'Concat'
    min_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.concat_param
        if p.HasField('concat_dim'):
            if p.HasField('axis'):
                raise self.error('either axis or concat_dim should be specified, not both')
            axis = p.concat_dim
        else:
            axis = p.axis
        self.axis = bottom[0].canonical_axis(axis)
        shape = list(bottom[0].shape)
        for b in bottom[1:]:
            if b.num_axes != len(shape) or any(d != e for i, (d, e) in enumerate(zip(b.shape, shape)) if i != self.axis):
                raise self.error('all bottoms must have the same shape except along axis %d: %s vs %s'
                                 % (self.axis, list(bottom[0].shape), list(b.shape)))
            shape[self.axis] += b.shape[self.axis]
        top[0].reshape(shape)
        if len(bottom) == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        if len(bottom) > 1:
            np.concatenate([b.data for b in bottom], axis=self.axis, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        offset = 0
        for b, down in zip(bottom, propagate_down):
            n = b.shape[self.axis]
            if down:
                index = [slice(None)] * b.num_axes
                index[self.axis] = slice(offset, offset + n)
                b.diff[...] = top[0].diff[tuple(index)]
            offset += n


@LAYERS.register('Slice', v1_name='SLICE')
class SliceLayer(Layer):
    """Split along ``axis`` (or legacy ``slice_dim``) at ``slice_point``s, or evenly."""
    type = 'Slice'
    exact_num_bottom = 1
    min_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.slice_param
        if p.HasField('slice_dim'):
            if p.HasField('axis'):
                raise self.error('either axis or slice_dim should be specified, not both')
            axis = p.slice_dim
        else:
            axis = p.axis
        self.axis = bottom[0].canonical_axis(axis)
        size = bottom[0].shape[self.axis]
        points = list(p.slice_point)
        if points:
            if len(points) != len(top) - 1:
                raise self.error('%d slice_points for %d tops (need one fewer than the tops)'
                                 % (len(points), len(top)))
            if any(b <= a for a, b in zip([0] + points, points + [size])):
                raise self.error('slice_points %s must increase strictly within (0, %d)' % (points, size))
            bounds = [0] + points + [size]
        else:
            if size % len(top):
                raise self.error('axis %d of size %d cannot be split evenly into %d tops'
                                 % (self.axis, size, len(top)))
            step = size // len(top)
            bounds = list(range(0, size + 1, step))
        self.bounds = bounds
        for t, lo, hi in zip(top, bounds[:-1], bounds[1:]):
            shape = list(bottom[0].shape)
            shape[self.axis] = hi - lo
            t.reshape(shape)

    def _index(self, ndim, lo, hi):
        index = [slice(None)] * ndim
        index[self.axis] = slice(lo, hi)
        return tuple(index)

    def forward(self, bottom, top):
        x = bottom[0].data
        for t, lo, hi in zip(top, self.bounds[:-1], self.bounds[1:]):
            t.data[...] = x[self._index(x.ndim, lo, hi)]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dx = bottom[0].diff
            for t, lo, hi in zip(top, self.bounds[:-1], self.bounds[1:]):
                dx[self._index(dx.ndim, lo, hi)] = t.diff


class _SharingLayer(Layer):
    """Top is a reshaped view of the bottom: shares data and diff."""
    exact_num_bottom = 1
    exact_num_top = 1

    def top_shape(self, bottom):
        raise NotImplementedError

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error('cannot be used in place (top and bottom are the same blob)')
        shape = self.top_shape(bottom[0])
        if int(np.prod(shape, dtype=np.int64)) != bottom[0].count:
            raise self.error('output shape %s does not hold the %d values of input shape %s'
                             % (list(shape), bottom[0].count, list(bottom[0].shape)))
        top[0].reshape(shape)
        top[0].share_data(bottom[0])
        top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('Flatten', v1_name='FLATTEN')
class FlattenLayer(_SharingLayer):
    type = 'Flatten'

    def top_shape(self, blob):
        p = self.layer_param.flatten_param
        start, end = blob.canonical_axis(p.axis), blob.canonical_axis(p.end_axis)
        return blob.shape[:start] + (blob.count_range(start, end + 1),) + blob.shape[end + 1:]


@LAYERS.register('Reshape')
class ReshapeLayer(_SharingLayer):
    """``0`` copies the bottom dim at that position, ``-1`` infers; ``axis``/``num_axes``
    select the replaced range (a negative axis counts so that -1 is after the last axis)."""
    type = 'Reshape'

    def top_shape(self, blob):
        p = self.layer_param.reshape_param
        dims = list(p.shape.dim)
        if dims.count(-1) > 1:
            raise self.error('at most one -1 dimension is allowed, got %s' % dims)
        n = blob.num_axes
        axis = p.axis
        start = axis if axis >= 0 else n + axis + 1
        if not 0 <= start <= n:
            raise self.error('axis %d out of range for a %d-axis bottom' % (axis, n))
        if p.num_axes < -1:
            raise self.error('num_axes must be >= -1, got %d' % p.num_axes)
        end = n if p.num_axes == -1 else start + p.num_axes
        if end > n:
            raise self.error('axis + num_axes (%d) exceeds the bottom\'s %d axes' % (end, n))
        new = []
        for i, d in enumerate(dims):
            if d == 0:
                if start + i >= n:
                    raise self.error('dim 0 at position %d copies a bottom axis that does not exist' % i)
                new.append(blob.shape[start + i])
            elif d < -1:
                raise self.error('invalid dimension %d' % d)
            else:
                new.append(d)
        shape = list(blob.shape[:start]) + new + list(blob.shape[end:])
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
            if known == 0 or blob.count % known:
                raise self.error('cannot infer the -1 dimension: %d values into %s' % (blob.count, shape))
            shape[shape.index(-1)] = blob.count // known
        return tuple(shape)


@LAYERS.register('Tile')
class TileLayer(Layer):
    type = 'Tile'
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        p = self.layer_param.tile_param
        if p.tiles <= 0:
            raise self.error('tiles must be positive, got %d' % p.tiles)
        self.axis = bottom[0].canonical_axis(p.axis)
        self.tiles = p.tiles
        shape = list(bottom[0].shape)
        shape[self.axis] *= self.tiles
        top[0].reshape(shape)

    def forward(self, bottom, top):
        outer = bottom[0].count_range(0, self.axis)
        x = bottom[0].data.reshape(outer, 1, -1)
        top[0].data.reshape(outer, self.tiles, -1)[...] = x

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            outer = bottom[0].count_range(0, self.axis)
            bottom[0].diff.reshape(outer, -1)[...] = top[0].diff.reshape(outer, self.tiles, -1).sum(axis=1)


@LAYERS.register('Crop')
class CropLayer(Layer):
    """Crop bottom 0 to bottom 1's shape from ``axis`` on, at ``offset``s (one for all, or one
    per cropped axis). Bottom 1 only gives the shape (no diff)."""
    type = 'Crop'
    exact_num_bottom = 2
    exact_num_top = 1

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def reshape(self, bottom, top):
        p = self.layer_param.crop_param
        if bottom[0].num_axes != bottom[1].num_axes:
            raise self.error('bottoms must have the same number of axes: %s vs %s'
                             % (list(bottom[0].shape), list(bottom[1].shape)))
        axis = bottom[0].canonical_axis(p.axis)
        n = bottom[0].num_axes
        offsets = list(p.offset)
        if len(offsets) not in (0, 1, n - axis):
            raise self.error('give one offset, or one per cropped axis (%d), got %d' % (n - axis, len(offsets)))
        shape, index = [], []
        for i in range(n):
            if i < axis:
                shape.append(bottom[0].shape[i])
                index.append(slice(None))
                continue
            off = 0 if not offsets else offsets[0 if len(offsets) == 1 else i - axis]
            size = bottom[1].shape[i]
            if off + size > bottom[0].shape[i]:
                raise self.error('crop of axis %d (offset %d, size %d) exceeds the bottom size %d'
                                 % (i, off, size, bottom[0].shape[i]))
            shape.append(size)
            index.append(slice(off, off + size))
        self.index = tuple(index)
        top[0].reshape(shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data[self.index]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = 0
            bottom[0].diff[self.index] = top[0].diff


@LAYERS.register('Filter')
class FilterLayer(Layer):
    """Forward the items (along axis 0) whose selector (last bottom) is non-zero."""
    type = 'Filter'
    min_num_bottom = 2
    min_num_top = 1

    def allow_force_backward(self, bottom_index):
        return bottom_index < self._num_data

    def layer_setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error('needs one top per data bottom (%d bottoms incl. the selector, %d tops)'
                             % (len(bottom), len(top)))
        self._num_data = len(bottom) - 1

    def reshape(self, bottom, top):
        selector = bottom[-1]
        n = selector.shape[0] if selector.num_axes else 1
        if selector.count != n:
            raise self.error('the selector must hold one value per item, shape %s' % (list(selector.shape),))
        for b in bottom[:-1]:
            if b.shape[0] != n:
                raise self.error('every bottom needs %d items along axis 0 like the selector, got %s'
                                 % (n, list(b.shape)))
        self.indices = np.flatnonzero(selector.data.reshape(-1) != 0)
        for b, t in zip(bottom[:-1], top):
            t.reshape((len(self.indices),) + b.shape[1:])

    def forward(self, bottom, top):
        for b, t in zip(bottom[:-1], top):
            t.data[...] = b.data[self.indices]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error('cannot backpropagate to the selector (last bottom)')
        for b, t, down in zip(bottom[:-1], top, propagate_down):
            if down:
                b.diff[...] = 0
                b.diff[self.indices] = t.diff


@LAYERS.register('BatchReindex')
class BatchReindexLayer(Layer):
    """top[i] = bottom0[index[i]]; backward sums the diffs of repeated indices."""
    type = 'BatchReindex'
    exact_num_bottom = 2
    exact_num_top = 1

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error('the index bottom must be 1-D, got %s' % (list(bottom[1].shape),))
        top[0].reshape((bottom[1].shape[0],) + bottom[0].shape[1:])

    def _indices(self, bottom):
        idx = bottom[1].data.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= bottom[0].shape[0]):
            raise self.error('index out of range [0, %d): %s' % (bottom[0].shape[0], idx.tolist()))
        return idx

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data[self._indices(bottom)]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the index bottom')
        if propagate_down[0]:
            bottom[0].diff[...] = 0
            np.add.at(bottom[0].diff, self._indices(bottom), top[0].diff)


@LAYERS.register('Parameter')
class ParameterLayer(Layer):
    """A learnable blob as a top (the top shares its data and diff)."""
    type = 'Parameter'
    exact_num_bottom = 0
    exact_num_top = 1

    def layer_setup(self, bottom, top):
        self.init_params([tuple(self.layer_param.parameter_param.shape.dim)], [None])

    def reshape(self, bottom, top):
        top[0].reshape(self.blobs[0].shape)
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass
