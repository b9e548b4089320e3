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

__all__ = ['logger', 'set_stream', 'set_line_guard', 'warn_once', 'set_min_level', 'log_to_stderr']

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


_GLOG_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR}


def _level_from_env():
    try:
        level = int(os.environ.get('GLOG_minloglevel', '0'))
    except ValueError:
        level = 0
    return _GLOG_LEVELS.get(level, logging.CRITICAL)


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
    """Send log lines to ``stream`` (a file object) instead of stderr; returns the previous one."""
    return _handler.setStream(stream)


def set_min_level(level):
    """glog's minloglevel: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL (only fatal lines)."""
    logger.setLevel(_GLOG_LEVELS.get(level, logging.CRITICAL))


_file_handler = []


def log_to_stderr(on):
    """glog's logtostderr: on, every line goes to stderr (the default here); off, the lines go
    to a glog log file (``<tmp>/pycaffe-ft.<host>.<user>.log.INFO.<date>-<time>.<pid>``) and
    only ERROR and FATAL lines to stderr too (glog's stderrthreshold). Returns the file's path
    while there is one, else None."""
    _handler.setLevel(logging.NOTSET if on else logging.ERROR)
    if on:
        while _file_handler:
            handler = _file_handler.pop()
            logger.removeHandler(handler)
            handler.close()
        return None
    if _file_handler:
        return _file_handler[0].baseFilename
    import getpass
    import socket
    import tempfile
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        user = 'invalid-user'  # (glog's own fallback)
    name = 'pycaffe-ft.%s.%s.log.INFO.%s.%d' % (socket.gethostname(), user,
                                                 datetime.datetime.now().strftime('%Y%m%d-%H%M%S'), os.getpid())
    handler = logging.FileHandler(os.path.join(tempfile.gettempdir(), name))
    handler.setFormatter(GlogFormatter())
    logger.addHandler(handler)
    _file_handler.append(handler)
    return handler.baseFilename


def set_line_guard(guard):
    """``guard`` (with ``lock``, ``hide()`` and ``show()``) is asked to hide its terminal line before
    each log line and to show it after; ``None`` removes it."""
    _handler.guard = guard


_warned = set()


def warn_once(key, message, *args):
    if key not in _warned:
        _warned.add(key)
        logger.warning(message, *args, stacklevel=2)
