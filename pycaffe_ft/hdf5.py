"""HDF5 weights (``.caffemodel.h5``): datasets ``data/<layer>/<i>`` as Caffe's Net::ToHDF5.

Needs the optional h5py extra (``pip install 'pycaffe-ft[hdf5]'``).
"""
import os

import numpy as np

from .errors import WeightsError

__all__ = ['require_h5py', 'copy_from_hdf5', 'save_hdf5']


def require_h5py(what):
    try:
        import h5py
    except ImportError:
        raise WeightsError('%s needs h5py, which is not installed: pip install h5py '
                           '(or pip install "pycaffe-ft[hdf5]")' % what) from None
    return h5py


def copy_from_hdf5(net, path):
    """Caffe's CopyTrainedLayersFromHDF5: layers absent from the net are skipped."""
    h5py = require_h5py('reading %s' % path)
    if not os.path.exists(path):
        raise WeightsError('%s: file not found' % path)
    try:
        f = h5py.File(path, 'r')
    except OSError as e:
        raise WeightsError('%s: not an HDF5 file (%s)' % (path, e)) from None
    with f:
        if 'data' not in f:
            raise WeightsError('%s: no "data" group: not a Caffe HDF5 model' % path)
        group = f['data']
        by_name = net.layer_dict
        for name in group:
            layer = by_name.get(name)
            if layer is None:
                continue
            blobs = group[name]
            if len(blobs) != len(layer.blobs):
                raise WeightsError('%s: incompatible number of blobs for layer "%s": %d in the '
                                   'file, %d in the net' % (path, name, len(blobs), len(layer.blobs)))
            for i, blob in enumerate(layer.blobs):
                array = np.asarray(blobs[str(i)], dtype=np.float32)
                if array.size != blob.count:
                    raise WeightsError('%s: layer "%s" param %d has shape %s in the file, %s in '
                                       'the net' % (path, name, i, list(array.shape), list(blob.shape)))
                blob.data[...] = array.reshape(blob.shape)


def save_hdf5(net, path, write_diff=False):
    h5py = require_h5py('writing %s' % path)
    tmp = path + '.tmp'  # renamed into place only once complete
    with h5py.File(tmp, 'w') as f:
        data = f.create_group('data')
        diff = f.create_group('diff') if write_diff else None
        for name, layer in zip(net._layer_names, net.layers):
            g = data.create_group(name)
            for i, blob in enumerate(layer.blobs):
                g.create_dataset(str(i), data=blob.data)
                if diff is not None:
                    diff.require_group(name).create_dataset(str(i), data=blob.diff)
    os.replace(tmp, path)
