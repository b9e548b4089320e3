"""The pycaffe-ft command line: help, info, time, gflags spellings, clear errors."""
import os
import subprocess
import sys

from pycaffe_ft import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gflags_spellings_are_normalized():
    assert cli.normalize_gflags(['-model', 'm', '-iterations=3', '--phase=TEST', '-x']) == \
        ['--model', 'm', '--iterations=3', '--phase=TEST', '-x']


def test_help_lists_commands(capsys):
    try:
        cli.main(['--help'])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    for name in ('info', 'time', 'upgrade-net', 'upgrade-solver'):
        assert name in out


def test_info_reports_versions_and_mpi(capsys):
    assert cli.main(['info']) == 0
    out = capsys.readouterr().out
    assert 'numpy' in out and 'numba' in out and 'ULFM' in out and 'BLAS' in out


def test_time_prints_caffe_style_report_with_synthetic_data(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the model's relative LMDB paths do not exist here
    model = os.path.join(ROOT, 'models', 'lenet', 'lenet_train_test.prototxt')
    assert cli.main(['time', '-model', model, '-iterations', '2']) == 0
    out = capsys.readouterr().out
    assert 'synthetic' in out and '*** Benchmark begins ***' in out
    assert 'conv1\tforward:' in out and 'conv1\tbackward:' in out
    assert 'Average Forward-Backward:' in out and 'Total Time:' in out


def test_errors_are_messages_not_tracebacks(tmp_path):
    bad = tmp_path / 'bad.prototxt'
    bad.write_text('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
                   'layer { name: "p" type: "Pooling" bottom: "x" top: "p" pooling_param { ceil_mode: true } }\n')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'time', '--model', str(bad)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr
    assert 'bad.prototxt:2' in proc.stderr and 'ceil_mode' in proc.stderr
