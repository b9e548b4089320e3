"""Blob: Caffe's N-d array pair ``data`` / ``diff`` (float32, C-contiguous).

``data`` and ``diff`` are views of capacity buffers: reshaping to a smaller or equal count
keeps the memory (and its values), like Caffe's ``Blob::Reshape``. Learnable blobs of a Net
are re-bound to views of one flat parameter buffer (:meth:`bind`), so a whole-net allreduce
or state copy is one call on one array.
"""
import math
import os

import numpy as np

from .aligned import aligned_zeros
from .errors import ShapeError

__all__ = ['Blob', 'max_blob_bytes']

_MAX_AXES = 32


def max_blob_bytes():
    """The most memory one blob (data and diff) may take: ``PYCAFFE_FT_MAX_BLOB_BYTES``, else a
    quarter of the machine's physical memory."""
    value = os.environ.get('PYCAFFE_FT_MAX_BLOB_BYTES', '').strip()
    if value.isdigit():
        return int(value)
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 4
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def _allocate(count, dtype, shape):
    """Zeroed data and diff buffers of ``count`` elements, or a ShapeError saying why not."""
    need = 2 * count * np.dtype(dtype).itemsize
    if need > max_blob_bytes():
        raise ShapeError('a blob of shape %s (%d elements, %.3g GB with its diff) exceeds the %.3g GB '
                         'one blob may take (PYCAFFE_FT_MAX_BLOB_BYTES; default a quarter of the '
                         'memory)' % (list(shape), count, need / 1e9, max_blob_bytes() / 1e9))
    try:
        return aligned_zeros(count, dtype), aligned_zeros(count, dtype)
    except (MemoryError, ValueError) as e:
        raise ShapeError('cannot allocate a blob of shape %s (%.3g GB with its diff): %s'
                         % (list(shape), need / 1e9, e)) from None


class Blob:
    __slots__ = ('_data_buf', '_diff_buf', '_shape', '_data', '_diff', '__weakref__')

    def __init__(self, shape=(), dtype=np.float32):
        self._shape = None
        self._data_buf = np.zeros(0, dtype)
        self._diff_buf = np.zeros(0, dtype)
        self.reshape(shape)

    # -- shape -------------------------------------------------------------------------------
    def reshape(self, *shape):
        """Reshape (``blob.reshape(2, 3)`` or ``blob.reshape((2, 3))``); grows storage if needed."""
        if len(shape) == 1 and not np.isscalar(shape[0]):
            shape = shape[0]
        shape = tuple(int(d) for d in shape)
        if len(shape) > _MAX_AXES or any(d < 0 for d in shape):
            raise ShapeError('invalid blob shape %s' % (list(shape),))
        if shape == self._shape:
            return  # the views stand (a layer's reshape every forward)
        count = math.prod(shape)
        if count > self._data_buf.size:
            self._data_buf, self._diff_buf = _allocate(count, self._data_buf.dtype, shape)
        self._shape = shape
        self._data = self._data_buf[:count].reshape(shape)
        self._diff = self._diff_buf[:count].reshape(shape)

    def reshape_like(self, other):
        self.reshape(other.shape)

    def bind(self, data_buf, diff_buf):
        """Use ``data_buf`` / ``diff_buf`` (1-d, exactly ``count`` long) as storage from now on."""
        self._data_buf, self._diff_buf = data_buf, diff_buf
        self._data = data_buf.reshape(self._shape)
        self._diff = diff_buf.reshape(self._shape)

    def share_data(self, other):
        """Make this blob's data the same memory as ``other``'s (shapes must hold the same count)."""
        if other.count != self.count:
            raise ShapeError('cannot share data of %s with %s' % (other.shape, self.shape))
        self._data_buf = other._data_buf
        self._data = other._data.reshape(self._shape)

    def share_diff(self, other):
        if other.count != self.count:
            raise ShapeError('cannot share diff of %s with %s' % (other.shape, self.shape))
        self._diff_buf = other._diff_buf
        self._diff = other._diff.reshape(self._shape)

    @property
    def shape(self):
        return self._shape

    @property
    def count(self):
        return self._data.size

    @property
    def num_axes(self):
        return len(self._shape)

    def shape_at(self, axis):
        return self._shape[self.canonical_axis(axis)]

    def canonical_axis(self, axis):
        n = len(self._shape)
        if not -n <= axis < max(n, 1):
            raise ShapeError('axis %d out of range for a %d-axis blob of shape %s'
                             % (axis, n, list(self._shape)))
        return axis + n if axis < 0 else axis

    def count_range(self, start, end=None):
        end = len(self._shape) if end is None else end
        return math.prod(self._shape[start:end])

    def _legacy(self, index):
        if len(self._shape) > 4:
            raise ShapeError('cannot use legacy accessors on blobs with > 4 axes (shape %s)'
                             % (list(self._shape),))
        index = index if index < len(self._shape) else None
        if index is None:
            return 1
        return self._shape[index]

    num = property(lambda self: self._legacy(0))
    channels = property(lambda self: self._legacy(1))
    height = property(lambda self: self._legacy(2))
    width = property(lambda self: self._legacy(3))

    # -- values ------------------------------------------------------------------------------
    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        self._data[...] = value

    @property
    def diff(self):
        return self._diff

    @diff.setter
    def diff(self, value):
        self._diff[...] = value

    def __repr__(self):
        return 'Blob(shape=%s)' % (list(self._shape),)
