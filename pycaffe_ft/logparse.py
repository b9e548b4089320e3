"""``pycaffe-ft parse-log`` / ``plot-log``: Caffe training logs (ours or Caffe's) to CSV and plots,
with the regular expressions of Caffe's tools/extra/parse_log.py."""
import csv
import datetime
import io
import re

from .errors import CaffeError

__all__ = ['parse_log', 'parse_recovery', 'write_csv', 'plot_log', 'plot_timeline']

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
    year = datetime.date.today().year
    train, test = [], []
    iteration, lr, start = -1, float('nan'), None
    for line in _lines(path):
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


_START = re.compile(r'Data-parallel training: (\d+) ranks')
_DISPLAY = re.compile(r'Iteration (\d+) \(([-+.\deE]+|inf|nan) iter/s, ([-+.\deE]+)s/(\d+) iters\)')
_RECOVERED = re.compile(r'Recovered from the failure of ranks \[([\d, ]*)\] at iteration (\d+) \((\w+)\).*'
                        r'total ([.\d]+)s; world size now (\d+)')
_NEW_ROOT = re.compile(r'Rank (\d+) is the new root')


def _lines(path):
    try:
        with open(path, errors='replace') as f:
            return [line for line in map(caffe_line, f) if line is not None]
    except OSError as e:
        raise CaffeError('cannot read log %s: %s' % (path, e)) from None


def parse_recovery(path):
    """A parallel run's log -> {'ranks': starting ranks (None for a serial log), 'iterations':
    [(seconds, iteration, seconds per iteration)] from the display lines, 'failures':
    [{'seconds', 'iter', 'dead', 'phase', 'recovery_s', 'alive', 'new_root'}]}; seconds count from
    the first log line."""
    year = datetime.date.today().year
    out = {'ranks': None, 'iterations': [], 'failures': []}
    start = None
    for line in _lines(path):
        when = _time_of(line, year)
        if when is None:
            continue
        start = start or when
        seconds = (when - start).total_seconds()
        m = _START.search(line)
        if m:
            out['ranks'] = int(m.group(1))
        m = _DISPLAY.search(line)
        if m and int(m.group(1)) > 0:
            out['iterations'].append((seconds, int(m.group(1)), float(m.group(3)) / max(int(m.group(4)), 1)))
        m = _RECOVERED.search(line)
        dead = [int(r) for r in m.group(1).split(',') if r.strip()] if m else None
        if m and any(f['iter'] == int(m.group(2)) and f['dead'] == dead for f in out['failures']):
            continue  # every survivor reports the same recovery
        if m:
            out['failures'].append({'seconds': seconds, 'iter': int(m.group(2)),
                                    'dead': dead,
                                    'phase': m.group(3), 'recovery_s': float(m.group(4)),
                                    'alive': int(m.group(5)), 'new_root': None})
        m = _NEW_ROOT.search(line)
        if m and out['failures']:
            out['failures'][-1]['new_root'] = int(m.group(1))
    return out


def plot_timeline(path, out):
    """The recovery timeline of a parallel run: iterations done, seconds per iteration and
    ranks alive over wall time, each failure marked with the ranks lost and its recovery time."""
    run = parse_recovery(path)
    if run['ranks'] is None:
        raise CaffeError('%s is not the log of a parallel run (no "Data-parallel training" line): '
                         'no recovery timeline to draw' % path)
    if not run['iterations']:
        raise CaffeError('%s has no "Iteration N (... iter/s ...)" lines (set display in the solver)' % path)
    plt = _pyplot()
    t = [p[0] for p in run['iterations']]
    end = max(t + [f['seconds'] for f in run['failures']])
    fig, (ax_iter, ax_time, ax_ranks) = plt.subplots(3, 1, sharex=True, figsize=(9, 7))
    ax_iter.plot(t, [p[1] for p in run['iterations']], '-', color='tab:blue')
    ax_iter.set_ylabel('iteration')
    ax_time.plot(t, [p[2] * 1e3 for p in run['iterations']], '.-', color='tab:green')
    ax_time.set_ylabel('ms / iteration')
    alive_t, alive = [0.0], [run['ranks']]
    for f in run['failures']:
        alive_t += [f['seconds'], f['seconds']]
        alive += [alive[-1], f['alive']]
    alive_t.append(end)
    alive.append(alive[-1])
    ax_ranks.plot(alive_t, alive, '-', color='tab:red')
    ax_ranks.set_ylabel('ranks alive')
    ax_ranks.set_ylim(0, run['ranks'] + 0.5)
    ax_ranks.set_xlabel('seconds since the first log line')
    for f in run['failures']:
        for ax in (ax_iter, ax_time, ax_ranks):
            ax.axvline(f['seconds'], color='gray', linestyle=':')
        label = 'rank%s %s lost at it. %d (%s), recovered in %.2f s' % (
            's' if len(f['dead']) > 1 else '', ','.join(map(str, f['dead'])), f['iter'], f['phase'], f['recovery_s'])
        if f['new_root'] is not None:
            label += '; new root: rank %d' % f['new_root']
        ax_ranks.annotate(label, (f['seconds'], f['alive']), textcoords='offset points', xytext=(4, 6),
                          fontsize=7, rotation=0)
    ax_iter.set_title('Recovery timeline: %d ranks at start, %d failures' % (run['ranks'], len(run['failures'])))
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def write_csv(rows, out):
    keys = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    writer = csv.DictWriter(out, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)


def _pyplot():
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        raise CaffeError('plot-log needs matplotlib: pip install matplotlib (or pip install '
                         '"pycaffe-ft[plot]")') from None
    return plt


def plot_log(path, out, x='NumIters'):
    plt = _pyplot()
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
    plt.close(fig)
    return out


def csv_text(rows):
    buf = io.StringIO()
    write_csv(rows, buf)
    return buf.getvalue()
