"""pycaffe's process-wide helpers from ``_caffe``: glog set-up (``init_log``, ``log``), the
multi-solver bookkeeping (``solver_count``, ``solver_rank``, ``set_multiprocess``,
``has_nccl``) and ``Timer``.

A solver of rank r in a count of S (``set_solver_count``/``set_solver_rank``, which Caffe's
multi-GPU ``train.py`` calls in each worker before making its solver) behaves as Caffe's: only
rank 0, the root solver, builds test nets, tests, displays and snapshots, and a TRAIN-phase
Data layer reads every S-th record starting at record r (Caffe's ``DataLayer::Skip``). Caffe
keeps these per thread; here they are per process (one solver a process).
"""
import time

from .log import log_to_stderr, logger, set_min_level

__all__ = ['init_log', 'log', 'has_nccl', 'solver_count', 'set_solver_count', 'solver_rank', 'set_solver_rank',
           'multiprocess', 'set_multiprocess', 'Timer']

_state = {'count': 1, 'rank': 0, 'multiprocess': False}


def init_log(level=None, stderr=None):
    """glog's set-up, as pycaffe's ``init_log()``, ``init_log(level)`` and ``init_log(level,
    stderr)``: ``level`` is glog's minloglevel (0 INFO, 1 WARNING, 2 ERROR, 3 FATAL); with
    ``stderr`` false (glog's logtostderr off) the lines go to a glog log file in the temporary
    directory and only errors to stderr. Returns nothing."""
    if level is not None:
        if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 3:
            raise ValueError('init_log: level is glog\'s minloglevel, 0 (INFO) to 3 (FATAL); got %r' % (level,))
        set_min_level(level)
    if stderr is not None:
        log_to_stderr(bool(stderr))


def log(message):
    """Write ``message`` as an INFO line (pycaffe's ``caffe.log``)."""
    logger.info('%s', message, stacklevel=2)


def has_nccl():
    """False: pycaffe-ft has no NCCL (data-parallel training is ``pycaffe-ft train --np N``)."""
    return False


def _whole(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError('%s wants a whole number >= %d, got %r' % (name, low, value))
    return value


def solver_count():
    return _state['count']


def set_solver_count(count):
    _state['count'] = _whole('set_solver_count', count, 1)


def solver_rank():
    return _state['rank']


def set_solver_rank(rank):
    _state['rank'] = _whole('set_solver_rank', rank, 0)


def multiprocess():
    return _state['multiprocess']


def set_multiprocess(flag):
    _state['multiprocess'] = bool(flag)


class Timer:
    """Caffe's CPU ``Timer``: ``start()``, ``stop()``, and ``ms``, the milliseconds between the last
    start and stop (a running timer is stopped first; 0 with a warning if never started)."""

    def __init__(self):
        self._start = self._stop = None
        self.running = False

    def start(self):
        if not self.running:
            self._start, self.running = time.perf_counter(), True

    def stop(self):
        if self.running:
            self._stop, self.running = time.perf_counter(), False

    @property
    def ms(self):
        if self._start is None:
            logger.warning('Timer has never been run before reading time.')
            return 0.0
        self.stop()
        return (self._stop - self._start) * 1000.0
