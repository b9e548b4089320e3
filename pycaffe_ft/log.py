"""glog-style logging, as Caffe writes it (so Caffe's parse_log.py reads our logs).

Each line: ``I1129 16:20:01.123456  1234 solver.py:210] message`` (severity letter I/W/E/F,
month-day, time with microseconds, thread id, file:line). Verbosity follows
``GLOG_minloglevel`` (0 INFO, 1 WARNING, 2 ERROR); lines go to stderr like glog's default,
or to ``GLOG_log_file`` style targets set with :func:`set_stream`.
"""
import datetime
import logging
import os
import sys
import threading

__all__ = ['logger', 'set_stream', 'set_line_guard', 'warn_once']

_LETTER = {logging.DEBUG: 'I', logging.INFO: 'I', logging.WARNING: 'W', logging.ERROR: 'E',
           logging.CRITICAL: 'F'}


class GlogFormatter(logging.Formatter):
    def format(self, record):
        t = datetime.datetime.fromtimestamp(record.created)
        prefix = '%s%s %5d %s:%d] ' % (_LETTER.get(record.levelno, 'I'),
                                       t.strftime('%m%d %H:%M:%S.%f'),
                                       threading.get_native_id() % 100000,
                                       os.path.basename(record.pathname), record.lineno)
        return prefix + record.getMessage()


def _level_from_env():
    try:
        level = int(os.environ.get('GLOG_minloglevel', '0'))
    except ValueError:
        level = 0
    return {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR}.get(level, logging.CRITICAL)


class _GuardedHandler(logging.StreamHandler):
    """A stream handler that lets a live terminal line (see :func:`set_line_guard`) step aside
    while a log line is written."""
    guard = None

    def emit(self, record):
        guard = self.guard
        if guard is None:
            return super().emit(record)
        with guard.lock:
            guard.hide()
            super().emit(record)
            guard.show()


logger = logging.getLogger('pycaffe_ft')
logger.propagate = False
_handler = _GuardedHandler(sys.stderr)
_handler.setFormatter(GlogFormatter())
logger.addHandler(_handler)
logger.setLevel(_level_from_env())


def set_stream(stream):
    """Send log lines to ``stream`` (a file object) instead of stderr."""
    _handler.setStream(stream)


def set_line_guard(guard):
    """``guard`` (with ``lock``, ``hide()`` and ``show()``) is asked to hide its terminal line before
    each log line and to show it after; ``None`` removes it."""
    _handler.guard = guard


_warned = set()


def warn_once(key, message, *args):
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args, stacklevel=2)
