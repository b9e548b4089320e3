"""pycaffe-ft: a Caffe-compatible, fault-tolerant deep learning engine.

``import pycaffe_ft as caffe`` gives pycaffe's API: ``caffe.Net``, ``caffe.TRAIN``/``TEST``,
``caffe.set_mode_cpu()``, ``caffe.set_random_seed()``, ``caffe.layer_type_list()``, ...
Importing it never initialises MPI.
"""
from . import layers as _layers  # noqa: F401  (registers the layer types)
from .blob import Blob
from .errors import CaffeError
from .log import warn_once as _warn_once
from . import io  # noqa: F401  (caffe.io)
from . import net_spec  # noqa: F401  (caffe.net_spec)
from .layers.python_layer import UserLayer as Layer
from .net_spec import NetSpec, layers, params, to_proto
from .net import Net
from .proto import caffe_pb2
from .random import set_random_seed
from .intra_op import num_threads, set_num_threads
from .solvers import (NCCL, AdaDeltaSolver, AdaGradSolver, AdamSolver, NesterovSolver,
                      RMSPropSolver, SGDSolver, get_solver)
from .registry import LAYERS as _LAYERS
from .caffe_runtime import (Timer, has_nccl, init_log, log, set_multiprocess, set_solver_count, set_solver_rank,
                            solver_count, solver_rank)  # (log: the function, as pycaffe's, not our log module)

__version__ = '0.1.0'

TRAIN = caffe_pb2.TRAIN
TEST = caffe_pb2.TEST

__all__ = ['Net', 'Layer', 'Blob', 'NetSpec', 'layers', 'params', 'to_proto', 'io', 'net_spec',
           'Classifier', 'Detector', 'get_solver', 'SGDSolver', 'NesterovSolver', 'AdaGradSolver',
           'RMSPropSolver', 'AdaDeltaSolver', 'AdamSolver', 'NCCL', 'TRAIN', 'TEST', 'CaffeError', 'set_mode_cpu', 'set_mode_gpu',
           'set_device', 'set_random_seed', 'set_num_threads', 'num_threads', 'layer_type_list', 'caffe_pb2',
           'init_log', 'log', 'has_nccl', 'solver_count', 'set_solver_count', 'solver_rank', 'set_solver_rank',
           'set_multiprocess', 'Timer', '__version__']


def set_mode_cpu():
    """Run on the CPU (the only mode; kept for pycaffe scripts)."""


def set_mode_gpu():
    """pycaffe's GPU switch: warns once and keeps running on the CPU."""
    _warn_once('gpu', 'pycaffe-ft runs on the CPU only: set_mode_gpu() is ignored')


def set_device(device_id):
    _warn_once('gpu', 'pycaffe-ft runs on the CPU only: set_device(%s) is ignored', device_id)


def __getattr__(name):
    """Lazy parts of the API: Classifier, Detector, draw."""
    if name == 'Classifier':
        from .classifier import Classifier
        return Classifier
    if name == 'Detector':
        from .detector import Detector
        return Detector
    if name == 'draw':
        import importlib
        return importlib.import_module(__name__ + '.draw')
    raise AttributeError('module pycaffe_ft has no attribute %r' % name)


def layer_type_list():
    """Every registered layer type, sorted (like caffe.layer_type_list())."""
    return _LAYERS.names()
