"""Per-parameter update rules (Caffe's ComputeUpdateValue), fused over the flat buffer.

A rule's :meth:`UpdateRule.apply` runs one Numba kernel (``kernels/solver_update.py``) on an
element range: it normalises and regularises the gradient, updates its history arrays in
place, leaves the update in the gradient buffer (as Caffe leaves it in the diff) and subtracts
it from the weights. It must touch only that range, so ranges can run on several threads.
"""
import numpy as np

from ..kernels import solver_update as K
from ..registry import SOLVERS

__all__ = ['UpdateRule', 'RULES']

f32 = np.float32


class UpdateRule:
    """Base: ``history_blocks`` arrays of the parameter count are kept (and snapshotted)."""
    history_blocks = 1

    def __init__(self, param):
        self.param = param

    def apply(self, w, g, history, span, iteration):
        """Update ``w[lo:hi]`` in place. ``span`` = (lo, hi, bounds, rates, decays,
        iter_scale, regularization) as :mod:`kernels.solver_update` takes them."""
        raise NotImplementedError


@SOLVERS.register('SGD')
class SGD(UpdateRule):
    def apply(self, w, g, history, span, iteration):
        K.sgd(w, g, history[0], *span, f32(self.param.momentum))


@SOLVERS.register('Nesterov')
class Nesterov(UpdateRule):
    def apply(self, w, g, history, span, iteration):
        m = f32(self.param.momentum)
        K.nesterov(w, g, history[0], *span, m, f32(1) + m)


@SOLVERS.register('AdaGrad')
class AdaGrad(UpdateRule):
    def apply(self, w, g, history, span, iteration):
        K.adagrad(w, g, history[0], *span, f32(self.param.delta))


@SOLVERS.register('RMSProp')
class RMSProp(UpdateRule):
    def apply(self, w, g, history, span, iteration):
        d = f32(self.param.rms_decay)
        K.rmsprop(w, g, history[0], *span, d, f32(1) - d, f32(self.param.delta))


@SOLVERS.register('AdaDelta')
class AdaDelta(UpdateRule):
    history_blocks = 2

    def apply(self, w, g, history, span, iteration):
        m = f32(self.param.momentum)
        K.adadelta(w, g, history[0], history[1], *span, m, f32(1) - m, f32(self.param.delta))


@SOLVERS.register('Adam')
class Adam(UpdateRule):
    history_blocks = 2

    def apply(self, w, g, history, span, iteration):
        b1, b2 = f32(self.param.momentum), f32(self.param.momentum2)
        t = iteration + 1
        correction = f32(np.sqrt(f32(1) - f32(b2 ** t)) / (f32(1) - f32(b1 ** t)))
        K.adam(w, g, history[0], history[1], *span, b1, f32(1) - b1, b2, f32(1) - b2, correction,
               f32(self.param.delta))


RULES = SOLVERS
