"""Caffe's learning-rate policies: rate(solver) for the current ``solver.iter``.

``iter`` is the number of completed steps. multistep advances ``solver.current_step`` at most
once per call (Caffe's behaviour), so it must be called once per iteration.
"""
import math

import numpy as np

from ..errors import SolverError
from ..log import logger
from ..registry import LR_POLICIES

__all__ = ['learning_rate']


def learning_rate(solver):
    p = solver.param
    fn = LR_POLICIES.get(p.lr_policy, SolverError, 'solver: ')
    return float(np.float32(fn(p, solver)))


def _gamma_nonneg(p):
    if p.gamma < 0:
        raise SolverError('lr_policy "%s" needs gamma >= 0, got %g' % (p.lr_policy, p.gamma))


@LR_POLICIES.register('fixed')
def _fixed(p, s):
    return p.base_lr


@LR_POLICIES.register('step')
def _step(p, s):
    _gamma_nonneg(p)
    if p.stepsize <= 0:
        raise SolverError('lr_policy "step" needs a positive stepsize, got %d' % p.stepsize)
    s.current_step = s.iter // p.stepsize
    return p.base_lr * math.pow(p.gamma, s.current_step)


@LR_POLICIES.register('exp')
def _exp(p, s):
    _gamma_nonneg(p)
    return p.base_lr * math.pow(p.gamma, s.iter)


@LR_POLICIES.register('inv')
def _inv(p, s):
    _gamma_nonneg(p)
    return p.base_lr * math.pow(1.0 + p.gamma * s.iter, -p.power)


@LR_POLICIES.register('multistep')
def _multistep(p, s):
    _gamma_nonneg(p)
    if s.current_step < len(p.stepvalue) and s.iter >= p.stepvalue[s.current_step]:
        s.current_step += 1
        logger.info('MultiStep Status: Iteration %d, step = %d', s.iter, s.current_step)
    return p.base_lr * math.pow(p.gamma, s.current_step)


@LR_POLICIES.register('poly')
def _poly(p, s):
    if p.max_iter <= 0:
        raise SolverError('lr_policy "poly" needs max_iter > 0')
    return p.base_lr * math.pow(1.0 - float(s.iter) / p.max_iter, p.power)


@LR_POLICIES.register('sigmoid')
def _sigmoid(p, s):
    _gamma_nonneg(p)
    return p.base_lr * (1.0 / (1.0 + math.exp(-p.gamma * (float(s.iter) - p.stepsize))))
