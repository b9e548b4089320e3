"""Data sources that need no dataset tooling: MemoryData (``net.set_input_arrays``), HDF5Data
and HDF5Output (h5py is an optional extra)."""
import os

import numpy as np

from ..errors import DataError
from ..registry import LAYERS
from .base import Layer

__all__ = ['MemoryDataLayer', 'HDF5DataLayer', 'HDF5OutputLayer']


def _h5py(layer):
    try:
        import h5py
    except ImportError:
        raise layer.error('needs h5py, which is not installed: pip install h5py (or pip install '
                          '"pycaffe-ft[hdf5]")') from None
    return h5py


@LAYERS.register('MemoryData', v1_name='MEMORY_DATA')
class MemoryDataLayer(Layer):
    """Serves batches from arrays given with ``net.set_input_arrays(data, labels)``, in order,
    wrapping around."""
    type = 'MemoryData'
    exact_num_bottom = 0
    exact_num_top = 2

    def layer_setup(self, bottom, top):
        p = self.layer_param.memory_data_param
        if p.batch_size <= 0 or min(p.channels, p.height, p.width) <= 0:
            raise self.error('batch_size, channels, height and width must all be positive')
        self.batch = p.batch_size
        self.shape = (p.batch_size, p.channels, p.height, p.width)
        self.data = self.labels = None
        self.pos = 0

    def reshape(self, bottom, top):
        top[0].reshape(self.shape)
        top[1].reshape((self.batch, 1, 1, 1))

    def set_arrays(self, data, labels):
        data = np.ascontiguousarray(data, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.float32).reshape(-1)
        if data.ndim != 4 or data.shape[1:] != self.shape[1:]:
            raise self.error('data must have shape (n, %d, %d, %d), got %s' % (self.shape[1:] + (list(data.shape),)))
        if len(labels) != len(data):
            raise self.error('%d labels for %d data items' % (len(labels), len(data)))
        if len(data) == 0 or len(data) % self.batch:
            raise self.error('the number of items (%d) must be a positive multiple of batch_size (%d)'
                             % (len(data), self.batch))
        self.data, self.labels, self.pos = data, labels, 0

    def forward(self, bottom, top):
        if self.data is None:
            raise self.error('no input arrays: call net.set_input_arrays(data, labels) first')
        top[0].data[...] = self.data[self.pos:self.pos + self.batch]
        top[1].data.reshape(-1)[...] = self.labels[self.pos:self.pos + self.batch]
        self.pos = (self.pos + self.batch) % len(self.data)

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('HDF5Data', v1_name='HDF5_DATA')
class HDF5DataLayer(Layer):
    """Rows of the datasets named like the tops, from the HDF5 files listed in ``source``."""
    type = 'HDF5Data'
    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        h5py = _h5py(self)
        p = self.layer_param.hdf5_data_param
        if not os.path.exists(p.source):
            raise self.error('source list "%s" not found' % p.source)
        with open(p.source) as f:
            files = [line.strip() for line in f if line.strip()]
        if not files:
            raise self.error('source list "%s" names no HDF5 files' % p.source)
        self.arrays = {name: [] for name in self.layer_param.top}
        for path in files:
            if not os.path.exists(path):
                raise self.error('HDF5 file "%s" (listed in %s) not found' % (path, p.source))
            with h5py.File(path, 'r') as f:
                for name in self.layer_param.top:
                    if name not in f:
                        raise self.error('%s has no dataset "%s" (the top name)' % (path, name))
                    self.arrays[name].append(np.asarray(f[name], dtype=np.float32))
        self.arrays = {k: np.concatenate(v) for k, v in self.arrays.items()}
        counts = {len(v) for v in self.arrays.values()}
        if len(counts) != 1:
            raise self.error('datasets have different numbers of rows: %s'
                             % {k: len(v) for k, v in self.arrays.items()})
        self.rows = counts.pop()
        self.batch = p.batch_size
        self.order = np.arange(self.rows)
        self.shuffle = p.shuffle
        if self.shuffle:
            self.rng.shuffle(self.order)
        self.pos = 0

    def reshape(self, bottom, top):
        for name, t in zip(self.layer_param.top, top):
            t.reshape((self.batch,) + self.arrays[name].shape[1:])

    def forward(self, bottom, top):
        idx = np.empty(self.batch, np.int64)
        for i in range(self.batch):
            idx[i] = self.order[self.pos]
            self.pos += 1
            if self.pos == self.rows:
                self.pos = 0
                if self.shuffle:
                    self.rng.shuffle(self.order)
        for name, t in zip(self.layer_param.top, top):
            t.data[...] = self.arrays[name][idx]

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('HDF5Output', v1_name='HDF5_OUTPUT')
class HDF5OutputLayer(Layer):
    """Writes bottoms 0 and 1 as 4-axis datasets "data" and "label" to ``file_name``."""
    type = 'HDF5Output'
    exact_num_bottom = 2
    exact_num_top = 0

    def layer_setup(self, bottom, top):
        self.h5py = _h5py(self)
        self.file_name = self.layer_param.hdf5_output_param.file_name
        if not self.file_name:
            raise self.error('hdf5_output_param.file_name is required')

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        tmp = self.file_name + '.tmp'
        try:
            with self.h5py.File(tmp, 'w') as f:
                for name, b in (('data', bottom[0]), ('label', bottom[1])):
                    shape = (b.shape + (1, 1, 1, 1))[:4] if b.num_axes <= 4 else b.shape
                    f.create_dataset(name, data=b.data.reshape(shape))
            os.replace(tmp, self.file_name)
        except OSError as e:
            raise DataError('layer "%s": cannot write %s: %s' % (self.name, self.file_name, e)) from None

    def backward(self, top, propagate_down, bottom):
        pass
