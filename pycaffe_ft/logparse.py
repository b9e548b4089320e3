"""``pycaffe-ft parse-log`` / ``plot-log``: Caffe training logs (ours or Caffe's) to CSV and plots,
with the regular expressions of Caffe's tools/extra/parse_log.py."""
import csv
import datetime
import io
import re

from .errors import CaffeError

__all__ = ['parse_log', 'write_csv', 'plot_log']

_ITERATION = re.compile(r'Iteration (\d+)')
_TRAIN_OUTPUT = re.compile(r'Train net output #(\d+): (\S+) = ([\.\deE+-]+)')
_TEST_OUTPUT = re.compile(r'Test net output #(\d+): (\S+) = ([\.\deE+-]+)')
_LEARNING_RATE = re.compile(r'lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)')


_GLOG_LINE = re.compile(r'[IWEF](\d{4}|\d{8}) \d\d:\d\d:\d\d\.\d+ +\d+ [^ \]]+\] ')
_ESCAPE = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')


def caffe_line(raw):
    """The glog line in ``raw``, or None: what a terminal would show (the text after the last
    carriage return, escape sequences removed), from its glog header on (a prefix such as
    mpiexec's ``[1,0]<stderr>:`` is dropped). Anything else is not a Caffe log line."""
    text = _ESCAPE.sub('', raw.rstrip('\n').rsplit('\r', 1)[-1])
    m = _GLOG_LINE.search(text)
    return text[m.start():] if m else None


def _time_of(line, year):
    parts = line.split()
    try:
        stamp = parts[0][1:]
        if len(stamp) == 8:  # newer glog: yyyymmdd
            year, stamp = int(stamp[:4]), stamp[4:]
        month, day = int(stamp[0:2]), int(stamp[2:4])
        clock = datetime.datetime.strptime(parts[1], '%H:%M:%S.%f')
        if (month, day) == (2, 29):
            year -= year % 4  # a leap day logged in an earlier year than this one
        return datetime.datetime(year, month, day, clock.hour, clock.minute, clock.second, clock.microsecond)
    except (IndexError, ValueError):
        return None


def parse_log(path):
    """(train rows, test rows): dicts with NumIters, Seconds, LearningRate and each output."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise CaffeError('cannot read log %s: %s' % (path, e)) from None
    year = datetime.date.today().year
    train, test = [], []
    iteration, lr, start = -1, float('nan'), None
    for raw in lines:
        line = caffe_line(raw)
        if line is None:
            continue
        when = _time_of(line, year)
        if when is not None and start is None:
            start = when
        seconds = (when - start).total_seconds() if when is not None and start is not None else float('nan')
        m = _ITERATION.search(line)
        if m:
            iteration = int(m.group(1))
        if iteration == -1:
            continue
        m = _LEARNING_RATE.search(line)
        if m:
            lr = float(m.group(1))
        for pattern, rows in ((_TRAIN_OUTPUT, train), (_TEST_OUTPUT, test)):
            m = pattern.search(line)
            if m:
                name, value = m.group(2), float(m.group(3))
                if not rows or rows[-1]['NumIters'] != iteration or name in rows[-1]:
                    rows.append({'NumIters': iteration, 'Seconds': seconds, 'LearningRate': lr})
                rows[-1][name] = value
    return train, test


def write_csv(rows, out):
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    writer = csv.DictWriter(out, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)


def plot_log(path, out, x='NumIters'):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise CaffeError('plot-log needs matplotlib: pip install matplotlib (or pip install '
                         '"pycaffe-ft[plot]")') from None
    train, test = parse_log(path)
    fig, ax = plt.subplots(figsize=(8, 5))
    for rows, kind in ((train, 'train'), (test, 'test')):
        names = sorted({k for r in rows for k in r} - {'NumIters', 'Seconds', 'LearningRate'})
        for name in names:
            pts = [(r[x], r[name]) for r in rows if name in r]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label='%s %s' % (kind, name))
    ax.set_xlabel(x)
    ax.legend()
    fig.savefig(out)
    return out


def csv_text(rows):
    buf = io.StringIO()
    write_csv(rows, buf)
    return buf.getvalue()
