"""Per-parameter update rules (Caffe's ComputeUpdateValue), vectorised over the flat buffer.

A rule gets the gradient ``g`` (float32, already clipped, normalised and regularised), the
per-element rate ``rate`` (lr * lr_mult) and its history arrays; it returns the update that
is subtracted from the weights. It must update the histories in place and must not touch the
weights.
"""
import numpy as np

from ..registry import SOLVERS

__all__ = ['UpdateRule', 'RULES']

f32 = np.float32


class UpdateRule:
    """Base: ``history_blocks`` arrays of the parameter count are kept (and snapshotted)."""
    history_blocks = 1

    def __init__(self, param):
        self.param = param

    def compute(self, g, rate, history, iteration):
        raise NotImplementedError


@SOLVERS.register('SGD')
class SGD(UpdateRule):
    def compute(self, g, rate, history, iteration):
        h = history[0]
        h *= f32(self.param.momentum)
        h += rate * g
        return h.copy()


@SOLVERS.register('Nesterov')
class Nesterov(UpdateRule):
    def compute(self, g, rate, history, iteration):
        m = f32(self.param.momentum)
        h = history[0]
        previous = h.copy()
        h *= m
        h += rate * g
        return (f32(1) + m) * h - m * previous


@SOLVERS.register('AdaGrad')
class AdaGrad(UpdateRule):
    def compute(self, g, rate, history, iteration):
        h = history[0]
        h += g * g
        return rate * (g / (np.sqrt(h) + f32(self.param.delta)))


@SOLVERS.register('RMSProp')
class RMSProp(UpdateRule):
    def compute(self, g, rate, history, iteration):
        d = f32(self.param.rms_decay)
        h = history[0]
        h *= d
        h += (f32(1) - d) * (g * g)
        return rate * (g / (np.sqrt(h) + f32(self.param.delta)))


@SOLVERS.register('AdaDelta')
class AdaDelta(UpdateRule):
    history_blocks = 2

    def compute(self, g, rate, history, iteration):
        m, delta = f32(self.param.momentum), f32(self.param.delta)
        h, h_update = history
        h *= m
        h += (f32(1) - m) * (g * g)
        u = g * np.sqrt((h_update + delta) / (h + delta))
        h_update *= m
        h_update += (f32(1) - m) * (u * u)
        return rate * u


@SOLVERS.register('Adam')
class Adam(UpdateRule):
    history_blocks = 2

    def compute(self, g, rate, history, iteration):
        b1, b2 = f32(self.param.momentum), f32(self.param.momentum2)
        m, v = history
        t = iteration + 1
        correction = f32(np.sqrt(f32(1) - f32(b2 ** t)) / (f32(1) - f32(b1 ** t)))
        m *= b1
        m += (f32(1) - b1) * g
        v *= b2
        v += (f32(1) - b2) * (g * g)
        return (rate * correction) * (m / (np.sqrt(v) + f32(self.param.delta)))


RULES = SOLVERS
