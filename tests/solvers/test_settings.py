"""Solver settings out of their legal range are refused when the solver is built, naming the
file, the field and the value; from the CLI as one line and a non-zero exit."""
import subprocess
import sys

import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import SolverError

NET = '''layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 2 dim: 3 }
          shape { dim: 2 } data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }
'''
BASE = 'net: "net.prototxt" base_lr: 0.01 lr_policy: "fixed" max_iter: 2 display: 1 snapshot_after_train: false\n'


def solver_file(tmp_path, extra):
    (tmp_path / 'net.prototxt').write_text(NET)
    path = tmp_path / 'solver.prototxt'
    path.write_text(BASE + extra)
    return path


@pytest.mark.parametrize('extra, field, value', [
    ('test_iter: 0 test_interval: 1', 'test_iter', '0'),
    ('average_loss: 0', 'average_loss', '0'),
    ('iter_size: 0', 'iter_size', '0'),
    ('iter_size: -1', 'iter_size', '-1'),
    ('power: nan', 'power', 'nan'),
    ('weight_decay: nan', 'weight_decay', 'nan'),
    ('momentum: inf', 'momentum', 'inf'),
    ('gamma: -inf', 'gamma', '-inf'),
    ('momentum: -0.5', 'momentum', '-0.5'),
    ('display: -5', 'display', '-5'),
    ('lr_policy: "multistep" stepvalue: 5 stepvalue: 3', 'stepvalue', '[5, 3]'),
])
def test_out_of_range_settings_are_refused(tmp_path, monkeypatch, extra, field, value):
    path = solver_file(tmp_path, extra)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SolverError) as e:
        caffe.get_solver(str(path))
    message = str(e.value)
    assert str(path) in message and '%s: %s is out of range' % (field, value) in message


def test_the_cli_says_it_in_one_line(tmp_path):
    solver_file(tmp_path, 'iter_size: 0')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt'],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [l for l in proc.stderr.splitlines() if 'error' in l]
    assert lines == ['pycaffe-ft train: error: solver.prototxt: iter_size: 0 is out of range (>= 1)']
    assert 'Traceback' not in proc.stderr


def test_settings_that_imply_hours_are_a_warning(tmp_path, monkeypatch, caplog):
    path = solver_file(tmp_path, 'iter_size: 100000')
    monkeypatch.chdir(tmp_path)
    with caplog.at_level('WARNING', logger='pycaffe_ft'):
        caffe.get_solver(str(path))
    assert any('iter_size: 100000 forward passes per iteration' in r.getMessage() for r in caplog.records)
