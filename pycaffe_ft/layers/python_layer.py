"""``type: "Python"``: a user class with pycaffe's interface, found on sys.path or next to the
net definition."""
import importlib
import sys

from ..blob import Blob
from ..registry import LAYERS
from .base import Layer

__all__ = ['PythonLayer', 'UserLayer', 'BlobVec']


class BlobVec(list):
    """pycaffe's BlobVec, as a Python layer's ``self.blobs``: a list of Blobs whose
    ``add_blob(*shape)`` appends a new zero blob. Blobs added in ``setup`` are the layer's
    learnable parameters (updated by solvers, saved in .caffemodel files, shareable by name)."""

    def add_blob(self, *shape):
        blob = Blob(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        self.append(blob)
        return blob


class UserLayer:
    """Base class of user Python layers (``caffe.Layer``).

    Subclasses implement ``setup(bottom, top)``, ``reshape(bottom, top)``, ``forward(bottom,
    top)`` and ``backward(top, propagate_down, bottom)``; they may read ``self.param_str`` and
    ``self.phase`` and own learnable blobs through ``self.blobs`` / ``self.add_blob(*shape)``.
    """

    def __init__(self, param=None):
        self.layer_param = param
        self.blobs = BlobVec()

    def add_blob(self, *shape):
        """The same as ``self.blobs.add_blob(*shape)``."""
        return self.blobs.add_blob(*shape)

    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('Python')
class PythonLayer(Layer):
    type = 'Python'

    def _import(self):
        p = self.layer_param.python_param
        if not p.module or not p.layer:
            raise self.error('python_param needs both module and layer')
        extra = []
        source = getattr(self, 'net_source', None)
        if source is not None and source.path:
            extra.append(source.directory)
        for path in extra:
            if path not in sys.path:
                sys.path.append(path)
        try:
            module = importlib.import_module(p.module)
        except Exception as e:  # import errors of user code, reported with the layer
            raise self.error('cannot import module "%s" (searched sys.path%s): %s: %s' % (
                p.module, ' and ' + ', '.join(extra) if extra else '', type(e).__name__, e)) from None
        try:
            return getattr(module, p.layer)
        except AttributeError:
            raise self.error('module "%s" (%s) has no class "%s"' % (
                p.module, getattr(module, '__file__', '?'), p.layer)) from None

    def layer_setup(self, bottom, top):
        cls = self._import()
        try:
            impl = cls(self.layer_param)
        except TypeError:
            impl = cls()
        impl.param_str = self.layer_param.python_param.param_str
        impl.phase = self.phase
        self.blobs = BlobVec(self.blobs)  # blobs from the definition, if any, stay first
        impl.blobs = self.blobs
        if not hasattr(impl, 'add_blob'):
            impl.add_blob = self.blobs.add_blob
        self.impl = impl
        impl.setup(bottom, top)

    def reshape(self, bottom, top):
        self.impl.reshape(bottom, top)

    def forward(self, bottom, top):
        self.impl.forward(bottom, top)

    def backward(self, top, propagate_down, bottom):
        self.impl.backward(top, propagate_down, bottom)
