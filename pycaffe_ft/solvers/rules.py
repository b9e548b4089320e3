"""Per-parameter update rules (Caffe's ComputeUpdateValue), fused over the flat buffer.

A rule's :meth:`UpdateRule.apply` runs one Numba kernel (``kernels/solver_update.py``), or its
NumPy reference while the kernel compiles (:mod:`~pycaffe_ft.kernels.tiered`), on an element
range: it normalises and regularises the gradient, updates its history arrays in place, leaves
the update in the gradient buffer (as Caffe leaves it in the diff) and subtracts it from the
weights. It must touch only that range, so ranges can run on several threads.
"""
import numpy as np

from ..kernels import numpy_references as R
from ..kernels import solver_update as K
from ..kernels.tiered import call
from ..registry import SOLVERS

__all__ = ['UpdateRule', 'RULES']

f32 = np.float32


class UpdateRule:
    """Base: ``history_blocks`` arrays of the parameter count are kept (and snapshotted); a
    rule names its ``kernel`` and the kernel's NumPy ``reference``, and gives the kernel's
    arguments after the span (:meth:`constants`)."""
    history_blocks = 1
    kernel = reference = None

    def __init__(self, param):
        self.param = param

    def constants(self, iteration):
        """The rule's float32 constants, as its kernel takes them after the span."""
        raise NotImplementedError

    def apply(self, w, g, history, span, iteration):
        """Update ``w[lo:hi]`` in place. ``span`` = (lo, hi, bounds, rates, decays,
        iter_scale, regularization) as :mod:`kernels.solver_update` takes them."""
        call(self.kernel, self.reference, w, g, *history[:self.history_blocks], *span, *self.constants(iteration))


@SOLVERS.register('SGD')
class SGD(UpdateRule):
    kernel, reference = staticmethod(K.sgd), staticmethod(R.sgd)

    def constants(self, iteration):
        return (f32(self.param.momentum),)


@SOLVERS.register('Nesterov')
class Nesterov(UpdateRule):
    kernel, reference = staticmethod(K.nesterov), staticmethod(R.nesterov)

    def constants(self, iteration):
        m = f32(self.param.momentum)
        return m, f32(1) + m


@SOLVERS.register('AdaGrad')
class AdaGrad(UpdateRule):
    kernel, reference = staticmethod(K.adagrad), staticmethod(R.adagrad)

    def constants(self, iteration):
        return (f32(self.param.delta),)


@SOLVERS.register('RMSProp')
class RMSProp(UpdateRule):
    kernel, reference = staticmethod(K.rmsprop), staticmethod(R.rmsprop)

    def constants(self, iteration):
        d = f32(self.param.rms_decay)
        return d, f32(1) - d, f32(self.param.delta)


@SOLVERS.register('AdaDelta')
class AdaDelta(UpdateRule):
    history_blocks = 2
    kernel, reference = staticmethod(K.adadelta), staticmethod(R.adadelta)

    def constants(self, iteration):
        m = f32(self.param.momentum)
        return m, f32(1) - m, f32(self.param.delta)


@SOLVERS.register('Adam')
class Adam(UpdateRule):
    history_blocks = 2
    kernel, reference = staticmethod(K.adam), staticmethod(R.adam)

    def constants(self, iteration):
        b1, b2 = f32(self.param.momentum), f32(self.param.momentum2)
        t = iteration + 1
        correction = f32(np.sqrt(f32(1) - f32(b2 ** t)) / (f32(1) - f32(b1 ** t)))
        return b1, f32(1) - b1, b2, f32(1) - b2, correction, f32(self.param.delta)


RULES = SOLVERS
