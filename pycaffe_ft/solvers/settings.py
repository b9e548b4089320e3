"""The legal ranges of a SolverParameter, checked when a solver is built.

Caffe's CHECKs are the floor; added: non-finite hyper-parameters, counts that would divide by
zero or train nothing. :func:`check_solver_settings` raises a SolverError naming the file, the
field, the value and the range; settings that only imply very long runs are warnings.
"""
import math

from ..errors import SolverError
from ..log import logger

__all__ = ['check_solver_settings']

# float fields that must be finite (every real-valued hyper-parameter)
FINITE = ('base_lr', 'gamma', 'power', 'momentum', 'weight_decay', 'clip_gradients', 'delta', 'momentum2',
          'rms_decay', 'lars_eta')
# (field, lowest legal value)
AT_LEAST = (('base_lr', 0), ('momentum', 0), ('weight_decay', 0), ('delta', 0), ('momentum2', 0),
            ('rms_decay', 0), ('iter_size', 1), ('average_loss', 1), ('display', 0), ('max_iter', 0),
            ('snapshot', 0), ('test_interval', 0))
LONG_RUN = 10 ** 6  # forward passes implied by one setting that earn a warning


def check_solver_settings(p, where):
    """Raise SolverError for the first setting of ``p`` out of its legal range (``where``:
    the solver file, for the message); warn about settings that imply very long runs."""
    def refuse(field, value, legal):
        raise SolverError('%s: %s: %s is out of range (%s)' % (where, field, value, legal))

    for field in FINITE:
        value = getattr(p, field)
        if not math.isfinite(value):
            refuse(field, value, 'a finite number')
    for field, lowest in AT_LEAST:
        value = getattr(p, field)
        if value < lowest:
            refuse(field, value, '>= %s' % lowest)
    for i, value in enumerate(p.test_iter):
        if value < 1:
            refuse('test_iter' if len(p.test_iter) == 1 else 'test_iter #%d' % i, value, '>= 1')
    if list(p.stepvalue) != sorted(p.stepvalue):
        refuse('stepvalue', list(p.stepvalue), 'increasing')
    for field, value in (('iter_size', p.iter_size), ('test_iter', max(p.test_iter, default=0))):
        if value > LONG_RUN // 100:
            logger.warning('%s: %s: %d forward passes per %s: this may run for hours', where, field, value,
                           'iteration' if field == 'iter_size' else 'test')
