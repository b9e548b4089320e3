"""The live progress line of ``pycaffe-ft train`` on a terminal.

``[  700/10000   7.0%]  85.3 iter/s  5460 img/s  ETA 1:49  loss 0.1234  ranks 3/4``

It is drawn on stderr only when stderr is a terminal, is cleared before every log line (which
keeps Caffe's format exactly) and drawn again after it, and disappears at the end. In a
serial run the solver feeds it directly; in a ``--np`` run the root rank sends its numbers as
marker lines on stdout (:func:`report_line`) that the launcher, which owns the terminal, turns
into the same line (:class:`TerminalRelay`) and never prints.
"""
import json
import os
import shutil
import sys
import threading
import time

from ..log import set_line_guard

__all__ = ['ProgressLine', 'attach', 'report_line', 'TerminalRelay', 'MARKER', 'wanted']

MARKER = '\x1epycaffe-ft-progress '
_ENV = 'PYCAFFE_FT_PROGRESS'


def wanted(stream=None):
    """True when a progress line belongs on ``stream`` (stderr): a terminal that can erase."""
    stream = stream or sys.stderr
    try:
        return stream.isatty() and os.environ.get('TERM', '') != 'dumb'
    except (AttributeError, ValueError):
        return False


def _clock(seconds):
    seconds = int(seconds)
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return '%d:%02d:%02d' % (h, m, s) if h else '%d:%02d' % (m, s)


class ProgressLine:
    """Renders reports ``{iter, max_iter, loss, images, ranks, world}`` as one terminal line.

    ``update`` may be called every iteration: it redraws at most every ``interval`` seconds.
    The rate (and so the ETA) is measured over the last ``window`` seconds."""

    def __init__(self, stream=None, interval=0.2, window=10.0):
        self.stream = stream or sys.stderr
        self.interval, self.window = interval, window
        self.samples = []
        self.text = ''
        self.shown = False
        self.last_draw = 0.0
        self.lock = threading.RLock()

    def render(self, report, now):
        it, total = report['iter'], max(report.get('max_iter') or 0, 1)
        self.samples.append((now, it))
        while len(self.samples) > 2 and now - self.samples[1][0] > self.window:
            self.samples.pop(0)
        (t0, i0), (t1, i1) = self.samples[0], self.samples[-1]
        rate = (i1 - i0) / (t1 - t0) if t1 > t0 and i1 > i0 else None
        width = len(str(total))
        parts = ['[%*d/%d %5.1f%%]' % (width, it, total, 100.0 * it / total)]
        if rate:
            parts.append('%.1f iter/s' % rate)
            if report.get('images'):
                parts.append('%.0f img/s' % (rate * report['images']))
            parts.append('ETA %s' % _clock(max(0, total - it) / rate))
        if report.get('loss') is not None:
            parts.append('loss %.4g' % report['loss'])
        if report.get('world'):
            parts.append('ranks %d/%d' % (report['ranks'], report['world']))
        return '  '.join(parts)

    def update(self, report, force=False):
        now = time.monotonic()
        force = force or report['iter'] >= (report.get('max_iter') or 0)
        with self.lock:
            if not force and now - self.last_draw < self.interval:
                self.samples.append((now, report['iter']))
                if len(self.samples) > 1000:
                    del self.samples[1:-1]
                return
            self.text = self.render(report, now)
            self.last_draw = now
            self._draw()

    def _draw(self):
        columns = shutil.get_terminal_size((100, 20)).columns
        self.stream.write('\r\x1b[K' + self.text[:max(10, columns - 1)])
        self.stream.flush()
        self.shown = True

    def hide(self):
        """Erase the line (before a log line, or at the end)."""
        with self.lock:
            if self.shown:
                self.stream.write('\r\x1b[K')
                self.stream.flush()
                self.shown = False

    def show(self):
        """Draw the last text again (after a log line)."""
        with self.lock:
            if self.text and not self.shown:
                self._draw()

    def __enter__(self):
        set_line_guard(self)
        return self

    def __exit__(self, *exc):
        set_line_guard(None)
        self.hide()


def _report(solver):
    net = solver.net
    first_top = next((tops[0] for tops in net.top_names.values() if tops), None)
    batch = net.blobs[first_top].shape[0] if first_top and net.blobs[first_top].shape else 0
    workers = getattr(solver, 'V', 1)
    comm = getattr(solver, 'comm', None)
    world = None
    if comm is not None:
        world = comm.size + sum(len(f['dead']) for f in getattr(solver, 'failures', []))
    return {'iter': solver.iter + 1, 'max_iter': solver.param.max_iter, 'loss': float(solver.smoothed_loss),
            'images': batch * solver.param.iter_size * workers,
            'ranks': comm.size if comm is not None else None, 'world': world}


def attach(solver, sink):
    """Feed ``sink(report)`` after every iteration's gradients are ready."""
    solver.add_callback(on_gradients_ready=lambda: sink(_report(solver)))


def report_line(stream=None, interval=0.25):
    """For the root rank of a ``--np`` run started by a launcher on a terminal (the launcher sets
    ``PYCAFFE_FT_PROGRESS``): a sink writing marker lines, at most every ``interval`` s."""
    if os.environ.get(_ENV) != 'launcher':
        return None
    stream = stream or sys.stdout
    last = [0.0]

    def sink(report):
        now = time.monotonic()
        if now - last[0] >= interval or report['iter'] >= report['max_iter']:
            last[0] = now
            stream.write(MARKER + json.dumps(report) + '\n')
            stream.flush()
    return sink


class TerminalRelay:
    """The launcher's side: copies mpiexec's stdout and stderr to ours line by line, turning
    marker lines into the progress line (erased around every other line)."""

    def __init__(self, line=None):
        self.line = line or ProgressLine()

    @staticmethod
    def environment(env):
        env[_ENV] = 'launcher'
        return env

    def pump(self, source, target):
        """Copy ``source`` (a binary pipe) to ``target`` until EOF; run one thread per pipe."""
        for raw in iter(source.readline, b''):
            text = raw.decode('utf-8', 'replace')
            marker = text.find(MARKER)
            if marker >= 0:
                try:
                    self.line.update(json.loads(text[marker + len(MARKER):]))
                except ValueError:
                    pass
                text = text[:marker]
                if not text:
                    continue
                text += '\n'
            with self.line.lock:
                self.line.hide()
                target.write(text)
                target.flush()
                self.line.show()
        source.close()
