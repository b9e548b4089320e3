"""Solvers: Caffe's training loop and update rules; pycaffe's solver classes."""
from ..errors import SolverError
from .solver import NONE, SNAPSHOT, STOP, Solver

__all__ = ['Solver', 'get_solver', 'SGDSolver', 'NesterovSolver', 'AdaGradSolver',
           'RMSPropSolver', 'AdaDeltaSolver', 'AdamSolver', 'NCCL', 'NONE', 'STOP', 'SNAPSHOT']


def get_solver(path):
    """A solver of the type its definition names (pycaffe's caffe.get_solver)."""
    return Solver(path)


def _typed(type_name):
    def make(path, *args, **kwargs):
        return Solver(path, solver_type=type_name, *args, **kwargs)
    make.__name__ = type_name + 'Solver'
    make.__doc__ = 'pycaffe\'s caffe.%sSolver(path): a %s solver whatever the file\'s type.' % (type_name, type_name)
    return make


SGDSolver = _typed('SGD')
NesterovSolver = _typed('Nesterov')
AdaGradSolver = _typed('AdaGrad')
RMSPropSolver = _typed('RMSProp')
AdaDeltaSolver = _typed('AdaDelta')
AdamSolver = _typed('Adam')


class NCCL:
    """pycaffe's multi-GPU helper: not available here; data-parallel training is --np N."""

    def __init__(self, *args, **kwargs):
        raise SolverError('caffe.NCCL (multi-GPU) is not available in pycaffe-ft: run data-parallel '
                          'training with "pycaffe-ft train --solver S --np N" (MPI, fault tolerant)')
