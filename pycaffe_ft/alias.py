"""The opt-in ``caffe`` alias: a tiny ``caffe`` package whose modules are pycaffe-ft's, so that
``import caffe`` / ``from caffe.proto import caffe_pb2`` scripts run unchanged.

Installed only on request (``pycaffe-ft install-caffe-alias``) and never over an existing
``caffe`` package, so nothing clashes with a real Caffe install.
"""
import os
import site

from .errors import CaffeError

__all__ = ['install_alias', 'ALIAS_SOURCE']

ALIAS_SOURCE = '''"""caffe -> pycaffe_ft alias (installed by pycaffe-ft install-caffe-alias)."""
import importlib
import sys

import pycaffe_ft
from pycaffe_ft import *  # noqa: F401,F403
from pycaffe_ft import __version__, io, net_spec, proto  # noqa: F401

for _name in ('io', 'net_spec', 'proto', 'proto.caffe_pb2', 'draw', 'classifier', 'detector', 'coord_map'):
    sys.modules['caffe.' + _name] = importlib.import_module('pycaffe_ft.' + _name)
__getattr__ = pycaffe_ft.__getattr__
'''


def install_alias(target=None):
    """Write ``caffe/__init__.py`` into ``target`` (default: this environment's site-packages)."""
    if target is None:
        paths = [p for p in site.getsitepackages() if os.path.isdir(p)] if hasattr(site, 'getsitepackages') else []
        if not paths:
            raise CaffeError('cannot find site-packages; give --target DIR')
        target = paths[0]
    package = os.path.join(target, 'caffe')
    init = os.path.join(package, '__init__.py')
    if os.path.exists(package):
        with open(init) if os.path.exists(init) else open(os.devnull) as f:
            if 'pycaffe_ft' not in f.read():
                raise CaffeError('%s exists and is not the pycaffe-ft alias (a real Caffe?): not touching it' % package)
    os.makedirs(package, exist_ok=True)
    with open(init, 'w') as f:
        f.write(ALIAS_SOURCE)
    return package
